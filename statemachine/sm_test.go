package statemachine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"
)

// testBundle drives one state machine with explicit times, as the shard
// proposer would.
type testBundle struct {
	t     testing.TB
	sm    *StateMachine
	dir   string
	index uint64
	now   time.Time
	rnd   *rand.Rand
	log   [][]byte // every entry applied, for replay

	jobCache int64
	fs       vfs.FS   // nil: the OS's
	listener Listener // nil: none
	shardID  uint64   // 0: 1
	handoff  *Handoff // nil: results come encoded (applyRaw)
}

func setup(t testing.TB) *testBundle { return setupWith(t, 0) }

// setupWith sets the job cache size (negative: off).
func setupWith(t testing.TB, jobCache int64) *testBundle {
	t.Helper()
	tb := &testBundle{t: t, dir: t.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2)), jobCache: jobCache}
	tb.open()
	t.Cleanup(func() { _ = tb.sm.Close() })
	return tb
}

func (tb *testBundle) open() {
	tb.sm = New(Config{ShardID: max(tb.shardID, 1), Dir: tb.dir, JobCacheBytes: tb.jobCache, FS: tb.fs, Listener: tb.listener, Handoff: tb.handoff})
	idx, err := tb.sm.Open(nil)
	require.NoError(tb.t, err)
	tb.index = idx
}

func (tb *testBundle) reopen() {
	require.NoError(tb.t, tb.sm.Close())
	tb.open()
}

// restored is a new state machine restored from a snapshot of tb's, at
// tb's index and time.
func (tb *testBundle) restored() *testBundle {
	tb.t.Helper()
	ctx, err := tb.sm.PrepareSnapshot()
	require.NoError(tb.t, err)
	var buf bytes.Buffer
	require.NoError(tb.t, tb.sm.SaveSnapshot(ctx, &buf, nil))
	other := setup(tb.t)
	require.NoError(tb.t, other.sm.RecoverFromSnapshot(&buf, nil))
	other.index, other.now = other.sm.Applied(), tb.now
	return other
}

func (tb *testBundle) advance(d time.Duration) { tb.now = tb.now.Add(d) }

func (tb *testBundle) newID() string {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(tb.now))
	for i := 6; i < 16; i++ {
		u[i] = byte(tb.rnd.Uint32())
	}
	return "job_0_" + u.String()
}

func (tb *testBundle) entry(ops ...Op) []byte {
	e := Entry{ID: NewEntryID(tb.now.UnixNano(), tb.rnd.Uint64()), Now: tb.now.UnixNano(), Ops: ops}
	return e.Encode(nil)
}

func (tb *testBundle) applyRaw(cmd []byte) []Result {
	tb.t.Helper()
	tb.index++
	tb.log = append(tb.log, cmd)
	out, err := tb.sm.Update([]sm.Entry{{Index: tb.index, Cmd: cmd}})
	require.NoError(tb.t, err)
	require.Equal(tb.t, ResultApplied, out[0].Result.Value)
	rs, err := DecodeResults(out[0].Result.Data)
	require.NoError(tb.t, err)
	return rs
}

func (tb *testBundle) apply(ops ...Op) []Result { return tb.applyRaw(tb.entry(ops...)) }

func (tb *testBundle) one(op Op) Result { return tb.apply(op)[0] }

func (tb *testBundle) enqueue(queue string, prio Priority, mut ...func(*Job)) string {
	j := Job{ID: tb.newID(), Queue: queue, Payload: []byte(`{"n":1}`), JobOptions: DefaultJobOptions()}
	j.Priority = prio
	for _, m := range mut {
		m(&j)
	}
	r := tb.one(&EnqueueOp{Job: j})
	require.Equal(tb.t, StatusOK, r.Status, r.Message)
	return j.ID
}

func (tb *testBundle) fetch(n int, queues ...string) []JobView {
	return tb.one(&FetchOp{Queues: queues, WorkerID: "w1", Hostname: "h", Count: uint32(n)}).Jobs
}

func (tb *testBundle) get(id string) *JobView {
	v, err := tb.sm.Lookup(GetJobQuery{ID: id})
	require.NoError(tb.t, err)
	jv, _ := v.(*JobView)
	return jv
}

func (tb *testBundle) schedule(id string) Schedule {
	v, err := tb.sm.Lookup(SchedulesQuery{})
	require.NoError(tb.t, err)
	for _, sc := range v.([]Schedule) {
		if sc.ID == id {
			return sc
		}
	}
	tb.t.Fatalf("no schedule %s", id)
	return Schedule{}
}

func (tb *testBundle) dump() []string {
	it, err := tb.sm.db.NewIter(nil)
	require.NoError(tb.t, err)
	defer it.Close()
	var out []string
	for it.First(); it.Valid(); it.Next() {
		out = append(out, fmt.Sprintf("%q=%x", it.Key(), it.Value()))
	}
	return out
}

func TestStateMachineLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("emails", PriorityNormal)
	require.Equal(t, StatePending, tb.get(id).State.State)

	jobs := tb.fetch(1, "emails")
	require.Len(t, jobs, 1)
	require.Equal(t, id, jobs[0].Job.ID)
	require.Equal(t, uint32(1), jobs[0].State.Attempt)
	require.Equal(t, tb.now.Add(60*time.Second).UnixNano(), jobs[0].State.LeaseExpiresAt)
	require.Empty(t, tb.fetch(1, "emails"), "a leased job is never handed out twice")

	r := tb.one(&AckOp{JobID: id, Holder: Holder{WorkerID: "other"}})
	require.Equal(t, StatusConflict, r.Status)
	r = tb.one(&AckOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}, Result: []byte(`{"ok":true}`)})
	require.Equal(t, StatusOK, r.Status)
	v := tb.get(id)
	require.Equal(t, StateCompleted, v.State.State)
	require.JSONEq(t, `{"ok":true}`, string(v.State.Result))
	require.Equal(t, StatusConflict, tb.one(&AckOp{JobID: id}).Status, "a second ack conflicts")
	require.Equal(t, StatusNotFound, tb.one(&AckOp{JobID: "job_0_nope"}).Status)

	qs, err := tb.sm.Lookup(ListQueuesQuery{})
	require.NoError(t, err)
	infos := qs.([]QueueInfo)
	require.Len(t, infos, 1)
	require.Equal(t, int64(1), infos[0].Stats.Counts[StateCompleted])
	require.Equal(t, int64(0), infos[0].Stats.Counts[StatePending]+infos[0].Stats.Counts[StateActive])
	require.Equal(t, int64(1), infos[0].Stats.Enqueued)
}

func TestStateMachinePriorityAndFIFO(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var want []string
	n1 := tb.enqueue("a", PriorityNormal)
	tb.advance(time.Millisecond)
	h1 := tb.enqueue("b", PriorityHigh)
	tb.advance(time.Millisecond)
	n2 := tb.enqueue("b", PriorityNormal)
	tb.advance(time.Millisecond)
	c1 := tb.enqueue("a", PriorityCritical)
	h2 := tb.enqueue("a", PriorityHigh) // same time as c1: entry order breaks ties
	want = []string{c1, h1, h2, n1, n2}
	var got []string
	for range want {
		jobs := tb.fetch(1, "a", "b")
		require.Len(t, jobs, 1)
		got = append(got, jobs[0].Job.ID)
	}
	require.Equal(t, want, got)
	// A job that goes back to pending keeps its place.
	tb.enqueue("a", PriorityNormal)
	r := tb.one(&FailOp{JobID: n1, Error: "x"})
	require.Equal(t, StateRetrying, r.State)
}

func TestStateMachineFetchBatchAndPause(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i := 0; i < 10; i++ {
		tb.enqueue("q", PriorityNormal)
	}
	require.Equal(t, StatusOK, tb.one(&PauseQueueOp{Queue: "q"}).Status)
	require.Empty(t, tb.fetch(5, "q"), "paused queues are skipped")
	tb.one(&ResumeQueueOp{Queue: "q"})
	require.Len(t, tb.fetch(4, "q"), 4)
	require.Len(t, tb.fetch(100, "q"), 6)
	require.Empty(t, tb.fetch(1, "q", "unknown"))
}

func TestBackoffDelayMs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		b    Backoff
		want []int64
	}{
		{BackoffNone, []int64{0, 0, 0, 0}},
		{BackoffFixed, []int64{5000, 5000, 5000, 5000}},
		{BackoffLinear, []int64{5000, 10000, 15000, 20000}},
		{BackoffExponential, []int64{5000, 10000, 20000, 40000}},
	} {
		for i, w := range c.want {
			require.Equal(t, w, BackoffDelayMs(c.b, 5000, 600000, uint32(i+1)), "%s attempt %d", c.b, i+1)
		}
	}
	require.Equal(t, int64(600000), BackoffDelayMs(BackoffExponential, 5000, 600000, 20), "capped")
	require.Equal(t, int64(600000), BackoffDelayMs(BackoffExponential, 5000, 600000, 4000), "no overflow")
	require.Equal(t, int64(30000), BackoffDelayMs(BackoffLinear, 10000, 30000, 7))
}

func TestStateMachineRetryThenDead(t *testing.T) {
	t.Parallel()
	for _, b := range []Backoff{BackoffNone, BackoffFixed, BackoffLinear, BackoffExponential} {
		t.Run(b.String(), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 5; j.Backoff = b })
			for attempt := uint32(1); attempt <= 5; attempt++ {
				jobs := tb.fetch(1, "q")
				require.Len(t, jobs, 1, "attempt %d", attempt)
				require.Equal(t, attempt, jobs[0].State.Attempt)
				r := tb.one(&FailOp{JobID: id, Error: fmt.Sprintf("boom %d", attempt), Backtrace: "at x:1"})
				require.Equal(t, StatusOK, r.Status)
				require.Equal(t, 5-attempt, r.AttemptsRemaining)
				if attempt == 5 {
					require.Equal(t, StateDead, r.State)
					break
				}
				delay := BackoffDelayMs(b, 5000, 600000, attempt)
				require.Equal(t, tb.now.UnixNano()+delay*1e6, r.NextAttemptAt)
				if delay > 0 {
					require.Equal(t, StateRetrying, r.State)
					require.Empty(t, tb.fetch(1, "q"), "not before the backoff")
					tb.advance(time.Duration(delay-1) * time.Millisecond)
					require.Zero(t, tb.one(&PromoteOp{}).Count)
					tb.advance(time.Millisecond)
					require.Equal(t, uint32(1), tb.one(&PromoteOp{}).Count)
				} else {
					require.Equal(t, StatePending, r.State)
				}
			}
			v := tb.get(id)
			require.Equal(t, StateDead, v.State.State)
			require.Equal(t, "max_retries", v.State.Reason)
			require.Len(t, v.Errors, 5)
			for i, e := range v.Errors {
				require.Equal(t, uint32(i+1), e.Attempt)
				require.Equal(t, fmt.Sprintf("boom %d", i+1), e.Error)
				require.Equal(t, "at x:1", e.Backtrace)
			}
		})
	}
}

func TestStateMachineMaxRetriesZero(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
	tb.fetch(1, "q")
	r := tb.one(&FailOp{JobID: id, Error: "x"})
	require.Equal(t, StateDead, r.State)
	require.Zero(t, r.AttemptsRemaining)
}

func TestStateMachineReclaimKeepsCheckpoint(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.LeaseSeconds = 10 })
	tb.fetch(1, "q")
	hb := tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Checkpoint: []byte(`{"offset":47000}`), Progress: []byte(`{"current":1}`)}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatOK}, hb.Heartbeats)
	tb.advance(9 * time.Second)
	require.Zero(t, tb.one(&ReclaimOp{}).Count, "lease was extended by the heartbeat")
	tb.advance(time.Second)
	require.Equal(t, uint32(1), tb.one(&ReclaimOp{}).Count)
	v := tb.get(id)
	require.Equal(t, StatePending, v.State.State)
	require.Len(t, v.Errors, 1)

	jobs := tb.fetch(1, "q")
	require.Len(t, jobs, 1)
	require.Equal(t, uint32(2), jobs[0].State.Attempt)
	require.JSONEq(t, `{"offset":47000}`, string(jobs[0].State.Checkpoint))
	hb = tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id}, {JobID: "job_0_missing"}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatOK, HeartbeatNotFound}, hb.Heartbeats)
	hb = tb.one(&HeartbeatOp{WorkerID: "w2", Jobs: []HeartbeatJob{{JobID: id}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatLost}, hb.Heartbeats)
}

func TestStateMachineCancel(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	pending := tb.enqueue("q", PriorityNormal)
	scheduled := tb.enqueue("q", PriorityNormal, func(j *Job) { j.ScheduledAt = tb.now.Add(time.Hour).UnixNano() })
	require.Equal(t, StateScheduled, tb.get(scheduled).State.State)
	require.Equal(t, StateCancelled, tb.one(&CancelOp{JobID: pending}).State)
	require.Equal(t, StateCancelled, tb.one(&CancelOp{JobID: scheduled}).State)
	require.Equal(t, StatusConflict, tb.one(&CancelOp{JobID: pending}).Status)
	tb.advance(2 * time.Hour)
	require.Zero(t, tb.one(&PromoteOp{}).Count, "a cancelled scheduled job is not promoted")

	active := tb.enqueue("q", PriorityNormal)
	require.Len(t, tb.fetch(1, "q"), 1)
	r := tb.one(&CancelOp{JobID: active})
	require.Equal(t, StateActive, r.State, "cancelling: delivered on the next heartbeat")
	hb := tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: active}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatCancel}, hb.Heartbeats)
	require.Equal(t, StateCancelled, tb.get(active).State.State)
	require.Equal(t, StatusConflict, tb.one(&AckOp{JobID: active}).Status)
}

func TestStateMachineExpiredNeverHandedOut(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.ExpireAfterMs = 1000 })
	tb.advance(time.Second)
	require.Empty(t, tb.fetch(1, "q"))
	v := tb.get(id)
	require.Equal(t, StateDead, v.State.State)
	require.Equal(t, "expired", v.State.Reason)
}

func TestStateMachineDuplicateEntryAppliesOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue("q", PriorityNormal)
	cmd := tb.entry(&FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 1})
	first := tb.applyRaw(cmd)
	require.Len(t, first[0].Jobs, 1)
	tb.enqueue("q", PriorityNormal)
	cmd[RetryFlagOffset] = 1
	again := tb.applyRaw(cmd) // a proposer retry after ErrTimeout
	require.Len(t, again[0].Jobs, 1)
	require.Equal(t, first[0].Jobs[0].Job.ID, again[0].Jobs[0].Job.ID)
	require.Len(t, tb.fetch(10, "q"), 1, "the retry claimed nothing new")
}

// A retry that commits before its first attempt (the first was on its
// way to a replica that lost leadership and reached the new leader late)
// makes the first a duplicate: a completed job is not enqueued again.
func TestStateMachineFirstAttemptAfterItsRetryAppliesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.newID()
	first := tb.entry(&EnqueueOp{Job: Job{ID: id, Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{Priority: PriorityNormal, MaxRetries: 3}}})
	retry := append([]byte(nil), first...)
	retry[RetryFlagOffset] = 1
	require.Equal(t, StatusOK, tb.applyRaw(retry)[0].Status)
	jobs := tb.fetch(1, "q")
	require.Len(t, jobs, 1)
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}}).Status)
	before := tb.dump()

	rs := tb.applyRaw(first) // the first attempt, committed last
	require.Equal(t, StatusOK, rs[0].Status)
	require.Equal(t, StateCompleted, tb.get(id).State.State, "the job was not enqueued again")
	after := tb.dump()
	require.Equal(t, len(before), len(after))
}

func TestStateMachineRejectsGarbage(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.index++
	out, err := tb.sm.Update([]sm.Entry{{Index: tb.index, Cmd: []byte("garbage")}})
	require.NoError(t, err)
	require.Equal(t, ResultRejected, out[0].Result.Value)
	require.Equal(t, tb.index, tb.sm.Applied())
}

// randomLog builds a seeded sequence of entries exercising every op.
func randomLog(tb *testBundle, n int) {
	var ids []string
	queues := []string{"a", "b", "c"}
	tb.apply(&BatchCreateOp{Batch: Batch{ID: "batch_0_r", Total: 20, CallbackQueue: "b", CallbackJobID: "job_0_01KH630VS4806TTT36SZ4F6XQC"}})
	tb.apply(&ScheduleOp{Schedule: Schedule{ID: "sched_0_r", Queue: "c", Cron: "*/2 * * * *", Timezone: "Europe/Paris"}})
	tb.apply(&SetProviderOp{Provider: Provider{Name: "p0", RPM: 4, InputTPM: 6000}})
	tb.apply(&LinkProviderOp{Queue: "a", Provider: "p0"})
	for i := 0; i < n; i++ {
		tb.advance(time.Duration(tb.rnd.IntN(3000)) * time.Millisecond)
		if tb.rnd.IntN(30) == 0 {
			tb.apply(randomImport(tb, &ids, queues))
			continue
		}
		if tb.rnd.IntN(40) == 0 {
			// A share hand-over: lowered, then (mostly) raised under the
			// same generation in the next entry.
			name, members := []string{"p0", "p1"}[tb.rnd.IntN(2)], [][]uint32{{0}, {0}, {0, 1}, {0, 2}}[tb.rnd.IntN(4)]
			share := func(raise bool) *ProviderShareOp {
				return &ProviderShareOp{Name: name, Gen: uint64(i) + 1, Members: members, Raise: raise,
					Share: ProviderShare{RPM: int64(tb.rnd.IntN(5)), InputTPM: int64(tb.rnd.IntN(4000)), OutputTPM: int64(tb.rnd.IntN(2000))}}
			}
			tb.apply(share(false))
			tb.apply(share(tb.rnd.IntN(3) > 0))
			continue
		}
		var op Op
		switch k := tb.rnd.IntN(10); {
		case k < 4 || len(ids) == 0:
			id := tb.newID()
			ids = append(ids, id)
			j := Job{ID: id, Queue: queues[tb.rnd.IntN(3)], Payload: []byte(`{}`),
				JobOptions: JobOptions{Priority: Priority(tb.rnd.IntN(3)), MaxRetries: 2, Backoff: BackoffFixed, BaseDelayMs: 1000, LeaseSeconds: 5}}
			if tb.rnd.IntN(4) == 0 {
				j.UniqueKey, j.UniquePeriod = fmt.Sprint("u", tb.rnd.IntN(5)), int64(tb.rnd.IntN(20))
			}
			if tb.rnd.IntN(4) == 0 {
				j.ExpireAfterMs = int64(1000 + tb.rnd.IntN(20000))
			}
			if tb.rnd.IntN(5) == 0 {
				j.ResultSchema = []byte(`{"type":"object"}`)
			}
			if tb.rnd.IntN(3) == 0 {
				j.CacheKey, j.CacheTTLms = fmt.Sprint("c", tb.rnd.IntN(3)), int64(1000+tb.rnd.IntN(30000))
			}
			if tb.rnd.IntN(3) == 0 {
				j.Routing = &Routing{Strategy: RouteStrategy(tb.rnd.IntN(3)), Models: []string{"m1", "m2", "m3"}[:1+tb.rnd.IntN(3)]}
				if j.Routing.Strategy == RouteLowestCost {
					for range j.Routing.Models {
						j.Routing.PriceNanos = append(j.Routing.PriceNanos, int64(tb.rnd.IntN(3)))
					}
				}
			}
			switch tb.rnd.IntN(6) {
			case 0:
				j.Chain = &Chain{ID: id, Steps: []ChainTarget{{Queue: "a"}, {Queue: "b"}, {Queue: "c"}}, OnFailure: &ChainTarget{Queue: "c"}, OnExit: &ChainTarget{Queue: "a"}}
			case 1:
				j.BatchID = "batch_0_r"
			case 2:
				if len(ids) > 0 {
					j.DependsOn = []Dep{{ID: ids[tb.rnd.IntN(len(ids))]}}
				}
			}
			if tb.rnd.IntN(4) == 0 {
				j.Tags = []byte(`{"tenant":"t1"}`)
			}
			op = &EnqueueOp{Job: j, Budget: BudgetVerdict(tb.rnd.IntN(3))}
		case k < 6:
			op = &FetchOp{Queues: queues, WorkerID: "w", Count: uint32(1 + tb.rnd.IntN(3))}
		case k == 6 && tb.rnd.IntN(2) == 0:
			op = &AckOp{JobID: ids[tb.rnd.IntN(len(ids))], StepStatus: []string{"", "continue", "exit"}[tb.rnd.IntN(3)], Usage: randomUsage(tb),
				SchemaChecked: tb.rnd.IntN(2) == 0}
		case k == 6 && tb.rnd.IntN(2) == 0:
			op = &AckFetchOp{Ack: AckOp{JobID: ids[tb.rnd.IntN(len(ids))], Usage: randomUsage(tb)}, Fetch: FetchOp{Queues: queues, WorkerID: "w", Count: uint32(1 + tb.rnd.IntN(2))}}
		case k == 6:
			// An ack batch with its fetch: two acks, then the fetch.
			tb.apply(&AckOp{JobID: ids[tb.rnd.IntN(len(ids))]}, &AckOp{JobID: ids[tb.rnd.IntN(len(ids))]},
				&AcksFetchOp{Acks: 2, Fetch: FetchOp{Queues: queues, WorkerID: "w", Count: uint32(1 + tb.rnd.IntN(3))}})
			continue
		case k == 7 && tb.rnd.IntN(4) == 0:
			op = &UnclaimOp{JobID: ids[tb.rnd.IntN(len(ids))], Holder: Holder{WorkerID: "w", Attempt: uint32(1 + tb.rnd.IntN(2))}}
		case k == 7:
			op = &FailOp{JobID: ids[tb.rnd.IntN(len(ids))], Error: "e", Usage: randomUsage(tb), ProviderError: tb.rnd.IntN(2) == 0}
		case k == 8 && tb.rnd.IntN(2) == 0:
			op = &HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: ids[tb.rnd.IntN(len(ids))], Usage: randomUsage(tb)},
				{JobID: ids[tb.rnd.IntN(len(ids))], Progress: []byte(`{"p":1}`), Usage: randomUsage(tb)}}}
		case k == 8 && tb.rnd.IntN(3) == 0:
			op = &ScoreOp{JobID: ids[tb.rnd.IntN(len(ids))], Score: Score{Scorer: "s", Dims: []ScoreDim{{Name: "q", Value: tb.rnd.Float64()}}}}
		case k == 8:
			op = &PromoteOp{}
		default:
			switch tb.rnd.IntN(4) {
			case 0:
				op = &ReclaimOp{}
			case 1:
				op = &CancelOp{JobID: ids[tb.rnd.IntN(len(ids))]}
			case 2:
				op = &SetLimitsOp{Queue: queues[tb.rnd.IntN(3)], SetConcurrency: true, MaxConcurrency: uint32(tb.rnd.IntN(3))}
			case 3:
				op = &SetLimitsOp{Queue: queues[tb.rnd.IntN(3)], SetThrottle: true, RateLimit: uint32(tb.rnd.IntN(4)), RateWindowMs: 2000}
			}
			switch tb.rnd.IntN(7) {
			case 0:
				op = &RetryJobOp{JobID: ids[tb.rnd.IntN(len(ids))]}
			case 1:
				op = &DeleteJobOp{JobID: ids[tb.rnd.IntN(len(ids))]}
			case 2:
				op = &MoveJobOp{JobID: ids[tb.rnd.IntN(len(ids))], Queue: queues[tb.rnd.IntN(3)]}
			case 3:
				op = &SweepOp{PurgeBefore: tb.now.Add(-10 * time.Second).UnixNano()}
			case 6:
				if tb.rnd.IntN(2) == 0 {
					op = &RequeueOp{JobID: ids[tb.rnd.IntN(len(ids))]}
				} else {
					op = &PriorityOp{JobID: ids[tb.rnd.IntN(len(ids))], Priority: Priority(tb.rnd.IntN(3))}
				}
			case 5:
				if tb.rnd.IntN(2) == 0 {
					op = &ReleaseOp{JobID: ids[tb.rnd.IntN(len(ids))], Approve: tb.rnd.IntN(2) == 0}
				} else {
					op = &CronTickOp{}
				}
			case 4:
				switch tb.rnd.IntN(10) {
				case 0:
					op = &DropQueueOp{Queue: queues[tb.rnd.IntN(3)], Index: uint8(tb.rnd.IntN(4)), Limit: 3}
				case 1, 2:
					op = &AuditOp{Record: AuditRecord{ID: fmt.Sprint("a", i), Namespace: queues[tb.rnd.IntN(3)], Method: "POST",
						Path: "/api/v1/queues/a/pause", Status: 200, KeyID: "k"}}
				case 3:
					op = &PruneAuditOp{Before: tb.now.Add(-20 * time.Second).UnixNano(), Limit: 2}
				case 4, 5:
					op = &SetBudgetOp{Budget: randomBudget(tb), Delete: tb.rnd.IntN(3) == 0}
				case 6:
					op = &SetProviderOp{Provider: Provider{Name: []string{"p0", "p1"}[tb.rnd.IntN(2)], RPM: int64(tb.rnd.IntN(5)),
						InputTPM: int64(tb.rnd.IntN(3) * 3000), OutputTPM: int64(1 + tb.rnd.IntN(2000))}, Delete: tb.rnd.IntN(4) == 0}
				case 7, 8:
					op = &LinkProviderOp{Queue: queues[tb.rnd.IntN(3)], Provider: []string{"", "p0", "p1"}[tb.rnd.IntN(3)]}
				case 9:
					op = &ProviderMemberOp{Member: ProviderMember{Name: []string{"p0", "p1"}[tb.rnd.IntN(2)], Shard: uint32(tb.rnd.IntN(3)),
						Gen: uint64(tb.rnd.IntN(4)), In: tb.rnd.IntN(2) == 0}}
				}
			}
		}
		tb.apply(op)
	}
}

// randomImport is an ImportOp of the records issue 20 added (a job with
// usage records, scores and routing, a budget with daily spends, a cache
// entry, a queue's daily usage totals), or of one that exists.
func randomImport(tb *testBundle, ids *[]string, queues []string) Op {
	q := queues[tb.rnd.IntN(len(queues))]
	now := tb.now.UnixNano()
	switch tb.rnd.IntN(4) {
	case 0:
		id := tb.newID()
		if tb.rnd.IntN(5) == 0 && len(*ids) > 0 {
			id = (*ids)[tb.rnd.IntN(len(*ids))] // exists
		} else {
			*ids = append(*ids, id)
		}
		st := JobState{State: []State{StatePending, StateRetrying, StateActive, StateCompleted, StateDead}[tb.rnd.IntN(5)],
			Attempt: 1, StartedAt: now - 1e9, RouteIndex: uint32(tb.rnd.IntN(2)), RouteFallbacks: uint32(tb.rnd.IntN(2))}
		switch st.State {
		case StateRetrying:
			st.DueAt = now + int64(tb.rnd.IntN(5000))*1e6
		case StateCompleted, StateDead:
			st.CompletedAt = now - int64(tb.rnd.IntN(5000))*1e6
		}
		v := JobView{Job: Job{ID: id, Queue: q, Payload: []byte(`{}`), CreatedAt: now - 5e9,
			JobOptions: JobOptions{MaxRetries: 2, Backoff: BackoffFixed, BaseDelayMs: 1000, LeaseSeconds: 5,
				Routing: &Routing{Strategy: RouteRoundRobin, Models: []string{"m1", "m2"}, Start: 1}}}, State: st}
		if tb.rnd.IntN(2) == 0 {
			v.Job.CacheKey, v.Job.CacheTTLms = fmt.Sprint("c", tb.rnd.IntN(3)), 20000
		}
		for n := tb.rnd.IntN(3); n > 0; n-- {
			if u := randomUsage(tb); u != nil {
				v.Usage = append(v.Usage, UsageRecord{N: 9, Attempt: 1, StartedAt: now - 1e9, Phase: PhaseHeartbeat, At: now, Queue: q, Usage: *u})
			}
		}
		if tb.rnd.IntN(2) == 0 {
			v.Scores = []ScoreRecord{{N: 4, Queue: q, At: now, Score: Score{Scorer: "s", Dims: []ScoreDim{{Name: "q", Value: tb.rnd.Float64()}}}}}
		}
		return &ImportOp{Job: &JobExport{View: v}}
	case 1:
		return &ImportOp{Budget: &BudgetExport{Budget: randomBudget(tb),
			Spend: []DaySpend{{Day: UsageDay(now) - 1, Nanos: int64(tb.rnd.IntN(1e7))}, {Day: UsageDay(now), Nanos: int64(tb.rnd.IntN(2e7))}}}}
	case 2:
		job := ""
		if len(*ids) > 0 {
			job = (*ids)[tb.rnd.IntN(len(*ids))]
		}
		return &ImportOp{Cache: &CacheExport{Queue: q, Key: fmt.Sprint("c", tb.rnd.IntN(3)),
			Entry: CacheEntry{JobID: job, CompletedAt: now - 1e9, ExpiresAt: now + int64(tb.rnd.IntN(40000)-10000)*1e6, CostNanos: 7}}}
	default:
		return &ImportOp{UsageDay: &UsageDayExport{Day: UsageDay(now) - int64(tb.rnd.IntN(2)),
			QueueUsage: QueueUsage{Queue: q, UsageTotals: UsageTotals{InputTokens: 10, CostNanos: int64(tb.rnd.IntN(1e6)), Reports: 1}}}}
	}
}

// randomBudget is a queue, tag or global budget with small limits.
func randomBudget(tb *testBundle) Budget {
	b := Budget{DailyNanos: int64(tb.rnd.IntN(2e7)), PerJobNanos: int64(tb.rnd.IntN(1e7)), OnExceed: BudgetAction(1 + tb.rnd.IntN(3))}
	if b.DailyNanos == 0 && b.PerJobNanos == 0 {
		b.PerJobNanos = 1
	}
	switch tb.rnd.IntN(3) {
	case 0:
		b.Queue = []string{"a", "b", "c"}[tb.rnd.IntN(3)]
	case 1:
		b.TagKey, b.TagValue = "tenant", "t1"
	}
	return b
}

// randomUsage is a usage report half the time (nil otherwise).
func randomUsage(tb *testBundle) *Usage {
	if tb.rnd.IntN(2) == 0 {
		return nil
	}
	return &Usage{InputTokens: int64(tb.rnd.IntN(5000)), OutputTokens: int64(tb.rnd.IntN(900)), CacheReadTokens: int64(tb.rnd.IntN(100)),
		Model: []string{"m1", "m2"}[tb.rnd.IntN(2)], Provider: "p", CostNanos: int64(tb.rnd.IntN(1e7)), LatencyMs: int64(tb.rnd.IntN(3000))}
}

func TestStateMachineDeterministic(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			testDeterministic(t, seed)
		})
	}
}

func testDeterministic(t *testing.T, seed uint64) {
	a := setup(t)
	a.rnd = rand.New(rand.NewPCG(seed, seed*7919))
	randomLog(a, 600)
	b := setup(t)
	for _, cmd := range a.log {
		b.applyRaw(cmd)
	}
	require.Equal(t, a.dump(), b.dump(), "one op log, byte-identical Pebble state")

	// Replaying in different Update batch sizes gives the same state too.
	c := setup(t)
	for i := 0; i < len(a.log); {
		n := 1 + c.rnd.IntN(7)
		var ents []sm.Entry
		for ; n > 0 && i < len(a.log); n, i = n-1, i+1 {
			c.index++
			ents = append(ents, sm.Entry{Index: c.index, Cmd: a.log[i]})
		}
		_, err := c.sm.Update(ents)
		require.NoError(t, err)
	}
	require.Equal(t, a.dump(), c.dump())

	// The job cache never changes a result: no cache, a tiny one and the
	// default give the same bytes.
	for _, size := range []int64{-1, 2000} {
		d := setupWith(t, size)
		for _, cmd := range a.log {
			d.applyRaw(cmd)
		}
		require.Equal(t, a.dump(), d.dump(), "job cache %d", size)
	}

	// The pending windows never change a result: without them, and with
	// windows of 1 to 3 keys (every fetch refills them, reads past them,
	// cuts them), each entry answers the same bytes and the states match.
	var want [][]byte
	for _, keys := range []int{-1, 1, 2, 3} {
		e := setup(t)
		e.sm.noWins, e.sm.winKeys = keys < 0, max(keys, 0)
		for i, cmd := range a.log {
			e.index++
			out, err := e.sm.Update([]sm.Entry{{Index: e.index, Cmd: cmd}})
			require.NoError(t, err)
			if keys < 0 {
				want = append(want, bytes.Clone(out[0].Result.Data)) // not the next entry's buffer
				continue
			}
			require.Equal(t, want[i], out[0].Result.Data, "entry %d, windows of %d keys", i, keys)
			e.checkWindows()
		}
		require.Equal(t, a.dump(), e.dump(), "windows of %d keys", keys)
	}
}

// checkWindows fails unless every pending window holds its queue's first
// pending keys and jobs, exactly (all: and nothing more).
func (tb *testBundle) checkWindows() {
	tb.t.Helper()
	for q, w := range tb.sm.wins {
		pfx := pendingPrefix(q)
		it, err := tb.sm.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
		require.NoError(tb.t, err)
		var keys [][]byte
		var ids []string
		for ok := it.First(); ok && (w.all || len(keys) < len(w.keys)); ok = it.Next() {
			keys, ids = append(keys, bytes.Clone(it.Key())), append(ids, string(it.Value()))
		}
		require.NoError(tb.t, it.Close())
		require.Equal(tb.t, len(keys), len(w.keys), "queue %s: window keys (all: %v)", q, w.all)
		if len(keys) > 0 {
			require.Equal(tb.t, keys, slices.Clip(w.keys), "queue %s: window keys (all: %v)", q, w.all)
			require.Equal(tb.t, ids, slices.Clip(w.ids), "queue %s: window jobs", q)
		}
	}
}

func TestStateMachineReopenAndSnapshot(t *testing.T) {
	t.Parallel()
	a := setup(t)
	randomLog(a, 200)
	before := a.dump()
	applied := a.sm.Applied()
	a.reopen()
	require.Equal(t, applied, a.index)
	require.Equal(t, before, a.dump())

	ctx, err := a.sm.PrepareSnapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, a.sm.SaveSnapshot(ctx, &buf, nil))

	b := setup(t)
	randomLog(b, 30) // state that the snapshot must replace
	require.NoError(t, b.sm.RecoverFromSnapshot(&buf, nil))
	require.Equal(t, before, b.dump())
	require.Equal(t, applied, b.sm.Applied())
}

// TestStateMachineCrashKeepsSynced: the Pebble DB has no WAL, so a crash
// loses what was applied after the last Sync (flush) and nothing before:
// Open returns the index Sync made durable, with exactly the state of
// then, and replaying the log after it gives the state the crash lost,
// byte for byte. A Close flushes: a restart loses nothing.
func TestStateMachineCrashKeepsSynced(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	tb := &testBundle{t: t, dir: "sm", now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2)), fs: mem}
	tb.open()
	for range 3 {
		tb.enqueue("q", PriorityNormal)
	}
	require.NoError(t, tb.sm.Sync())
	synced, syncedAt := tb.dump(), tb.index
	tb.fetch(2, "q")
	tb.enqueue("q", PriorityHigh)
	lost := tb.dump()
	require.NotEqual(t, synced, lost)

	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // exactly what was synced
	require.NoError(t, tb.sm.Close())
	after := &testBundle{t: t, dir: "sm", now: tb.now, rnd: tb.rnd, fs: crashed}
	after.open()
	defer after.sm.Close()
	require.Equal(t, syncedAt, after.index, "Open returns the synced index")
	require.Equal(t, synced, after.dump())
	var ents []sm.Entry
	for i := syncedAt; i < uint64(len(tb.log)); i++ {
		ents = append(ents, sm.Entry{Index: i + 1, Cmd: tb.log[i]})
	}
	_, err := after.sm.Update(ents)
	require.NoError(t, err)
	require.Equal(t, lost, after.dump(), "the replayed log rebuilds what the crash lost")

	// Close flushed: a crash after it loses nothing.
	closed := mem.CrashClone(vfs.CrashCloneCfg{})
	again := &testBundle{t: t, dir: "sm", now: tb.now, rnd: tb.rnd, fs: closed}
	again.open()
	defer again.sm.Close()
	require.Equal(t, uint64(len(tb.log)), again.index)
	require.Equal(t, lost, again.dump())
}

func TestStateMachineConcurrencyCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, tb.enqueue("single", PriorityNormal))
	}
	tb.one(&SetLimitsOp{Queue: "single", SetConcurrency: true, MaxConcurrency: 1})
	jobs := tb.fetch(5, "single")
	require.Len(t, jobs, 1, "a singleton queue hands out one job at a time")
	require.Empty(t, tb.fetch(5, "single"))
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: jobs[0].Job.ID}).Status)
	jobs = tb.fetch(5, "single")
	require.Len(t, jobs, 1)
	require.Equal(t, ids[1], jobs[0].Job.ID, "FIFO under the cap")
	tb.one(&SetLimitsOp{Queue: "single", SetConcurrency: true, MaxConcurrency: 0})
	require.Len(t, tb.fetch(5, "single"), 1, "cap removed")
}

func TestStateMachineThrottleSlidingWindow(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i := 0; i < 50; i++ {
		tb.enqueue("slow", PriorityNormal)
	}
	tb.one(&SetLimitsOp{Queue: "slow", SetThrottle: true, RateLimit: 10, RateWindowMs: 1000})
	require.Len(t, tb.fetch(100, "slow"), 10)
	tb.advance(400 * time.Millisecond)
	require.Empty(t, tb.fetch(100, "slow"))
	tb.advance(599 * time.Millisecond)
	require.Empty(t, tb.fetch(1, "slow"), "the window has not moved past the first fetches")
	tb.advance(time.Millisecond)
	require.Len(t, tb.fetch(100, "slow"), 10)
	tb.reopen() // the window survives a restart (it lives in rl| keys)
	tb.advance(500 * time.Millisecond)
	require.Empty(t, tb.fetch(100, "slow"))
	tb.one(&SetLimitsOp{Queue: "slow", SetThrottle: true})
	require.Len(t, tb.fetch(100, "slow"), 30, "throttle removed")
}

func TestStateMachineUniqueJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	uniq := func(period int64) func(*Job) {
		return func(j *Job) { j.UniqueKey, j.UniquePeriod = "sync-user-42", period }
	}
	first := tb.enqueue("q", PriorityNormal, uniq(3600))
	dup := tb.one(&EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{UniqueKey: "sync-user-42", UniquePeriod: 3600}}})
	require.True(t, dup.Existing)
	require.Equal(t, first, dup.JobID)
	require.Equal(t, StatePending, dup.State)
	// Another queue has its own key space.
	require.False(t, tb.one(&EnqueueOp{Job: Job{ID: tb.newID(), Queue: "other", Payload: []byte(`{}`), JobOptions: JobOptions{UniqueKey: "sync-user-42"}}}).Existing)

	// Completion releases the key.
	tb.fetch(1, "q")
	tb.one(&AckOp{JobID: first})
	second := tb.enqueue("q", PriorityNormal, uniq(3600))
	require.NotEqual(t, first, second)
	// The period expires the key even while the job waits.
	tb.advance(3600 * time.Second)
	third := tb.enqueue("q", PriorityNormal, uniq(0))
	require.NotEqual(t, second, third)
	// Without a period the key lives until the job is done (cancelled here).
	tb.advance(100 * time.Hour)
	require.True(t, tb.one(&EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{UniqueKey: "sync-user-42"}}}).Existing)
	tb.one(&CancelOp{JobID: third})
	require.False(t, tb.one(&EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{UniqueKey: "sync-user-42"}}}).Existing)
	// The sweep removes expired locks and keeps live ones.
	tb.enqueue("q", PriorityNormal, func(j *Job) { j.UniqueKey, j.UniquePeriod = "short", 10 })
	tb.advance(11 * time.Second)
	require.Equal(t, uint32(1), tb.one(&SweepOp{}).Count)
	has := func(key string) bool {
		_, closer, err := tb.sm.db.Get(uniqueKey("q", key))
		if err == nil {
			closer.Close()
		}
		return err == nil
	}
	require.False(t, has("short"))
	require.True(t, has("sync-user-42"), "the live lock (no period) is kept")
}

func TestStateMachineExpirySweepAndRetention(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	exp := tb.enqueue("q", PriorityNormal, func(j *Job) { j.ExpireAfterMs = 60000 })
	sched := tb.enqueue("q", PriorityNormal, func(j *Job) { j.ExpireAfterMs = 60000; j.ScheduledAt = tb.now.Add(time.Hour).UnixNano() })
	done := tb.enqueue("q2", PriorityNormal)
	tb.fetch(1, "q2")
	tb.one(&AckOp{JobID: done})
	tb.advance(time.Minute)
	require.Equal(t, uint32(2), tb.one(&SweepOp{}).Count)
	for _, id := range []string{exp, sched} {
		v := tb.get(id)
		require.Equal(t, StateDead, v.State.State)
		require.Equal(t, "expired", v.State.Reason)
	}
	tb.advance(time.Hour)
	require.Zero(t, tb.one(&PromoteOp{}).Count, "the expired scheduled job left the due index")

	// Retention: jobs finished before the cutoff are deleted.
	r := tb.one(&SweepOp{PurgeBefore: tb.now.Add(-30 * time.Minute).UnixNano()})
	require.Equal(t, uint32(3), r.Count)
	for _, id := range []string{exp, sched, done} {
		require.Nil(t, tb.get(id))
	}
	qs, err := tb.sm.Lookup(ListQueuesQuery{})
	require.NoError(t, err)
	for _, q := range qs.([]QueueInfo) {
		for st, n := range q.Stats.Counts {
			require.Zero(t, n, "queue %s state %d", q.Name, st)
		}
	}
}

func TestStateMachineRetryDeleteMove(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 1 })
	tb.fetch(1, "q")
	require.Equal(t, StateDead, tb.one(&FailOp{JobID: id, Error: "boom"}).State)
	require.Equal(t, StatusConflict, tb.one(&RetryJobOp{JobID: tb.enqueue("q", PriorityNormal)}).Status, "pending jobs are not retried")
	require.Equal(t, StatePending, tb.one(&RetryJobOp{JobID: id}).State)
	v := tb.get(id)
	require.Zero(t, v.State.Attempt)
	require.Len(t, v.Errors, 1, "history kept")
	jobs := tb.fetch(10, "q")
	require.Len(t, jobs, 2)
	require.Equal(t, id, jobs[0].Job.ID, "a retried job keeps its place in time")
	require.Equal(t, StateDead, tb.one(&FailOp{JobID: id, Error: "boom again"}).State)
	require.Len(t, tb.get(id).Errors, 2, "a new error record, not an overwrite")

	// Move: pending job to another queue of the shard.
	m := tb.enqueue("from", PriorityHigh)
	r := tb.one(&MoveJobOp{JobID: m, Queue: "to"})
	require.Equal(t, StatusOK, r.Status)
	require.Empty(t, tb.fetch(1, "from"))
	got := tb.fetch(1, "to")
	require.Len(t, got, 1)
	require.Equal(t, m, got[0].Job.ID)
	require.Equal(t, "to", got[0].Job.Queue)
	require.Equal(t, StatusConflict, tb.one(&MoveJobOp{JobID: m, Queue: "x"}).Status, "active jobs stay")

	// Move with a new priority: re-filed under the tier it takes.
	lo := tb.enqueue("from", PriorityNormal)
	hi := tb.enqueue("from", PriorityNormal)
	tb.enqueue("to2", PriorityNormal)
	require.Equal(t, StatusOK, tb.one(&MoveJobOp{JobID: lo, Queue: "to2"}).Status)
	require.Equal(t, StatusOK, tb.one(&MoveJobOp{JobID: hi, Queue: "to2", SetPriority: true, Priority: PriorityCritical}).Status)
	require.Equal(t, PriorityNormal, tb.get(lo).Job.Priority, "no priority given: it keeps its own")
	require.Equal(t, PriorityCritical, tb.get(hi).Job.Priority)
	require.Equal(t, hi, tb.fetch(1, "to2")[0].Job.ID, "the critical one first")
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: hi}).Status)
	require.Equal(t, StatusInvalid, tb.one(&MoveJobOp{JobID: lo, Queue: "to3", SetPriority: true, Priority: 9}).Status)
	require.Equal(t, "to2", tb.get(lo).Job.Queue, "a refused move changes nothing")

	// Delete in every state.
	for _, mk := range []func() string{
		func() string { return tb.enqueue("d", PriorityNormal) },
		func() string {
			return tb.enqueue("d", PriorityNormal, func(j *Job) { j.ScheduledAt = tb.now.Add(time.Hour).UnixNano() })
		},
		func() string { i := tb.enqueue("d", PriorityNormal); tb.fetch(1, "d"); return i },
	} {
		del := mk()
		require.Equal(t, StatusOK, tb.one(&DeleteJobOp{JobID: del}).Status)
		require.Nil(t, tb.get(del))
		require.Equal(t, StatusNotFound, tb.one(&DeleteJobOp{JobID: del}).Status)
	}
	require.Equal(t, StatusOK, tb.one(&DeleteJobOp{JobID: id}).Status)
	tb.advance(time.Hour)
	require.Equal(t, uint32(2), tb.one(&ReclaimOp{}).Count, "the two live active jobs; the deleted one left the lease index")
	qs, _ := tb.sm.Lookup(ListQueuesQuery{})
	for _, q := range qs.([]QueueInfo) {
		if q.Name == "d" {
			require.Equal(t, [StateHeld + 1]int64{}, q.Stats.Counts)
		}
	}
}

func TestStateMachineDropQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i := 0; i < 7; i++ {
		tb.enqueue("a", PriorityNormal)
		tb.enqueue("b", PriorityNormal)
	}
	tb.enqueue("a", PriorityNormal, func(j *Job) { j.ScheduledAt = tb.now.Add(time.Hour).UnixNano() })
	tb.enqueue("b", PriorityNormal, func(j *Job) { j.ScheduledAt = tb.now.Add(time.Hour).UnixNano() })
	active := tb.fetch(2, "a")
	tb.one(&AckOp{JobID: active[0].Job.ID})
	counts := func(q string) [StateHeld + 1]int64 {
		qs, err := tb.sm.Lookup(ListQueuesQuery{})
		require.NoError(t, err)
		for _, info := range qs.([]QueueInfo) {
			if info.Name == q {
				return info.Stats.Counts
			}
		}
		return [StateHeld + 1]int64{}
	}
	before := counts("b")
	total := uint32(0)
	for _, idx := range []uint8{DropPending, DropDue, DropActive, DropFinished} {
		var after []byte
		for steps := 0; ; steps++ {
			require.Less(t, steps, 50)
			r := tb.one(&DropQueueOp{Queue: "a", Index: idx, After: after, Limit: 2})
			require.Equal(t, StatusOK, r.Status)
			total += r.Count
			if r.Cursor == nil {
				break
			}
			after = r.Cursor
		}
	}
	require.Equal(t, uint32(8), total, "5 pending + 1 scheduled + 1 active + 1 completed")
	require.Equal(t, [StateHeld + 1]int64{}, counts("a"))
	require.Equal(t, before, counts("b"), "the other queue is untouched")
	require.Empty(t, tb.fetch(10, "a"))
	require.Nil(t, tb.get(active[1].Job.ID))
	require.Equal(t, StatusConflict, tb.one(&DropQueueOp{Queue: "b", Index: DropConfig}).Status)
	require.Equal(t, StatusOK, tb.one(&DropQueueOp{Queue: "a", Index: DropConfig}).Status)
	qs, _ := tb.sm.Lookup(ListQueuesQuery{})
	require.Len(t, qs.([]QueueInfo), 1)
}

// seeds is how many random op logs TestStateMachineDeterministic replays;
// CORVO_SEEDS raises it for a longer hunt.
var seeds = func() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("CORVO_SEEDS"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 4
}()

func TestStateMachineWorkers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue("q", PriorityNormal)
	tb.enqueue("q", PriorityNormal)
	tb.one(&FetchOp{Queues: []string{"q", "r"}, WorkerID: "w-a", Hostname: "pod-1", Count: 1})
	tb.one(&FetchOp{Queues: []string{"q"}, WorkerID: "w-b", Hostname: "pod-2", Count: 5})
	v, err := tb.sm.Lookup(WorkersQuery{})
	require.NoError(t, err)
	ws := v.([]WorkerInfo)
	require.Len(t, ws, 2)
	require.Equal(t, "w-a", ws[0].ID)
	require.Equal(t, "pod-1", ws[0].Hostname)
	require.Equal(t, []string{"q", "r"}, ws[0].Queues)
	require.Len(t, ws[0].ActiveJobs, 1)
	require.Len(t, ws[1].ActiveJobs, 1)
	tb.advance(2 * time.Hour)
	tb.one(&HeartbeatOp{WorkerID: "w-b", Jobs: []HeartbeatJob{{JobID: ws[1].ActiveJobs[0]}}})
	tb.advance(23 * time.Hour)
	tb.one(&SweepOp{})
	v, _ = tb.sm.Lookup(WorkersQuery{})
	ws = v.([]WorkerInfo)
	require.Len(t, ws, 1, "a worker silent for a day is forgotten")
	require.Equal(t, "w-b", ws[0].ID)
}

// A worker that polls its queues in rotating order is not rewritten on
// every fetch; a different set of queues is written at once.
func TestStateMachineWorkerRotatingQueuesWriteOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	qs := []string{"a", "b", "c"}
	tb.one(&FetchOp{Queues: qs, WorkerID: "w", Hostname: "h", Count: 1})
	before := tb.dump()
	for i := 1; i <= 3; i++ {
		tb.advance(time.Millisecond)
		rot := append(append([]string(nil), qs[i%3:]...), qs[:i%3]...)
		tb.one(&FetchOp{Queues: rot, WorkerID: "w", Hostname: "h", Count: 1})
	}
	after := tb.dump()
	workerKeys := func(keys []string) (out []string) {
		for _, k := range keys {
			if strings.HasPrefix(k, `"`+pfxWorker) || strings.HasPrefix(k, `"`+pfxWorkerX) {
				out = append(out, k)
			}
		}
		return out
	}
	require.Equal(t, workerKeys(before), workerKeys(after), "the same queues in another order: no rewrite")

	tb.advance(time.Millisecond)
	tb.one(&FetchOp{Queues: []string{"a", "b", "d"}, WorkerID: "w", Hostname: "h", Count: 1})
	v, err := tb.sm.Lookup(WorkersQuery{})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "d"}, v.([]WorkerInfo)[0].Queues)

	require.True(t, sameQueues([]string{"x", "y"}, []string{"y", "x"}))
	require.False(t, sameQueues([]string{"x", "x"}, []string{"x", "y"}))
	require.False(t, sameQueues([]string{"x"}, []string{"x", "y"}))
	long := make([]string, 40)
	for i := range long {
		long[i] = fmt.Sprint("q", i)
	}
	rev := slices.Clone(long)
	slices.Reverse(rev)
	require.True(t, sameQueues(long, rev))
	rev[0] = "other"
	require.False(t, sameQueues(long, rev))
	rot := append(slices.Clone(long[7:]), long[:7]...)
	require.True(t, sameQueues(long, rot))
	rot[len(rot)-1] = "other"
	require.False(t, sameQueues(long, rot))
}

// A worker's rotated queue list is recognised on every fetch without an
// allocation (not parallel: AllocsPerRun).
func TestSameQueuesRotationAllocatesNothing(t *testing.T) {
	long := make([]string, 40)
	for i := range long {
		long[i] = fmt.Sprint("q", i)
	}
	rot := append(slices.Clone(long[7:]), long[:7]...)
	require.True(t, sameQueues(long, rot))
	require.Zero(t, testing.AllocsPerRun(10, func() { sameQueues(long, rot) }))
}

// TestStateMachineCrossShardMove plays the relay by hand between two
// shards: the job leaves one, lands once on the other, history intact.
func TestStateMachineCrossShardMove(t *testing.T) {
	t.Parallel()
	src, dst := setup(t), setup(t)
	id := src.enqueue("from", PriorityHigh, func(j *Job) { j.MaxRetries = 5; j.Tags = []byte(`{"t":"x"}`) })
	src.fetch(1, "from")
	src.one(&FailOp{JobID: id, Error: "first try failed"})
	newID := "job_1_" + id[len("job_0_"):]
	require.Equal(t, StatusInvalid, src.one(&MoveOutOp{JobID: id, NewID: newID, Queue: "to", Target: 1, SetPriority: true, Priority: 7}).Status)
	r := src.one(&MoveOutOp{JobID: id, NewID: newID, Queue: "to", Target: 1, SetPriority: true, Priority: PriorityNormal})
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, newID, r.JobID)
	require.Nil(t, src.get(id))
	moved, err := src.sm.Lookup(MovedQuery{ID: id})
	require.NoError(t, err)
	require.Equal(t, newID, moved)

	v, err := src.sm.Lookup(OutboxQuery{Limit: 10})
	require.NoError(t, err)
	recs := v.([]OutboxRecord)
	require.Len(t, recs, 1)
	require.Equal(t, 1, recs[0].Target)
	for range 2 { // delivered twice: applied once
		require.Equal(t, StatusOK, dst.one(recs[0].Op).Status)
	}
	got := dst.get(newID)
	require.NotNil(t, got)
	require.Equal(t, "to", got.Job.Queue)
	require.Equal(t, PriorityNormal, got.Job.Priority, "moved with priority normal (was high)")
	require.Equal(t, StateRetrying, got.State.State)
	require.Len(t, got.Errors, 1)
	require.JSONEq(t, `{"t":"x"}`, string(got.Job.Tags))
	dst.advance(time.Hour)
	dst.one(&PromoteOp{})
	jobs := dst.fetch(5, "to")
	require.Len(t, jobs, 1)
	require.Equal(t, uint32(2), jobs[0].State.Attempt)

	require.Equal(t, uint32(1), src.one(&OutboxAckOp{Seqs: []uint64{recs[0].Seq}}).Count)
	v, _ = src.sm.Lookup(OutboxQuery{Limit: 10})
	require.Empty(t, v.([]OutboxRecord))
	require.Equal(t, StatusNotFound, src.one(&MoveOutOp{JobID: id, NewID: newID, Queue: "to", Target: 1}).Status)
}

func TestStateMachineBatchCallback(t *testing.T) {
	t.Parallel()
	tb := setup(t) // shard index 0
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, tb.enqueue("imgs", PriorityNormal, func(j *Job) { j.BatchID = "batch_0_x"; j.MaxRetries = 0 }))
	}
	cbID := tb.newID()
	// A done-report may arrive before the batch record: it is kept.
	jobs := tb.fetch(3, "imgs")
	require.Len(t, jobs, 3)
	tb.one(&AckOp{JobID: ids[0]})
	tb.one(&BatchCreateOp{Batch: Batch{ID: "batch_0_x", Total: 3, CallbackQueue: "done", CallbackPayload: []byte(`{"album_id":"album_42"}`), CallbackJobID: cbID}})
	tb.one(&FailOp{JobID: ids[1], Error: "resize failed"})
	require.Empty(t, tb.fetch(1, "done"), "not before every job finished")
	tb.one(&AckOp{JobID: ids[2]})
	cb := tb.fetch(1, "done")
	require.Len(t, cb, 1)
	require.Equal(t, cbID, cb[0].Job.ID)
	require.JSONEq(t, `{"album_id":"album_42","batch":{"id":"batch_0_x","total":3,"succeeded":2,"failed":1}}`, string(cb[0].Job.Payload))
	v, err := tb.sm.Lookup(BatchQuery{ID: "batch_0_x"})
	require.NoError(t, err)
	b := v.(*Batch)
	require.Equal(t, uint32(2), b.Succeeded)
	require.Equal(t, uint32(1), b.Failed)
	require.NotZero(t, b.CompletedAt)
	// Duplicate reports change nothing.
	tb.one(&BatchDoneOp{BatchID: "batch_0_x", JobID: ids[0], OK: true})
	v, _ = tb.sm.Lookup(BatchQuery{ID: "batch_0_x"})
	require.Equal(t, uint32(2), v.(*Batch).Succeeded)

	// A batch on another shard hears through the outbox.
	other := tb.enqueue("imgs", PriorityNormal, func(j *Job) { j.BatchID = "batch_1_y"; j.BatchShard = 1 })
	tb.fetch(1, "imgs")
	tb.one(&AckOp{JobID: other})
	ob, _ := tb.sm.Lookup(OutboxQuery{Limit: 10})
	recs := ob.([]OutboxRecord)
	require.Len(t, recs, 1)
	require.Equal(t, 1, recs[0].Target)
	require.Equal(t, &BatchDoneOp{BatchID: "batch_1_y", JobID: other, OK: true}, recs[0].Op)
}

func TestStateMachineChains(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	chain := func(id string) *Chain {
		return &Chain{ID: id, Steps: []ChainTarget{{Queue: "extract"}, {Queue: "summarize"}, {Queue: "review"}},
			OnFailure: &ChainTarget{Queue: "alerts", Payload: []byte(`{"notify":"ops"}`)},
			OnExit:    &ChainTarget{Queue: "cleanup"}}
	}
	first := tb.enqueue("extract", PriorityNormal, func(j *Job) { j.Chain = chain(j.ID); j.Payload = []byte(`{"doc":"a.pdf"}`) })
	tb.fetch(1, "extract")
	tb.one(&AckOp{JobID: first, Result: []byte(`{"text":"hello"}`)})
	step1 := tb.fetch(1, "summarize")
	require.Len(t, step1, 1)
	require.JSONEq(t, `{"doc":"a.pdf","previous_result":{"text":"hello"}}`, string(step1[0].Job.Payload))
	require.Equal(t, uint32(1), step1[0].Job.Chain.Step)
	require.Equal(t, first, step1[0].Job.Chain.ID)
	// step_status exit: skip the rest, run on_exit.
	tb.one(&AckOp{JobID: step1[0].Job.ID, Result: []byte(`"short"`), StepStatus: "exit"})
	require.Empty(t, tb.fetch(1, "review"))
	exit := tb.fetch(1, "cleanup")
	require.Len(t, exit, 1)
	require.JSONEq(t, `{"chain_id":"`+first+`","exited_at_step":1,"previous_result":"short"}`, string(exit[0].Job.Payload))

	// A step that dies runs on_failure with the error.
	second := tb.enqueue("extract", PriorityNormal, func(j *Job) { j.Chain = chain(j.ID); j.MaxRetries = 0 })
	tb.fetch(1, "extract")
	tb.one(&FailOp{JobID: second, Error: "OCR crashed"})
	alert := tb.fetch(1, "alerts")
	require.Len(t, alert, 1)
	require.JSONEq(t, `{"notify":"ops","chain_id":"`+second+`","failed_step":0,"failed_job_id":"`+second+`","error":"OCR crashed","reason":"max_retries"}`, string(alert[0].Job.Payload))
	require.Empty(t, tb.fetch(1, "summarize"))
}

func TestStateMachineDependencies(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	a := tb.enqueue("q", PriorityNormal)
	b := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
	waiting := tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: a}, {ID: b}} })
	require.Equal(t, StateHeld, tb.get(waiting).State.State)
	tb.fetch(2, "q")
	tb.one(&AckOp{JobID: a})
	require.Empty(t, tb.fetch(1, "after"), "one dependency is not enough")
	tb.one(&AckOp{JobID: b})
	jobs := tb.fetch(1, "after")
	require.Len(t, jobs, 1, "both dependencies completed")
	require.Equal(t, waiting, jobs[0].Job.ID)

	// A dependency that dies kills the dependent.
	c := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
	doomed := tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: c}} })
	tb.fetch(1, "q")
	tb.one(&FailOp{JobID: c, Error: "x"})
	v := tb.get(doomed)
	require.Equal(t, StateDead, v.State.State)
	require.Equal(t, "dependency "+c+" dead", v.State.Reason)

	// Already finished, unknown or deleted dependencies answer at once.
	gone := tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: a}, {ID: "job_0_01HX7Y2K3M0000000000000000"}} })
	require.Equal(t, "dependency job_0_01HX7Y2K3M0000000000000000 deleted", tb.get(gone).State.Reason)
	d := tb.enqueue("q", PriorityNormal)
	orphan := tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: d}} })
	tb.one(&DeleteJobOp{JobID: d})
	require.Equal(t, StateDead, tb.get(orphan).State.State)

	// Held jobs are released by hand.
	e := tb.enqueue("q", PriorityNormal)
	h1 := tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: e}} })
	h2 := tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: e}} })
	require.Equal(t, StatePending, tb.one(&ReleaseOp{JobID: h1, Approve: true}).State)
	require.Equal(t, StateDead, tb.one(&ReleaseOp{JobID: h2}).State)
	require.Equal(t, "rejected", tb.get(h2).State.Reason)
	require.Equal(t, StatusConflict, tb.one(&ReleaseOp{JobID: h2}).Status)
	tb.fetch(10, "q")
	tb.one(&AckOp{JobID: e}) // late reports to released jobs change nothing
	require.Equal(t, StatePending, tb.get(h1).State.State)

	// A dependency on another shard is asked through the outbox.
	tb.enqueue("after", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: "job_1_01HX7Y2K3M0000000000000000", Shard: 1}} })
	ob, _ := tb.sm.Lookup(OutboxQuery{Limit: 10})
	recs := ob.([]OutboxRecord)
	require.Len(t, recs, 1)
	require.IsType(t, &DepWatchOp{}, recs[0].Op)
}

// TestStateMachineCronAcrossDST fires "0 9 * * *" in New York across the
// March 2026 change: 9:00 local is 14:00Z before and 13:00Z after, one run
// a day, none twice, none skipped.
func TestStateMachineCronAcrossDST(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	tb.now = time.Date(2026, 3, 6, 12, 0, 0, 0, ny)
	r := tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_daily", Name: "daily-report", Queue: "reports", Cron: "0 9 * * *",
		Timezone: "America/New_York", Payload: []byte(`{"type":"daily"}`), MaxRetries: 3}})
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, time.Date(2026, 3, 7, 14, 0, 0, 0, time.UTC).UnixNano(), r.NextAttemptAt)
	var runs []string
	for i := 0; i < 4*24*4; i++ { // every 15 minutes for 4 days
		tb.advance(15 * time.Minute)
		tb.one(&CronTickOp{})
		for _, j := range tb.fetch(10, "reports") {
			runs = append(runs, tb.now.UTC().Format("01-02 15:04"))
			require.JSONEq(t, `{"type":"daily"}`, string(j.Job.Payload))
		}
	}
	require.Equal(t, []string{"03-07 14:00", "03-08 13:00", "03-09 13:00", "03-10 13:00"}, runs)
	// The fall-back day runs a 1 a.m. schedule once, not twice.
	require.Equal(t, time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC).UnixNano(),
		must(NextRun("0 1 * * *", "America/New_York", time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC).UnixNano())))
	require.Equal(t, time.Date(2026, 11, 2, 6, 0, 0, 0, time.UTC).UnixNano(),
		must(NextRun("0 1 * * *", "America/New_York", time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC).UnixNano())))
}

func must(v int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return v
}

// TestStateMachineCronLeaderChange: ticks proposed by an old leader and a
// new one (here: the same log applied to a second replica, which then goes
// on ticking) fire each run exactly once, including runs missed while no
// leader ticked.
func TestStateMachineCronLeaderChange(t *testing.T) {
	t.Parallel()
	a := setup(t)
	a.now = time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC)
	a.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_min", Name: "every-minute", Queue: "q", Cron: "* * * * *", Timezone: "UTC"}})
	for i := 0; i < 5; i++ {
		a.advance(time.Minute)
		a.one(&CronTickOp{})
	}
	// The new leader has every entry the old one committed…
	b := setup(t)
	b.now = a.now
	for _, cmd := range a.log {
		b.applyRaw(cmd)
	}
	// …the old one proposed a tick that lands twice (a retry), and the new
	// leader was down for 3 minutes before ticking again.
	b.now = b.now.Add(10 * time.Second)
	b.one(&CronTickOp{})
	b.one(&CronTickOp{})
	b.advance(3 * time.Minute)
	b.one(&CronTickOp{})
	b.advance(time.Minute)
	b.one(&CronTickOp{})
	jobs := b.fetch(100, "q")
	require.Len(t, jobs, 9, "runs 10:01 … 10:09, one each")
	seen := map[string]bool{}
	for _, j := range jobs {
		require.False(t, seen[j.Job.ID])
		seen[j.Job.ID] = true
	}
	// Deleting stops it.
	b.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_min"}, Delete: true})
	b.advance(5 * time.Minute)
	require.Zero(t, b.one(&CronTickOp{}).Count)
}

func TestStateMachineRequeueAndPriority(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 1 })
	tb.fetch(1, "q")
	tb.one(&FailOp{JobID: id, Error: "x"})
	require.Equal(t, StatePending, tb.one(&RequeueOp{JobID: id}).State)
	require.Equal(t, uint32(1), tb.get(id).State.Attempt, "requeue keeps the attempts")
	require.Equal(t, StatusConflict, tb.one(&RequeueOp{JobID: id}).Status)
	low := tb.enqueue("p", PriorityNormal)
	tb.enqueue("p", PriorityHigh)
	require.Equal(t, StatusOK, tb.one(&PriorityOp{JobID: low, Priority: PriorityCritical}).Status)
	jobs := tb.fetch(1, "p")
	require.Equal(t, low, jobs[0].Job.ID, "now critical, fetched first")
	require.Equal(t, StatusConflict, tb.one(&PriorityOp{JobID: low, Priority: PriorityHigh}).Status, "active jobs keep their tier")
}

// TestAckFetch: the ack and the next fetch in one op; a refused ack claims
// nothing, and the job it would have claimed stays pending.
func TestAckFetch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	first := tb.enqueue("q", PriorityNormal)
	next := tb.enqueue("q", PriorityNormal)
	r := tb.one(&FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 1})
	require.Len(t, r.Jobs, 1)
	require.Equal(t, first, r.Jobs[0].Job.ID)

	r = tb.one(&AckFetchOp{Ack: AckOp{JobID: first, Holder: Holder{WorkerID: "other"}}, Fetch: FetchOp{Queues: []string{"q"}, WorkerID: "other", Count: 1}})
	require.Equal(t, StatusConflict, r.Status)
	require.Empty(t, r.Jobs, "a refused ack claimed a job")
	v := tb.get(next)
	require.Equal(t, StatePending, v.State.State)

	r = tb.one(&AckFetchOp{Ack: AckOp{JobID: first, Holder: Holder{WorkerID: "w1", Attempt: 1}}, Fetch: FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 5}})
	require.Equal(t, StatusOK, r.Status)
	require.Len(t, r.Jobs, 1, "the fetch claims what is pending, no more")
	require.Equal(t, next, r.Jobs[0].Job.ID)
	require.Equal(t, StateCompleted, tb.get(first).State.State)
	require.Equal(t, StateActive, tb.get(next).State.State)
}

// TestAcksFetch: an ack batch's fetch claims only when one of the acks
// before it in the entry applied, up to its count; ops that are not acks,
// or acks outside its reach, never count.
func TestAcksFetch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	a, b := tb.enqueue("q", PriorityNormal), tb.enqueue("q", PriorityNormal)
	rest := []string{tb.enqueue("q", PriorityNormal), tb.enqueue("q", PriorityNormal), tb.enqueue("q", PriorityNormal)}
	require.Len(t, tb.fetch(2, "q"), 2)
	fetch := FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 2}

	// Every ack refused (another worker's lease): nothing claimed.
	rs := tb.apply(&AckOp{JobID: a, Holder: Holder{WorkerID: "other"}}, &AckOp{JobID: b, Holder: Holder{WorkerID: "other"}}, &AcksFetchOp{Acks: 2, Fetch: fetch})
	require.Equal(t, StatusConflict, rs[0].Status)
	require.Equal(t, StatusConflict, rs[1].Status)
	require.Equal(t, StatusOK, rs[2].Status)
	require.Empty(t, rs[2].Jobs, "refused acks claimed jobs")
	for _, id := range rest {
		require.Equal(t, StatePending, tb.get(id).State.State)
	}

	// An applied ack outside the fetch's reach does not count, nor does
	// another op that applied.
	rs = tb.apply(&AckOp{JobID: a, Holder: Holder{WorkerID: "w1"}}, &PromoteOp{}, &AcksFetchOp{Acks: 1, Fetch: fetch})
	require.Equal(t, StatusOK, rs[0].Status)
	require.Empty(t, rs[2].Jobs)

	// One ack of two applied: the fetch claims up to its count.
	rs = tb.apply(&AckOp{JobID: a}, &AckOp{JobID: b, Holder: Holder{WorkerID: "w1"}}, &AcksFetchOp{Acks: 2, Fetch: fetch})
	require.Equal(t, StatusConflict, rs[0].Status, "a is completed already")
	require.Equal(t, StatusOK, rs[1].Status)
	require.Len(t, rs[2].Jobs, 2)
	require.Equal(t, rest[:2], []string{rs[2].Jobs[0].Job.ID, rs[2].Jobs[1].Job.ID})
	require.Equal(t, StatePending, tb.get(rest[2]).State.State, "never more than count")
}

// A fetch picks queues by their cached heads and seeks only the one it
// picks: heads that are mere lower bounds of the first pending key (the
// picked queue's seek lands further) give the same jobs as exact ones.
func TestStateMachineFetchPicksByLowerBoundHeads(t *testing.T) {
	t.Parallel()
	a := setup(t)
	queues := []string{"a", "b", "c"}
	for i := range 30 {
		a.enqueue(queues[i%3], Priority(a.rnd.IntN(3)))
		if i%4 == 0 {
			a.advance(time.Millisecond)
		}
	}
	b := setup(t)
	for _, cmd := range a.log {
		b.applyRaw(cmd)
	}
	for i := 0; i < 15; i++ {
		qs := []string{queues[i%3], queues[(i+1)%3], queues[(i+2)%3]}
		cmd := a.entry(&FetchOp{Queues: qs, WorkerID: "w1", Hostname: "h", Count: uint32(1 + i%3)})
		for _, q := range queues {
			b.sm.heads[q] = pendingPrefix(q) // below every pending key of q
		}
		require.Equal(t, a.applyRaw(cmd), b.applyRaw(cmd))
	}
	require.Equal(t, a.dump(), b.dump())
}

// Allocation guard: a one-job fetch over 8 queues allocates no more than
// one over a single queue plus the array of heads, and encoding the records
// an enqueue, a claim and the stats flush write reuses the applier's buffers.
func TestApplierAllocs(t *testing.T) {
	tb := setup(t)
	queues := make([]string, 8)
	for i := range queues {
		queues[i] = fmt.Sprintf("q%d", i)
		for range 60 {
			tb.enqueue(queues[i], PriorityNormal)
		}
	}
	b := tb.sm.db.NewIndexedBatch()
	defer b.Close()
	a := newApplier(tb.sm, b)
	a.now = tb.now.UnixNano()
	fetchAllocs := func(qs []string) float64 {
		op := &FetchOp{Queues: qs, WorkerID: "w1", Hostname: "h", Count: 1}
		return testing.AllocsPerRun(50, func() {
			require.Len(t, a.fetch(op).Jobs, 1)
		})
	}
	one, eight := fetchAllocs(queues[:1]), fetchAllocs(queues)
	require.LessOrEqual(t, eight, one+1, "per-queue work in a fetch allocates (1 queue: %v, 8: %v)", one, eight)

	// Writing a state record allocates nothing: its key and its value are
	// encoded into the applier's reused buffers.
	j := Job{ID: tb.newID(), Queue: "q0", Payload: []byte(`{"n":1}`), JobOptions: DefaultJobOptions()}
	st := JobState{State: StateActive, WorkerID: "w1", Hostname: "h", Attempt: 1, LeaseExpiresAt: a.now}
	a.putState(&j, &st)
	require.Equal(t, 0.0, testing.AllocsPerRun(50, func() { a.putState(&j, &st) }))
}

// An unclaim hands a claimed job back as if its fetch never happened: no
// attempt, no error, pending at once; only the claim's own holder may.
func TestStateMachineUnclaim(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
	got := tb.fetch(1, "q")
	require.Len(t, got, 1)
	require.EqualValues(t, 1, got[0].State.Attempt)

	require.Equal(t, StatusConflict, tb.one(&UnclaimOp{JobID: id, Holder: Holder{WorkerID: "w2", Attempt: 1}}).Status)
	require.Equal(t, StatusConflict, tb.one(&UnclaimOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 2}}).Status)
	require.Equal(t, StatusInvalid, tb.one(&UnclaimOp{JobID: id}).Status)
	require.Equal(t, StateActive, tb.get(id).State.State, "refused unclaims change nothing")

	r := tb.one(&UnclaimOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}})
	require.Equal(t, StatusOK, r.Status)
	v := tb.get(id)
	require.Equal(t, StatePending, v.State.State)
	require.Zero(t, v.State.Attempt)
	require.Empty(t, v.State.WorkerID)
	require.Empty(t, v.State.Errors, "not a failure")
	qs, err := tb.sm.Lookup(ListQueuesQuery{})
	require.NoError(t, err)
	st := qs.([]QueueInfo)[0].Stats
	require.EqualValues(t, 1, st.Counts[StatePending])
	require.Zero(t, st.Counts[StateActive])
	require.Zero(t, st.Failed)

	// The lease is gone: a reclaim long after does not touch the job.
	tb.advance(time.Hour)
	require.Zero(t, tb.one(&ReclaimOp{}).Count)
	// Handed out again as a first attempt, and acked.
	again := tb.fetch(1, "q")
	require.Len(t, again, 1)
	require.EqualValues(t, 1, again[0].State.Attempt)
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}}).Status)
	require.Equal(t, StatusConflict, tb.one(&UnclaimOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}}).Status, "a finished job stays finished")

	// A cancel that came while the job was claimed is not lost: the job
	// is cancelled, not pending again.
	c := tb.enqueue("q", PriorityNormal)
	require.Len(t, tb.fetch(1, "q"), 1)
	require.Equal(t, StateActive, tb.one(&CancelOp{JobID: c}).State, "a running job's cancel waits for its worker")
	r = tb.one(&UnclaimOp{JobID: c, Holder: Holder{WorkerID: "w1", Attempt: 1}})
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, StateCancelled, r.State)
	require.Equal(t, StateCancelled, tb.get(c).State.State)
	require.Empty(t, tb.fetch(1, "q"), "nothing pending")
}

// TestStateMachineSchedulePauseAndRunNow: a paused schedule does not fire
// (nor does a replace unpause it); resumed, it fires from the next run
// after now, skipping those missed; run now enqueues a run at once, paused
// or not, and the schedule names the job of its last run.
func TestStateMachineSchedulePauseAndRunNow(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.now = time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC)
	sc := Schedule{ID: "sched_0_min", Name: "every-minute", Queue: "q", Cron: "* * * * *", Timezone: "UTC", Payload: []byte(`{"n":1}`)}
	tb.one(&ScheduleOp{Schedule: sc})
	tb.advance(time.Minute)
	require.Equal(t, uint32(1), tb.one(&CronTickOp{}).Count)
	first := tb.fetch(10, "q")
	require.Len(t, first, 1)
	require.Equal(t, first[0].Job.ID, tb.schedule("sched_0_min").LastJobID)

	require.Equal(t, StatusOK, tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_min"}, Action: SchedulePause}).Status)
	require.True(t, tb.schedule("sched_0_min").Paused)
	require.Zero(t, tb.schedule("sched_0_min").NextRun)
	tb.one(&ScheduleOp{Schedule: sc}) // a replace keeps it paused
	require.True(t, tb.schedule("sched_0_min").Paused)
	for i := 0; i < 3; i++ {
		tb.advance(time.Minute)
		require.Zero(t, tb.one(&CronTickOp{}).Count, "paused")
	}
	require.Empty(t, tb.fetch(10, "q"))

	// Run now, while paused: one job at once, with the stamped ID.
	r := tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_min", LastJobID: "job_0_01JRUNNOW0000000000000000"}, Action: ScheduleRunNow})
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, StatePending, r.State)
	ran := tb.fetch(10, "q")
	require.Len(t, ran, 1)
	require.Equal(t, "job_0_01JRUNNOW0000000000000000", ran[0].Job.ID)
	require.JSONEq(t, `{"schedule":"sched_0_min"}`, string(ran[0].Job.Tags))
	got := tb.schedule("sched_0_min")
	require.Equal(t, "job_0_01JRUNNOW0000000000000000", got.LastJobID)
	require.Equal(t, tb.now.UnixNano(), got.LastRun)

	// Resumed: the next run is the next minute after now; none missed fire.
	r = tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_min"}, Action: ScheduleResume})
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, tb.now.Truncate(time.Minute).Add(time.Minute).UnixNano(), r.NextAttemptAt)
	tb.advance(time.Minute)
	require.Equal(t, uint32(1), tb.one(&CronTickOp{}).Count)
	require.Len(t, tb.fetch(10, "q"), 1)

	require.Equal(t, StatusNotFound, tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_nope"}, Action: SchedulePause}).Status)
	require.Equal(t, StatusNotFound, tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_nope", LastJobID: "job_0_x"}, Action: ScheduleRunNow}).Status)
	require.Equal(t, StatusInvalid, tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_min"}, Action: 99}).Status)
}

// The node's quiet release empties the job cache, flushes the memtable and
// reopens the DB from another goroutine while entries apply, lookups read
// and a snapshot is saved: the state is the same bytes as without it, and
// the release does what it says.
func TestStateMachineReleaseMemoryChangesNoResult(t *testing.T) {
	t.Parallel()
	a := setup(t)
	randomLog(a, 600)
	b := setup(t)
	var released atomic.Int64
	done := make(chan struct{})
	errs := make(chan error, 2)
	go func() { // releases
		for {
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
			if err := b.sm.ReleaseMemory(); err != nil {
				errs <- err
				<-done
				return
			}
			released.Add(1)
		}
	}()
	go func() { // lookups
		for {
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
			if _, err := b.sm.Lookup(ListQueuesQuery{}); err != nil {
				errs <- err
				<-done
				return
			}
		}
	}()
	for i, cmd := range a.log {
		b.applyRaw(cmd)
		if i == len(a.log)/2 {
			// At least one release lands in the middle of the log, and a
			// snapshot is taken while they go on.
			for start := released.Load(); released.Load() == start; {
				runtime.Gosched()
			}
			ctx, err := b.sm.PrepareSnapshot()
			require.NoError(t, err)
			require.NoError(t, b.sm.SaveSnapshot(ctx, io.Discard, nil))
		}
	}
	close(done)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.Equal(t, a.dump(), b.dump())

	// A burst grew the memtable; jobs are in the cache. Released: the
	// cache is empty, the DB is a fresh one with a small memtable, and
	// every job is still served.
	var ids []string
	for range 3000 {
		ids = append(ids, b.enqueue("rel", PriorityNormal, func(j *Job) { j.Payload = bytes.Repeat([]byte("x"), 1000) }))
	}
	mem, cached := b.sm.MemoryUsage()
	require.Positive(t, cached)
	require.Greater(t, mem, int64(1<<20))
	before := b.sm.db
	require.NoError(t, b.sm.ReleaseMemory())
	mem, cached = b.sm.MemoryUsage()
	require.Zero(t, cached)
	require.NotSame(t, before, b.sm.db)
	require.LessOrEqual(t, mem, int64(1<<20))
	got := b.fetch(len(ids), "rel")
	require.Len(t, got, len(ids))
	require.Equal(t, ids[0], got[0].Job.ID)
	require.NoError(t, b.sm.Close())
	require.NoError(t, b.sm.ReleaseMemory(), "a closed state machine has nothing to release")
}

// A job's enqueue applied again in an entry of its own (the dedup record
// of the first entry not found, whatever the reason) changes nothing: a
// completed job is not put back to pending to run again.
func TestStateMachineEnqueueOfAnExistingIDChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.newID()
	op := &EnqueueOp{Job: Job{ID: id, Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{Priority: PriorityNormal, MaxRetries: 3}}}
	require.Equal(t, StatusOK, tb.one(op).Status)
	require.Len(t, tb.fetch(1, "q"), 1)
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}}).Status)
	before := tb.dump()

	tb.advance(time.Second)
	r := tb.one(op) // a new entry, a new entry ID: no dedup record matches
	require.Equal(t, StatusOK, r.Status)
	require.True(t, r.Existing)
	require.Equal(t, id, r.JobID)
	require.Equal(t, StateCompleted, r.State)
	require.Equal(t, StateCompleted, tb.get(id).State.State)
	after := tb.dump()
	require.Equal(t, len(before)+1, len(after), "only the second entry's dedup record is new")
	require.Empty(t, tb.fetch(1, "q"), "the job is not pending again")
}

// The dead-letter list by queue: each entry carries its job's queue, so a
// list of one queue skips the others' jobs unread; a dead job moved to
// another queue is listed under it, and an entry written before the queue
// was (an empty value) is still read and filtered by its job.
func TestStateMachineDeadListByQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	kill := func(q string) string {
		id := tb.enqueue(q, PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
		tb.fetch(1, q)
		require.Equal(t, StateDead, tb.one(&FailOp{JobID: id, Error: "x"}).State)
		tb.advance(time.Millisecond)
		return id
	}
	var a, b []string
	for i := 0; i < 6; i++ {
		a = append(a, kill("a"))
	}
	b = append(b, kill("b"), kill("ns/b"))
	list := func(q DeadQuery) []string {
		q.Limit = 50
		v, err := tb.sm.Lookup(q)
		require.NoError(t, err)
		var ids []string
		for _, j := range v.(DeadPage).Jobs {
			ids = append(ids, j.Job.ID)
		}
		return ids
	}
	require.Equal(t, []string{b[0]}, list(DeadQuery{Queue: "b"}))
	require.Equal(t, []string{b[1]}, list(DeadQuery{Namespace: "ns"}))
	require.Len(t, list(DeadQuery{}), 8)

	// Moved from a to b while dead: listed under b only.
	require.Equal(t, StateDead, tb.one(&MoveJobOp{JobID: a[0], Queue: "b"}).State)
	require.Equal(t, []string{b[0], a[0]}, list(DeadQuery{Queue: "b"}))
	require.NotContains(t, list(DeadQuery{Queue: "a"}), a[0])

	// An entry from before the value: read, and filtered by its job.
	st := tb.get(a[1]).State
	k := timeIndexKey(pfxDead, st.CompletedAt, a[1])
	v, closer, err := tb.sm.db.Get(k)
	require.NoError(t, err)
	require.Equal(t, "a", string(v))
	require.NoError(t, closer.Close())
	require.NoError(t, tb.sm.db.Set(k, nil, pebble.NoSync))
	require.Contains(t, list(DeadQuery{Queue: "a"}), a[1])
	require.NotContains(t, list(DeadQuery{Queue: "b"}), a[1])
}

// TestStateMachineUnfinishedRecoveryIsEmptied: a snapshot recovery commits
// its stream in batches, so one that stops half-way (the node shuts down,
// the stream breaks) leaves part of the snapshot in the DB, and Close
// flushes it. The next Open must not take that for a state: it finds no
// applied index (recover writes it last), empties the DB and returns 0,
// and the recovery can then run again from the start.
func TestStateMachineUnfinishedRecoveryIsEmptied(t *testing.T) {
	t.Parallel()
	a := setup(t)
	for i := range 40 {
		a.enqueue(fmt.Sprintf("q%d", i%4), PriorityNormal)
	}
	a.fetch(5, "q0")
	want, applied := a.dump(), a.sm.Applied()
	ctx, err := a.sm.PrepareSnapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, a.sm.SaveSnapshot(ctx, &buf, nil))
	snap := buf.Bytes()

	b := setup(t)
	b.enqueue("old", PriorityNormal) // state the recovery replaces
	b.sm.recoverBatch = 256          // many batches, so some commit before the break
	broken := io.MultiReader(bytes.NewReader(snap[:len(snap)*9/10]), iotest.ErrReader(errors.New("stream broken")))
	require.Error(t, b.sm.RecoverFromSnapshot(broken, nil))
	b.reopen() // Close flushes what the recovery committed
	require.Zero(t, b.index, "Open returns no applied index for an unfinished recovery")
	require.Empty(t, b.dump(), "the rest of the unfinished recovery is gone")

	require.NoError(t, b.sm.RecoverFromSnapshot(bytes.NewReader(snap), nil))
	require.Equal(t, want, b.dump())
	require.Equal(t, applied, b.sm.Applied())
	b.reopen()
	require.Equal(t, applied, b.index)
	require.Equal(t, want, b.dump())
}
