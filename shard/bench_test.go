package shard

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/statemachine"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkJobOneEntryAtATime: a job's life at a low, steady rate, where
// every request is an entry of its own — an enqueue, then an ack that
// carries the next fetch — proposed one after another on a 4-shard host
// with every entry fsynced. cpu-µs/job is the whole process's CPU (Raft,
// LogDB, apply) per job: the per-entry cost the fixed-rate phase pays.
//
//	go test ./shard -run '^$' -bench JobOneEntryAtATime -benchtime 2000x
func BenchmarkJobOneEntryAtATime(b *testing.B) {
	ctx := context.Background()
	l := freeAddrB(b)
	h, err := Open(ctx, Config{DataDir: b.TempDir(), RaftAddress: l, Shards: 4, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	const shard = 1
	propose := func(ops ...statemachine.Op) []statemachine.Result {
		rs, err := h.Propose(ctx, shard, ops...)
		if err != nil {
			b.Fatal(err)
		}
		return rs
	}
	// The first job, fetched: each round then acks it and fetches the next.
	propose(enqueueOp(shard, "q"))
	rs := propose(&statemachine.FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 1})
	held := rs[0].Jobs[0].Job.ID
	b.ResetTimer()
	start := cpuTime()
	for i := 0; i < b.N; i++ {
		propose(enqueueOp(shard, "q"))
		rs := propose(&statemachine.AckFetchOp{Ack: statemachine.AckOp{JobID: held, Holder: statemachine.Holder{WorkerID: "w", Attempt: 1}},
			Fetch: statemachine.FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 1}})
		if len(rs[0].Jobs) != 1 {
			b.Fatalf("ack-and-fetch: %+v", rs[0])
		}
		held = rs[0].Jobs[0].Job.ID
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/job")
}

func freeAddrB(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
