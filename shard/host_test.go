package shard

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func openHost(t *testing.T, dir string, shards int) *Host {
	t.Helper()
	return openHostAt(t, dir, freeAddr(t), shards)
}

// openHostAt reopens a data dir: dragonboat ties it to its Raft address.
func openHostAt(t *testing.T, dir, addr string, shards int) *Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Open(ctx, Config{DataDir: dir, RaftAddress: addr, Shards: shards, Logger: zerolog.Nop(), RTTMillisecond: 10, ElectionRTT: 10})
	require.NoError(t, err)
	return h
}

func enqueueOp(shard int, queue string) *statemachine.EnqueueOp {
	return &statemachine.EnqueueOp{Job: statemachine.Job{ID: router.JobID(shard, ulid.Make()), Queue: queue, Payload: []byte(`{}`),
		JobOptions: statemachine.JobOptions{Priority: statemachine.PriorityNormal, MaxRetries: 3, Backoff: statemachine.BackoffExponential, BaseDelayMs: 5000}}}
}

func TestShardProposeCoalescesAndSurvivesRestart(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	h := openHostAt(t, dir, addr, 2)
	ctx := context.Background()

	watch := h.Watch("q")
	require.False(t, h.Fetchable("q"))
	const n = 200
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			op := enqueueOp(1, "q")
			ids[i] = op.Job.ID
			rs, err := h.Propose(ctx, 1, op)
			require.NoError(t, err)
			require.Len(t, rs, 1)
			require.Equal(t, statemachine.StatusOK, rs[0].Status)
		}(i)
	}
	wg.Wait()
	<-watch // closed by the first enqueue
	require.True(t, h.Fetchable("q"))
	require.Equal(t, int64(n), h.Pending("q"))

	v, err := h.Read(1, statemachine.GetJobQuery{ID: ids[7]})
	require.NoError(t, err)
	require.Equal(t, statemachine.StatePending, v.(*statemachine.JobView).State.State)
	h.Close()

	h = openHostAt(t, dir, addr, 2)
	defer h.Close()
	require.Equal(t, int64(n), h.Pending("q"), "signals seeded from disk at start")
	rs, err := h.Propose(ctx, 1, &statemachine.FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 1000})
	require.NoError(t, err)
	require.Len(t, rs[0].Jobs, n, "every acknowledged enqueue survived the restart")
}

func TestShardLeaderTickerPromotes(t *testing.T) {
	h := openHost(t, t.TempDir(), 1)
	defer h.Close()
	op := enqueueOp(0, "later")
	op.Job.ScheduledAt = time.Now().Add(300 * time.Millisecond).UnixNano()
	watch := h.Watch("later")
	rs, err := h.Propose(context.Background(), 0, op)
	require.NoError(t, err)
	require.Equal(t, statemachine.StateScheduled, rs[0].State)
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("scheduled job was never promoted")
	}
	require.True(t, h.Fetchable("later"))
}

func TestShardConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{RaftAddress: "x"},
		{DataDir: "d"},
		{DataDir: "d", RaftAddress: "x", Shards: 2000},
		{DataDir: "d", RaftAddress: "x", ProposalTimeout: time.Minute},
	} {
		require.Error(t, c.WithDefaults().Validate(), fmt.Sprintf("%+v", c))
	}
	require.NoError(t, Config{DataDir: "d", RaftAddress: "x"}.WithDefaults().Validate())
}

// fakeClock is a settable clock shared by the tickers and the proposer.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestShardCronTicker: the leader's ticker fires a schedule when its run is
// due on the (injected) clock, once.
func TestShardCronTicker(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Open(ctx, Config{DataDir: t.TempDir(), RaftAddress: freeAddr(t), Shards: 1, Logger: zerolog.Nop(),
		RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 10 * time.Millisecond, Clock: clock})
	require.NoError(t, err)
	defer h.Close()
	rs, err := h.Propose(ctx, 0, &statemachine.ScheduleOp{Schedule: statemachine.Schedule{ID: "sched_0_t", Name: "t", Queue: "cron", Cron: "* * * * *", Timezone: "UTC"}})
	require.NoError(t, err)
	require.Equal(t, statemachine.StatusOK, rs[0].Status)
	watch := h.Watch("cron")
	require.False(t, h.Fetchable("cron"))
	clock.Add(time.Minute)
	select {
	case <-watch:
	case <-ctx.Done():
		t.Fatal("the schedule never fired")
	}
	require.Equal(t, int64(1), h.Pending("cron"))
}

// A node removed from a shard's group no longer hosts it: proposals and
// reads answer ErrUnavailable (503, retry elsewhere), not an internal error.
func TestShardNotHostedIsUnavailable(t *testing.T) {
	h := openHost(t, t.TempDir(), 2)
	defer h.Close()
	require.NoError(t, h.nh.StopShard(ShardID(1)))
	_, err := h.Propose(context.Background(), 1, enqueueOp(1, "q"))
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = h.Read(1, statemachine.GetJobQuery{ID: router.JobID(1, ulid.Make())})
	require.ErrorIs(t, err, ErrUnavailable)
	// The other shard still serves.
	rs, err := h.Propose(context.Background(), 0, enqueueOp(0, "q0"))
	require.NoError(t, err)
	require.Equal(t, statemachine.StatusOK, rs[0].Status)
}

// TestShardKeysReplicateThroughMetaAndSurviveRestart: the key table is
// meta-group state, read lock-free after a change and rebuilt on restart.
func TestShardKeysReplicateThroughMetaAndSurviveRestart(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	h := openHostAt(t, dir, addr, 1)
	ctx := context.Background()
	require.Equal(t, 0, h.Keys().Len())
	key, id, hash := auth.NewKey()
	k := auth.Key{ID: id, Hash: hash, Name: "ci", Namespace: "default", Role: auth.RoleWorker, Enabled: true, CreatedAt: 1}
	changed, err := h.ProposeKeys(ctx, auth.Cmd{Op: "put", Key: &k})
	require.NoError(t, err)
	require.True(t, changed)
	got, refusal := h.Keys().Authenticate([]byte(key), 2)
	require.Equal(t, auth.Accepted, refusal)
	require.Equal(t, "ci", got.Name)
	changed, err = h.ProposeKeys(ctx, auth.Cmd{Op: "put", Key: &k})
	require.NoError(t, err)
	require.False(t, changed, "a second put of one ID changed the table")
	changed, err = h.ProposeKeys(ctx, auth.Cmd{Op: "touch", Touch: map[string]int64{id: 42}})
	require.NoError(t, err)
	require.True(t, changed)
	h.Close()

	h = openHostAt(t, dir, addr, 1)
	defer h.Close()
	k2, ok := h.Keys().Key(id)
	require.True(t, ok, "the key did not survive a restart")
	require.Equal(t, int64(42), k2.LastUsedAt)
	_, refusal = h.Keys().Authenticate([]byte(key), 2)
	require.Equal(t, auth.Accepted, refusal)
}

// TestShardAuditRetention: the leader's ticker prunes audit records older
// than AuditRetention on the (injected) clock, and keeps newer ones.
func TestShardAuditRetention(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Open(ctx, Config{DataDir: t.TempDir(), RaftAddress: freeAddr(t), Shards: 1, Logger: zerolog.Nop(),
		RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 10 * time.Millisecond, SweepInterval: 10 * time.Millisecond,
		AuditRetention: time.Hour, Clock: clock})
	require.NoError(t, err)
	defer h.Close()
	audit := func(id string) {
		rs, err := h.Propose(ctx, 0, &statemachine.AuditOp{Record: statemachine.AuditRecord{ID: id, Namespace: "default", Method: "POST", Path: "/x"}})
		require.NoError(t, err)
		require.Equal(t, statemachine.StatusOK, rs[0].Status, rs[0].Message)
	}
	ids := func() []string {
		v, err := h.Read(0, statemachine.AuditQuery{})
		require.NoError(t, err)
		var out []string
		for _, r := range v.(statemachine.AuditPage).Records {
			out = append(out, r.ID)
		}
		return out
	}
	audit("old")
	clock.Add(50 * time.Minute)
	audit("new")
	require.Equal(t, []string{"new", "old"}, ids())
	clock.Add(20 * time.Minute) // "old" is 70 minutes old, "new" 20
	for !slices.Equal(ids(), []string{"new"}) {
		require.NoError(t, ctx.Err(), "the old record was never pruned: %v", ids())
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShardProposalsWithinMemoryBudget: queued proposals are accounted
// against the memory budget; one that does not fit gets ErrBusy, and what
// was taken is given back once answered.
func TestShardProposalsWithinMemoryBudget(t *testing.T) {
	b := membudget.New(membudget.Plan{Total: 1 << 30, Pool: 4 << 10})
	acct := b.Account("test_proposals", 4<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Open(ctx, Config{DataDir: t.TempDir(), RaftAddress: freeAddr(t), Shards: 1, Logger: zerolog.Nop(), RTTMillisecond: 10,
		ElectionRTT: 10, Proposals: acct})
	require.NoError(t, err)
	defer h.Close()
	big := enqueueOp(0, "q")
	big.Job.Payload = []byte(`"` + strings.Repeat("x", 8<<10) + `"`)
	_, err = h.Propose(ctx, 0, big)
	require.ErrorIs(t, err, ErrBusy)
	rs, err := h.Propose(ctx, 0, enqueueOp(0, "q"))
	require.NoError(t, err)
	require.Equal(t, statemachine.StatusOK, rs[0].Status)
	require.Zero(t, acct.Used())
	// A parked fetch rides in the enqueue's entry without taking from the
	// budget, so serving it gives nothing back: the account stays at zero
	// (it drifted 64 bytes below per served fetch, loosening the bound).
	pk := h.Park(0, &statemachine.FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 1}, nil)
	_, err = h.Propose(ctx, 0, enqueueOp(0, "q"))
	require.NoError(t, err)
	jobs, err := (<-pk.Result()).Jobs()
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Zero(t, acct.Used())
}

// TestShardProposeWithin: a proposal bounded by a timeout (no context)
// commits within it; one whose deadline passed before its entry was made
// answers DeadlineExceeded and is never applied. Alternating the two
// reuses the pooled timers: a stale tick from a stopped one would end a
// later wait at once.
func TestShardProposeWithin(t *testing.T) {
	h := openHost(t, t.TempDir(), 1)
	defer h.Close()
	for i := 0; i < 20; i++ {
		late := enqueueOp(0, "within")
		_, err := h.ProposeWithin(time.Nanosecond, 0, late)
		require.ErrorIs(t, err, context.DeadlineExceeded, "round %d", i)

		op := enqueueOp(0, "within")
		rs, err := h.ProposeWithin(10*time.Second, 0, op)
		require.NoError(t, err, "round %d", i)
		require.Equal(t, statemachine.StatusOK, rs[0].Status)

		// Read after a later commit: the late op had been answered before
		// its entry was made, so it cannot be in one.
		v, err := h.Read(0, statemachine.GetJobQuery{ID: late.Job.ID})
		require.NoError(t, err)
		require.Nil(t, v.(*statemachine.JobView), "round %d: a proposal past its deadline was applied", i)
	}
	require.Equal(t, int64(20), h.Pending("within"))
}
