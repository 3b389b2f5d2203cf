package statemachine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

type nopListener struct{}

func (nopListener) Applied(*AppliedInfo) {}

// BenchmarkLifecycleBatch100: 100 jobs enqueued, fetched and acked in three
// entries, with and without lifecycle events (their cost on the apply path).
func BenchmarkLifecycleBatch100(b *testing.B) {
	for _, events := range []bool{false, true} {
		name := "events=off"
		if events {
			name = "events=on"
		}
		b.Run(name, func(b *testing.B) {
			tb := &testBundle{t: b, dir: b.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
			tb.sm = New(Config{ShardID: 1, Dir: tb.dir, Listener: nopListener{}, EmitEvents: events})
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
