package statemachine

import (
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
					ops[k] = &EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{"n":1}`), MaxRetries: 3}}
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
