package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// okEngine commits every proposal at once, in memory: every op is OK (an
// enqueue pending, an ack completed, every heartbeat job ok) unless
// reject says otherwise (then it is a 409 conflict). It records what was
// proposed when log is set. Wrap it in busyShard or failingShard to make
// one shard fail.
type okEngine struct {
	busyEngine
	reject func(statemachine.Op) bool
	log    *proposalLog
}

// proposalLog records the entries an engine was asked to commit.
type proposalLog struct {
	mu      sync.Mutex
	entries map[int][]int // shard → the op count of each entry, in order
}

func (l *proposalLog) shard(sh int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[sh]
}

func (e okEngine) Propose(_ context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if e.log != nil {
		e.log.mu.Lock()
		if e.log.entries == nil {
			e.log.entries = map[int][]int{}
		}
		e.log.entries[sh] = append(e.log.entries[sh], len(ops))
		e.log.mu.Unlock()
	}
	rs := make([]statemachine.Result, len(ops))
	for i, op := range ops {
		if e.reject != nil && e.reject(op) {
			rs[i] = statemachine.Result{Status: statemachine.StatusConflict, Message: "rejected by the test engine"}
			continue
		}
		switch o := op.(type) {
		case *statemachine.EnqueueOp:
			rs[i].State = statemachine.StatePending
		case *statemachine.AckOp:
			rs[i].State, rs[i].Queue = statemachine.StateCompleted, "bench"
		case *statemachine.HeartbeatOp:
			rs[i].Heartbeats = make([]statemachine.HeartbeatStatus, len(o.Jobs))
		}
	}
	return rs, nil
}

// benchJobIDs returns n job IDs spread over the first shards of 4.
func benchJobIDs(n, shards int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = router.JobID(i%shards, ulid.Make())
	}
	return ids
}

// BenchmarkMultiShard: the gateway's share of the multi-shard worker
// requests — decode, split per shard, propose (an in-memory engine),
// answer — without HTTP or Raft. Run with CORVO_GATEWAY_NO_SERVER=1.
func BenchmarkMultiShard(b *testing.B) {
	srv := New(Config{Logger: zerolog.Nop()}, okEngine{})
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	rt := router.New(4)
	var queues []string // one queue on each shard
	seen := map[int]bool{}
	for i := 0; len(queues) < 4; i++ {
		q := fmt.Sprintf("bench-%d", i)
		if sh := rt.ShardForQueue(q); !seen[sh] {
			seen[sh] = true
			queues = append(queues, q)
		}
	}
	enqueue := func(n, shards int) []byte {
		jobs := make([]map[string]any, n)
		for i := range jobs {
			jobs[i] = map[string]any{"queue": queues[i%shards], "payload": map[string]int{"i": i}}
		}
		body, _ := json.Marshal(map[string]any{"jobs": jobs})
		return body
	}
	ack := func(n, shards int) []byte {
		acks := make([]map[string]any, n)
		for i, id := range benchJobIDs(n, shards) {
			acks[i] = map[string]any{"job_id": id, "result": map[string]int{"i": i}}
		}
		body, _ := json.Marshal(map[string]any{"acks": acks})
		return body
	}
	heartbeat := func(n, shards int) []byte {
		jobs := map[string]any{}
		for _, id := range benchJobIDs(n, shards) {
			jobs[id] = map[string]any{"attempt": 1}
		}
		body, _ := json.Marshal(map[string]any{"worker_id": "w", "jobs": jobs})
		return body
	}
	for _, bc := range []struct {
		name   string
		h      fasthttp.RequestHandler
		body   []byte
		status int
	}{
		{"EnqueueBatch/1shard-10", srv.handleEnqueueBatch, enqueue(10, 1), 201},
		{"EnqueueBatch/4shards-100", srv.handleEnqueueBatch, enqueue(100, 4), 201},
		{"AckBatch/1shard-10", srv.handleAckBatch, ack(10, 1), 200},
		{"AckBatch/4shards-100", srv.handleAckBatch, ack(100, 4), 200},
		{"Heartbeat/1shard-10", srv.handleHeartbeat, heartbeat(10, 1), 200},
		{"Heartbeat/4shards-100", srv.handleHeartbeat, heartbeat(100, 4), 200},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetBody(bc.body)
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				bc.h(&ctx)
				if ctx.Response.StatusCode() != bc.status {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}
