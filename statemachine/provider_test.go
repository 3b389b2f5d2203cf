package statemachine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// signalRecorder keeps the last signal of each queue.
type signalRecorder struct{ last map[string]QueueSignal }

func (r *signalRecorder) Applied(info *AppliedInfo) {
	for _, q := range info.Queues {
		r.last[q.Queue] = q
	}
}

// setupShard is a bundle whose state machine is shard index shard (its
// ShardID is shard+1) and records queue signals.
func setupShard(t *testing.T, shard uint32) (*testBundle, *signalRecorder) {
	rec := &signalRecorder{last: map[string]QueueSignal{}}
	tb := &testBundle{t: t, dir: t.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, uint64(shard)+2)),
		listener: rec, shardID: uint64(shard) + 1}
	tb.open()
	t.Cleanup(func() { _ = tb.sm.Close() })
	return tb, rec
}

func (tb *testBundle) providers() []ProviderInfo {
	v, err := tb.sm.Lookup(ProvidersQuery{Now: tb.now.UnixNano()})
	require.NoError(tb.t, err)
	return v.([]ProviderInfo)
}

func (tb *testBundle) setProvider(p Provider) {
	r := tb.one(&SetProviderOp{Provider: p})
	require.Equal(tb.t, StatusOK, r.Status, r.Message)
}

func (tb *testBundle) link(queue, provider string) Result {
	r := tb.one(&LinkProviderOp{Queue: queue, Provider: provider})
	require.Equal(tb.t, StatusOK, r.Status, r.Message)
	return r
}

func (tb *testBundle) fill(queue string, n int) {
	for range n {
		tb.enqueue(queue, PriorityNormal)
	}
}

// TestProviderRequestWindow: two queues linked to one provider share its
// requests per minute, in one fetch and across fetches; the signal says
// until when they are blocked (the oldest fetch's time plus a minute),
// and the window frees then, by the entries' time; it survives a reopen
// and a snapshot restore.
func TestProviderRequestWindow(t *testing.T) {
	t.Parallel()
	tb, sig := setupShard(t, 0)
	tb.setProvider(Provider{Name: "anthropic", RPM: 10})
	tb.fill("a", 20)
	tb.fill("b", 20)
	tb.link("a", "anthropic")
	tb.link("b", "anthropic")
	start := tb.now
	require.Len(t, tb.fetch(4, "a"), 4)
	tb.advance(10 * time.Second)
	require.Len(t, tb.fetch(100, "a", "b"), 6, "the rest of the pool, over both queues")
	require.Empty(t, tb.fetch(100, "b"))
	require.Equal(t, start.UnixNano()+ProviderWindowNs+1, sig.last["b"].BlockedUntil)
	require.Equal(t, "anthropic", sig.last["b"].Provider)

	info := tb.providers()
	require.Len(t, info, 1)
	require.Equal(t, int64(10), info[0].Requests)
	require.Equal(t, ProviderShare{RPM: 10, InputTPM: -1, OutputTPM: -1}, info[0].Share)
	require.Equal(t, []string{"a", "b"}, info[0].Queues)

	tb.reopen()
	tb.now = start.Add(time.Minute - time.Nanosecond)
	require.Empty(t, tb.fetch(1, "a"), "the oldest fetch is still inside the window")
	tb.advance(time.Nanosecond)
	require.Len(t, tb.fetch(100, "b", "a"), 4, "the first four left the window")
	require.Equal(t, start.Add(10*time.Second).UnixNano()+ProviderWindowNs+1, sig.last["a"].BlockedUntil)

	// A snapshot carries the window.
	other := tb.restored()
	require.Equal(t, tb.dump(), other.dump())
	require.Empty(t, other.fetch(1, "a"), "the restored window is full")
}

// TestProviderTighterOfQueueAndProvider: a queue's own throttle and its
// provider's share both hold, whichever is tighter; unlinking leaves the
// queue's own.
func TestProviderTighterOfQueueAndProvider(t *testing.T) {
	t.Parallel()
	tb, sig := setupShard(t, 0)
	tb.setProvider(Provider{Name: "p", RPM: 5})
	tb.fill("q", 30)
	tb.one(&SetLimitsOp{Queue: "q", SetThrottle: true, RateLimit: 3, RateWindowMs: 10_000})
	tb.link("q", "p")
	require.Len(t, tb.fetch(10, "q"), 3, "the queue's throttle is tighter")
	require.Equal(t, tb.now.UnixNano()+10_000*1e6+1, sig.last["q"].BlockedUntil)
	require.Empty(t, sig.last["q"].Provider)
	tb.advance(10*time.Second + time.Millisecond)
	require.Len(t, tb.fetch(10, "q"), 2, "now the provider's share is")
	require.Equal(t, "p", sig.last["q"].Provider)
	require.Equal(t, tb.now.Add(-10*time.Second-time.Millisecond).UnixNano()+ProviderWindowNs+1, sig.last["q"].BlockedUntil)
	tb.advance(10*time.Second + time.Millisecond)
	require.Empty(t, tb.fetch(10, "q"), "the queue's window has room, the provider's has not")

	r := tb.link("q", "")
	require.Equal(t, []ProviderMember{{Name: "p", Shard: 0, Gen: 2, In: false}}, r.Members)
	require.Len(t, tb.fetch(10, "q"), 3, "unlinked: the queue's own throttle only")
}

// TestProviderTokenWindows: usage reported by heartbeats (the change
// each cumulative report makes), acks and fails fills the provider's
// token windows; at the input or output share the queue hands out
// nothing until the reports leave the window.
func TestProviderTokenWindows(t *testing.T) {
	t.Parallel()
	tb, sig := setupShard(t, 0)
	tb.setProvider(Provider{Name: "p", InputTPM: 1000, OutputTPM: 300})
	tb.fill("q", 10)
	tb.link("q", "p")
	jobs := tb.fetch(3, "q")
	require.Len(t, jobs, 3, "no request limit")
	t0 := tb.now
	hb := func(id string, in, out int64) {
		r := tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Usage: &Usage{InputTokens: in, OutputTokens: out}}}})
		require.Equal(t, StatusOK, r.Status, r.Message)
	}
	hb(jobs[0].Job.ID, 300, 50)
	tb.advance(time.Second)
	hb(jobs[0].Job.ID, 600, 60) // cumulative: adds 300 and 10
	require.Len(t, tb.fetch(1, "q"), 1, "600 of 1000 input, 60 of 300 output")
	tb.advance(time.Second)
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: jobs[1].Job.ID, Usage: &Usage{InputTokens: 400, OutputTokens: 10}}).Status)
	require.Empty(t, tb.fetch(1, "q"), "1000 input tokens in the window")
	require.Equal(t, t0.UnixNano()+ProviderWindowNs+1, sig.last["q"].BlockedUntil,
		"free once the first report (300) has left it")
	info := tb.providers()
	require.Equal(t, int64(1000), info[0].InputTokens)
	require.Equal(t, int64(70), info[0].OutputTokens)

	tb.now = t0.Add(time.Minute - time.Nanosecond)
	require.Empty(t, tb.fetch(1, "q"))
	tb.now = t0.Add(time.Minute)
	require.Len(t, tb.fetch(1, "q"), 1, "the window freed")

	// The output window alone blocks too (a fail's report).
	require.Equal(t, StatusOK, tb.one(&FailOp{JobID: jobs[2].Job.ID, Error: "e", Usage: &Usage{OutputTokens: 300}}).Status)
	require.Empty(t, tb.fetch(1, "q"))
	require.Equal(t, tb.now.UnixNano()+ProviderWindowNs+1, sig.last["q"].BlockedUntil)
	tb.advance(time.Minute + time.Nanosecond)
	require.Len(t, tb.fetch(1, "q"), 1)
}

// TestProviderSharesAcrossShards: every shard holds the provider; each
// hosting a linked queue is a member, and each member's share is the
// limit split equally, the remainder to the lowest shards, so the shares
// add up to the limit. Membership changes travel by generation: an older
// one arriving late changes nothing.
func TestProviderSharesAcrossShards(t *testing.T) {
	t.Parallel()
	shards := make([]*testBundle, 3)
	for i := range shards {
		shards[i], _ = setupShard(t, uint32(i))
		shards[i].setProvider(Provider{Name: "p", RPM: 10, InputTPM: 1000})
	}
	// What the gateway does: the link's membership to every shard.
	link := func(sh int, q, p string) {
		for _, m := range shards[sh].link(q, p).Members {
			for _, o := range shards {
				r := o.one(&ProviderMemberOp{Member: m})
				require.Equal(t, StatusOK, r.Status, r.Message)
			}
		}
	}
	share := func(sh int) ProviderShare { return shards[sh].providers()[0].Share }
	link(0, "a", "p")
	require.Equal(t, ProviderShare{RPM: 10, InputTPM: 1000, OutputTPM: -1}, share(0))
	require.Equal(t, int64(0), share(1).RPM, "not a member: no share")
	link(2, "c", "p")
	link(2, "c2", "p") // a second queue on a member shard changes nothing
	require.Equal(t, ProviderShare{RPM: 5, InputTPM: 500, OutputTPM: -1}, share(0))
	require.Equal(t, ProviderShare{RPM: 5, InputTPM: 500, OutputTPM: -1}, share(2))
	link(1, "b", "p")
	var sum int64
	for sh := range shards {
		sum += share(sh).RPM
	}
	require.Equal(t, int64(10), sum)
	require.Equal(t, []int64{4, 3, 3}, []int64{share(0).RPM, share(1).RPM, share(2).RPM})

	// Shard 1 leaves; a stale "in" of it arriving later is ignored.
	stale := shards[1].link("b", "p").Members[0]
	link(1, "b", "")
	for _, o := range shards {
		o.one(&ProviderMemberOp{Member: stale})
	}
	require.Equal(t, []int64{5, 0, 5}, []int64{share(0).RPM, share(1).RPM, share(2).RPM})

	// Linking to a provider that does not exist changes nothing.
	r := shards[0].one(&LinkProviderOp{Queue: "a", Provider: "nope"})
	require.Equal(t, StatusNotFound, r.Status)
	require.Equal(t, []string{"a"}, shards[0].providers()[0].Queues)

	// Deleting the provider unlinks its queues and drops its windows.
	shards[0].fill("a", 3)
	require.Len(t, shards[0].fetch(3, "a"), 3)
	require.Equal(t, StatusOK, shards[0].one(&SetProviderOp{Provider: Provider{Name: "p"}, Delete: true}).Status)
	require.Empty(t, shards[0].providers())
	require.Equal(t, StatusNotFound, shards[0].one(&LinkProviderOp{Queue: "a", Provider: "p"}).Status)
	for _, k := range shards[0].dump() {
		require.NotContains(t, k, `"pr|`, "the request window went with the provider")
	}
	v, err := shards[0].sm.Lookup(ListQueuesQuery{})
	require.NoError(t, err)
	for _, q := range v.([]QueueInfo) {
		require.Empty(t, q.Config.Provider, q.Name)
	}
}

// TestProviderShareZero: a limit smaller than the member count leaves
// some shards no share; their queues are blocked until a later signal.
func TestProviderShareZero(t *testing.T) {
	t.Parallel()
	tb, sig := setupShard(t, 1)
	tb.setProvider(Provider{Name: "p", RPM: 1})
	tb.fill("q", 2)
	tb.link("q", "p")
	require.Equal(t, StatusOK, tb.one(&ProviderMemberOp{Member: ProviderMember{Name: "p", Shard: 0, Gen: 1, In: true}}).Status)
	require.Empty(t, tb.fetch(1, "q"), "shard 0 takes the single request")
	require.Equal(t, int64(math.MaxInt64), sig.last["q"].BlockedUntil)
	require.Equal(t, StatusOK, tb.one(&ProviderMemberOp{Member: ProviderMember{Name: "p", Shard: 0, Gen: 2, In: false}}).Status)
	require.True(t, sig.last["q"].Ready, "a share given wakes the queue")
	require.Len(t, tb.fetch(1, "q"), 1)
}

// TestProviderInvalid: a bad provider or link changes nothing.
func TestProviderInvalid(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, op := range []Op{
		&SetProviderOp{Provider: Provider{Name: "", RPM: 1}},
		&SetProviderOp{Provider: Provider{Name: "a b", RPM: 1}},
		&SetProviderOp{Provider: Provider{Name: "p"}},
		&SetProviderOp{Provider: Provider{Name: "p", RPM: -1}},
		&SetProviderOp{Provider: Provider{Name: "p", RPM: MaxProviderLimit + 1}},
		&LinkProviderOp{Queue: "q", Provider: "a\x00b"},
		&ProviderMemberOp{Member: ProviderMember{Name: ""}},
	} {
		require.Equal(t, StatusInvalid, tb.one(op).Status, "%#v", op)
	}
	require.Equal(t, StatusNotFound, tb.one(&SetProviderOp{Provider: Provider{Name: "p"}, Delete: true}).Status)
	require.Equal(t, StatusNotFound, tb.one(&ProviderMemberOp{Member: ProviderMember{Name: "p", Shard: 2, Gen: 1, In: true}}).Status)
	for _, k := range tb.dump() {
		require.NotRegexp(t, `^"(pv|qc|pr|pt)\|`, k)
	}
}
