package statemachine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

type nopListener struct{}

func (nopListener) Applied(*AppliedInfo) {}

// BenchmarkLifecycleBatch100: 100 jobs enqueued, fetched and acked in three
// entries, with and without lifecycle events (their cost on the apply path).
func BenchmarkLifecycleBatch100(b *testing.B) {
	// The server's default is the last: events for the SSE ring and
	// changes for the mirror.
	for _, c := range []struct {
		name            string
		events, changes bool
	}{{"events=off", false, false}, {"events=on", true, false}, {"events+changes", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			tb := &testBundle{t: b, dir: b.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
			tb.sm = New(Config{ShardID: 1, Dir: tb.dir, Listener: nopListener{}, EmitEvents: c.events, EmitChanges: c.changes})
			if _, err := tb.sm.Open(nil); err != nil {
				b.Fatal(err)
			}
			defer tb.sm.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ops := make([]Op, 100)
				for k := range ops {
					ops[k] = &EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{"n":1}`), JobOptions: JobOptions{MaxRetries: 3}}}
				}
				tb.apply(ops...)
				jobs := tb.one(&FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 100}).Jobs
				acks := make([]Op, len(jobs))
				for k := range jobs {
					acks[k] = &AckOp{JobID: jobs[k].Job.ID}
				}
				tb.apply(acks...)
				tb.advance(time.Millisecond)
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// benchEnqueueEntry is an entry of 100 enqueues as the gateway proposes
// them (defaults, small payload, a tag).
func benchEnqueueEntry() *Entry {
	e := &Entry{ID: NewEntryID(1, 2), Now: 3, Ops: make([]Op, 100)}
	for k := range e.Ops {
		j := minJobV1()
		j.ID = fmt.Sprintf("job_0_01J%023d", k)
		j.Tags = []byte(`{"tenant":"acme"}`)
		e.Ops[k] = &EnqueueOp{Job: j}
	}
	return e
}

// BenchmarkEncodeEnqueueEntry: the proposer's encode of 100 enqueues.
func BenchmarkEncodeEnqueueEntry(b *testing.B) {
	e := benchEnqueueEntry()
	buf := e.Encode(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = e.Encode(buf[:0])
	}
}

// BenchmarkDecodeEnqueueEntry: the apply side's decode of the same entry.
func BenchmarkDecodeEnqueueEntry(b *testing.B) {
	buf := benchEnqueueEntry().Encode(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := DecodeEntry(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeJobRecord: one j| record, as every transition loads it.
func BenchmarkDecodeJobRecord(b *testing.B) {
	j := fullJobV1()
	buf := j.appendTo(nil)
	b.ReportAllocs()
	for b.Loop() {
		var got Job
		d := dec{b: buf}
		got.decode(&d)
		if d.err != nil {
			b.Fatal(d.err)
		}
	}
}

// BenchmarkLifecycleOneJobOps: the e2e shape of one job per request, as the
// proposer coalesces it: entries of 8 enqueues (one per queue), 8 fetches
// of one job each over all 8 queues in rotating order, and 8 acks, over a
// backlog of a few jobs per queue; each entry a microsecond after the last,
// as the proposer stamps them. Reported per job. "flushed" first runs
// 20,000 jobs through and flushes them to SSTs, so reads that miss go past
// the memtable as in a server that has run a while.
func BenchmarkLifecycleOneJobOps(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchOneJobOps(b, 0, 8) })
	b.Run("flushed", func(b *testing.B) { benchOneJobOps(b, 20000, 8) })
	// One op per entry: the shape at a low, steady rate (the fixed-rate
	// phase), where every request is an entry of its own.
	b.Run("single", func(b *testing.B) { benchOneJobOps(b, 20000, 1) })
}

func benchOneJobOps(b *testing.B, history, per int) {
	const nq = 8
	tb := &testBundle{t: b, dir: b.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
	tb.sm = New(Config{ShardID: 1, Dir: tb.dir, Listener: nopListener{}, EmitChanges: true})
	if _, err := tb.sm.Open(nil); err != nil {
		b.Fatal(err)
	}
	defer tb.sm.Close()
	queues := make([]string, nq)
	for i := range queues {
		queues[i] = fmt.Sprintf("queue-%d", i)
	}
	apply := func(ops []Op) []Result {
		tb.index++
		tb.advance(time.Microsecond)
		out, err := tb.sm.Update([]sm.Entry{{Index: tb.index, Cmd: tb.entry(ops...)}})
		if err != nil || out[0].Result.Value != ResultApplied {
			b.Fatal(err)
		}
		rs, err := DecodeResults(out[0].Result.Data)
		if err != nil {
			b.Fatal(err)
		}
		return rs
	}
	enq := 0
	enqueue := func() {
		ops := make([]Op, per)
		for k := range ops {
			enq++
			ops[k] = &EnqueueOp{Job: Job{ID: tb.newID(), Queue: queues[enq%nq], Payload: []byte(`{"n":1}`), JobOptions: DefaultJobOptions()}}
		}
		apply(ops)
	}
	for range 4 * nq / per {
		enqueue()
	}
	rot := 0
	round := func() {
		enqueue()
		ops := make([]Op, per)
		for k := range ops {
			qs := make([]string, nq)
			for x := range qs {
				qs[x] = queues[(rot+x)%nq]
			}
			rot++
			ops[k] = &FetchOp{Queues: qs, WorkerID: fmt.Sprintf("w%d", k), Hostname: "h", Count: 1}
		}
		var acks []Op
		for _, r := range apply(ops) {
			for _, j := range r.Jobs {
				acks = append(acks, &AckOp{JobID: j.Job.ID})
			}
		}
		apply(acks)
		tb.advance(time.Millisecond)
	}
	for i := 0; i < history; i += per {
		round()
	}
	if history > 0 {
		if err := tb.sm.db.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	benchRounds(b.N, per, round)
}

// benchRounds is the timed loop, a function of its own so that callgrind
// can count it alone (--toggle-collect='*benchRounds').
//
//go:noinline
func benchRounds(n, per int, round func()) {
	for i := 0; i < n; i += per {
		round()
	}
}

// BenchmarkListDeadByQueue: one page of a queue's dead letters on a shard
// where another queue has 20,000 (the on-call view of one queue).
func BenchmarkListDeadByQueue(b *testing.B) {
	tb := setup(b)
	kill := func(q string, n int) {
		ops := make([]Op, 0, n)
		for i := 0; i < n; i++ {
			j := Job{ID: tb.newID(), Queue: q, Payload: []byte(`{}`), JobOptions: DefaultJobOptions()}
			j.MaxRetries = 0
			ops = append(ops, &EnqueueOp{Job: j})
		}
		tb.apply(ops...)
		for done := 0; done < n; {
			got := tb.fetch(min(n-done, 500), q)
			fails := make([]Op, len(got))
			for i, v := range got {
				fails[i] = &FailOp{JobID: v.Job.ID, Error: "x"}
			}
			tb.apply(fails...)
			done += len(got)
		}
	}
	kill("b", 5)
	for i := 0; i < 20; i++ {
		kill("a", 1000)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, err := tb.sm.Lookup(DeadQuery{Queue: "b", Limit: 50})
		if err != nil || len(v.(DeadPage).Jobs) != 5 {
			b.Fatal(err, v)
		}
	}
}

// BenchmarkEnqueueBacklog: bulk enqueues that pile up (the suite's
// "enqueue, batched 100"): entries of 100 enqueues over 4 queues, 1.4 ms
// apart (70,000 jobs/s), never fetched, with events and changes on as in
// the server. A run of -benchtime=5000x stores 500,000 jobs, most of them
// in one 10 s bucket of the job-ID filter. Reported per job.
func BenchmarkEnqueueBacklog(b *testing.B) {
	tb := &testBundle{t: b, dir: b.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
	tb.sm = New(Config{ShardID: 1, Dir: tb.dir, Listener: nopListener{}, EmitEvents: true, EmitChanges: true})
	if _, err := tb.sm.Open(nil); err != nil {
		b.Fatal(err)
	}
	defer tb.sm.Close()
	queues := []string{"queue-0", "queue-1", "queue-2", "queue-3"}
	ops := make([]Op, 100)
	enq := make([]EnqueueOp, len(ops))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ops {
			enq[k] = EnqueueOp{Job: Job{ID: tb.newID(), Queue: queues[k%len(queues)], Payload: []byte(`{"n":1}`), JobOptions: DefaultJobOptions()}}
			ops[k] = &enq[k]
		}
		tb.apply(ops...)
		tb.advance(1400 * time.Microsecond)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ops)), "ns/job")
}
