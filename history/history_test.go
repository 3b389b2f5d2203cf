package history

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newRecorder(t *testing.T, c *clock) *Recorder {
	t.Helper()
	r, err := New(Config{Shards: 2, Now: c.Now})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

func TestSketchQuantiles(t *testing.T) {
	t.Parallel()
	for i := 0; i <= bucketOf(1<<62); i++ {
		lo, w := bucketRange(i)
		require.Equal(t, i, bucketOf(lo), "bucket %d starts at %d", i, lo)
		require.Equal(t, i, bucketOf(lo+w-1), "bucket %d ends at %d", i, lo+w-1)
	}
	var s sketch
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]int64, 10000)
	for i := range vals {
		vals[i] = int64(rng.ExpFloat64() * 50000) // µs, mean 50 ms
		s.add(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.95, 0.99} {
		want := float64(vals[int(q*float64(len(vals)))-1])
		require.InDelta(t, want, float64(s.quantile(q)), want*0.017, "q%.2f", q)
	}
	var same sketch
	for range 5 {
		same.add(2_000_000)
	}
	require.Equal(t, int64(2_000_000), same.quantile(0.5), "equal values read back exactly")
	var a, b sketch
	a.add(10)
	b.add(5_000_000)
	a.merge(&b)
	require.Equal(t, uint64(2), a.n)
	require.Equal(t, int64(10), a.quantile(0.5))
	require.Equal(t, int64(5_000_000), a.quantile(0.99))
}

// change is a job's view after an Update.
func change(queue string, st statemachine.JobState, created int64, errs ...statemachine.JobError) statemachine.JobChange {
	v := &statemachine.JobView{Job: statemachine.Job{ID: "j", Queue: queue, CreatedAt: created}, State: st}
	v.Job.JobOptions = statemachine.DefaultJobOptions()
	return statemachine.JobChange{ID: "j", Job: &v.Job, State: v.State, NewErrors: errs}
}

func TestLatencyFromChanges(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	r := newRecorder(t, c)
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	// Replayed from before the recorder started: not counted.
	r.apply(&statemachine.AppliedInfo{ShardID: 1, Changes: []statemachine.JobChange{
		change("q", statemachine.JobState{State: statemachine.StateCompleted, Attempt: 1, StartedAt: ns(-3 * time.Second), CompletedAt: ns(-time.Second)}, ns(-5*time.Second)),
	}})
	// Started 2 s after creation, in one Update; completed 3 s later in another.
	r.apply(&statemachine.AppliedInfo{ShardID: 1, Changes: []statemachine.JobChange{
		change("q", statemachine.JobState{State: statemachine.StateActive, Attempt: 1, StartedAt: ns(2 * time.Second)}, ns(0)),
	}})
	// A heartbeat of it: no second wait.
	r.apply(&statemachine.AppliedInfo{ShardID: 1, Changes: []statemachine.JobChange{
		change("q", statemachine.JobState{State: statemachine.StateActive, Attempt: 1, StartedAt: ns(2 * time.Second)}, ns(0)),
	}})
	r.apply(&statemachine.AppliedInfo{ShardID: 1, Changes: []statemachine.JobChange{
		change("q", statemachine.JobState{State: statemachine.StateCompleted, Attempt: 1, StartedAt: ns(2 * time.Second), CompletedAt: ns(5 * time.Second)}, ns(0)),
	}})
	// Started and failed in one Update: a wait and a run.
	r.apply(&statemachine.AppliedInfo{ShardID: 1, Changes: []statemachine.JobChange{
		change("q", statemachine.JobState{State: statemachine.StateRetrying, Attempt: 1, StartedAt: ns(6 * time.Second), FailedAt: ns(8 * time.Second)}, ns(4*time.Second),
			statemachine.JobError{Attempt: 1, At: ns(8 * time.Second), StartedAt: ns(6 * time.Second), RetryAt: ns(9 * time.Second)}),
	}})
	// Its retry starts 1.5 s after the backoff (5 s by default) ended.
	v := change("q", statemachine.JobState{State: statemachine.StateActive, Attempt: 2, StartedAt: ns(14500 * time.Millisecond), FailedAt: ns(8 * time.Second)}, ns(4*time.Second))
	r.apply(&statemachine.AppliedInfo{ShardID: 1, Changes: []statemachine.JobChange{v}})
	c.Set(t0.Add(20 * time.Second))
	lat := r.Latency([]int{0}, nil)
	require.Len(t, lat, 1)
	q := lat["q"]
	require.NotNil(t, q.Wait)
	require.NotNil(t, q.Run)
	require.Equal(t, uint64(3), q.Wait.N, "three starts")
	require.Equal(t, uint64(2), q.Run.N, "one completion, one failure")
	// Waits 1.5 s, 2 s, 2 s; runs 2 s and 3 s; a quantile is within 1.6%
	// of a sample and never outside the samples.
	require.InDelta(t, 2000.0, q.Wait.P50, 2000*0.016)
	require.InDelta(t, 2000.0, q.Wait.P99, 2000*0.016)
	require.InDelta(t, 2000.0, q.Run.P50, 2000*0.016)
	require.Equal(t, 3000.0, q.Run.P99, "the largest sample")
	require.Empty(t, r.Latency([]int{1}, nil), "another shard's queues")
	// Past the window, nothing.
	c.Set(t0.Add(6 * time.Minute))
	require.Empty(t, r.Latency([]int{0}, nil))
}

func TestHistorySamples(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	r := newRecorder(t, c)
	sample := func(at time.Duration, enq, done int64, pending int64) {
		r.Sample(0, t0.Add(at), []QueueSample{{Name: "q", Enqueued: enq, Completed: done, Pending: pending}})
	}
	sample(0, 100, 50, 50)                   // first sample: no rates
	sample(10*time.Second, 200, 150, 50)     // +100, +100
	sample(20*time.Second, 300, 250, 50)     // the same again: coalesced
	sample(30*time.Second, 300, 250, 50)     // idle
	sample(60*time.Second, 310, 260, 50)     // after a gap: no rates
	r.Sample(0, t0.Add(70*time.Second), nil) // the queue is gone
	b0 := BucketOf(t0)
	qs, sampled := r.History([]int{0}, nil, Range{From: b0, To: b0 + 7, Step: 1})
	require.Equal(t, []bool{true, true, true, true, false, false, true, true}, sampled)
	pts := qs["q"]
	require.Len(t, pts, 8)
	rate := func(p *float64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	count := func(p *int64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	var enq, pend []any
	for _, p := range pts {
		enq, pend = append(enq, rate(p.Enqueued)), append(pend, count(p.Pending))
	}
	require.Equal(t, []any{nil, 10.0, 10.0, 0.0, nil, nil, nil, 0.0}, enq)
	require.Equal(t, []any{int64(50), int64(50), int64(50), int64(50), nil, nil, int64(50), int64(0)}, pend)
	require.Len(t, r.shards[0].queues["q"].points, 5, "the steady bucket cost no point")
	// Two buckets a point: rates averaged, counts the last.
	qs, _ = r.History([]int{0}, nil, Range{From: b0, To: b0 + 3, Step: 2})
	require.Equal(t, 10.0, *qs["q"][0].Enqueued)
	require.Equal(t, 5.0, *qs["q"][1].Enqueued)
	// Shard 1 was never sampled.
	qs, sampled = r.History([]int{1}, nil, Range{From: b0, To: b0 + 3, Step: 1})
	require.Empty(t, qs)
	require.Equal(t, []bool{false, false, false, false}, sampled)
}

func TestHistoryKeepsADay(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	r, err := New(Config{Shards: 1, Now: c.Now, Keep: time.Hour})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	for i := 0; i < 2*360; i++ {
		r.Sample(0, t0.Add(time.Duration(i)*Step), []QueueSample{{Name: "q", Enqueued: int64(i * i)}})
	}
	pts := r.shards[0].queues["q"].points
	require.LessOrEqual(t, len(pts), 361, "points older than keep are dropped")
	end := BucketOf(t0) + 719
	qs, _ := r.History([]int{0}, nil, Range{From: end - 1, To: end, Step: 1})
	require.Equal(t, float64(719*719-718*718)/10, *qs["q"][1].Enqueued)
	require.Equal(t, float64(718*718-717*717)/10, *qs["q"][0].Enqueued)
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Shards: 4}.WithDefaults()
	require.Equal(t, KeepDefault, c.Keep)
	require.Equal(t, WindowDefault, c.Window)
	require.Equal(t, MaxQueuesDefault, c.MaxQueues)
	require.NoError(t, c.Validate())
	bad := c
	bad.Window = 15 * time.Second
	require.Error(t, bad.Validate())
	bad = c
	bad.Shards = 0
	require.Error(t, bad.Validate())
}

func TestAppliedQueues(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	r := newRecorder(t, c)
	at := t0.Add(time.Second).UnixNano()
	r.Applied(&statemachine.AppliedInfo{ShardID: 2, Changes: []statemachine.JobChange{
		change("q", statemachine.JobState{State: statemachine.StateActive, Attempt: 1, StartedAt: at}, at-int64(time.Second)),
	}})
	r.Sync()
	require.Equal(t, uint64(1), r.Latency([]int{1}, nil)["q"].Wait.N)
	require.Equal(t, 1000.0, r.Latency([]int{1}, nil)["q"].Wait.P50)
}

// BenchmarkApplied is the cost per job of taking latency from an Update's
// changes: 64 jobs an Update, each started and completed (two samples).
func BenchmarkApplied(b *testing.B) {
	c := &clock{t: t0}
	r, err := New(Config{Shards: 1, Now: c.Now})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	queues := []string{"a", "b", "c", "d"}
	info := &statemachine.AppliedInfo{ShardID: 1, Changes: make([]statemachine.JobChange, 64)}
	for k := range info.Changes {
		info.Changes[k] = change(queues[k%len(queues)], statemachine.JobState{State: statemachine.StateCompleted, Attempt: 1}, 0)
	}
	at := t0.UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(info.Changes) {
		at += int64(time.Second) // later than every start and finish before
		for k := range info.Changes {
			at += 1000
			c := &info.Changes[k]
			c.Job.CreatedAt, c.State.StartedAt, c.State.CompletedAt = at-int64(k)*int64(time.Millisecond), at, at+int64(k)*int64(time.Millisecond)
		}
		r.apply(info)
	}
}

// BenchmarkAppliedHandOff is what the apply path pays: one channel send an
// Update (the goroutine's work is BenchmarkApplied's).
func BenchmarkAppliedHandOff(b *testing.B) {
	r, err := New(Config{Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	info := &statemachine.AppliedInfo{ShardID: 1, Changes: make([]statemachine.JobChange, 1)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Applied(info)
	}
}
