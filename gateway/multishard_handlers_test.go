package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// multiAnswer is one answer of a multi-shard handler called in memory.
type multiAnswer struct {
	status     int
	retryAfter []string // every Retry-After header value
	body       []byte
}

func callHandler(t *testing.T, eng Engine, h func(*Server) fasthttp.RequestHandler, body any) multiAnswer {
	t.Helper()
	srv := New(Config{Logger: zerolog.Nop()}, eng)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	b, err := json.Marshal(body)
	require.NoError(t, err)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetBody(b)
	h(srv)(&ctx)
	var ra []string
	for _, v := range ctx.Response.Header.PeekAll("Retry-After") {
		ra = append(ra, string(v))
	}
	return multiAnswer{ctx.Response.StatusCode(), ra, append([]byte(nil), ctx.Response.Body()...)}
}

// jobOn is a job ID on shard sh.
func jobOn(sh int) string { return router.JobID(sh, ulid.Make()) }

// TestMultiShardEnqueueBatch: a batch enqueue over every shard, with some
// shards failing, answers the lowest failing shard's status with exactly
// one Retry-After, every job ID, and exactly the jobs not applied.
func TestMultiShardEnqueueBatch(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "msenq", 4)
	sh := make([]int, 4)
	for i, q := range qs {
		sh[i] = rt4.ShardForQueue(q)
	}
	var jobs []map[string]any
	for i := 0; i < 8; i++ {
		jobs = append(jobs, map[string]any{"queue": qs[i%4], "payload": map[string]any{"i": i, "reject": i == 6}})
	}
	type answer struct {
		JobIDs     []string `json:"job_ids"`
		Code       string   `json:"code"`
		NotApplied []int    `json:"not_applied"`
	}
	rejectSix := func(op statemachine.Op) bool {
		e, ok := op.(*statemachine.EnqueueOp)
		return ok && bytes.Contains(e.Job.Payload, []byte(`"i":6`))
	}
	lower, higher := min(sh[1], sh[3]), max(sh[1], sh[3])
	for _, c := range []struct {
		name       string
		eng        Engine
		status     int
		code       string
		notApplied []int
	}{
		{"all shards ok", okEngine{}, 201, "", nil},
		{"one busy", busyShard{Engine: okEngine{}, busy: sh[1]}, 429, "overloaded", []int{1, 5}},
		{"one failing", failingShard{Engine: okEngine{}, bad: sh[2]}, 503, "unavailable", []int{2, 6}},
		{"mixed", busyShard{Engine: failingShard{Engine: okEngine{}, bad: higher}, busy: lower}, 429, "overloaded", []int{1, 3, 5, 7}},
		// The state machine applies each op of an entry on its own: only
		// the rejected job was not applied (its shard's others were).
		{"one job rejected", okEngine{reject: rejectSix}, 409, "conflict", []int{6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := callHandler(t, c.eng, func(s *Server) fasthttp.RequestHandler { return s.handleEnqueueBatch }, map[string]any{"jobs": jobs})
			require.Equal(t, c.status, a.status, string(a.body))
			r := mustJSON[answer](t, a.body)
			require.Len(t, r.JobIDs, 8)
			require.Equal(t, c.code, r.Code)
			require.Equal(t, c.notApplied, r.NotApplied)
			if c.status == 429 || c.status == 503 {
				require.Equal(t, []string{"1"}, a.retryAfter)
			} else {
				require.Empty(t, a.retryAfter)
			}
		})
	}
}

// TestMultiShardAckBatch: the errors of an ack batch name each ack not
// applied, in request order; nothing committed at all answers the lowest
// shard's entry error with one Retry-After, anything committed 200.
func TestMultiShardAckBatch(t *testing.T) {
	t.Parallel()
	var acks []map[string]any
	var ids []string
	for i := 0; i < 8; i++ {
		ids = append(ids, jobOn(i%4))
		acks = append(acks, map[string]any{"job_id": ids[i]})
	}
	acks = append(acks, map[string]any{"job_id": "job_9_nope"}) // a job that cannot exist
	type answer struct {
		Acked  int `json:"acked"`
		Errors []struct {
			JobID string `json:"job_id"`
			Code  string `json:"code"`
		} `json:"errors"`
	}
	everyShardDown := busyShard{Engine: busyShard{Engine: failingShard{Engine: failingShard{Engine: okEngine{}, bad: 3}, bad: 1}, busy: 2}, busy: 0}
	for _, c := range []struct {
		name   string
		eng    Engine
		status int
		acked  int
		failed []int // items, in the order the errors list them
		codes  []string
	}{
		{"all shards ok", okEngine{}, 200, 8, []int{8}, []string{"not_found"}},
		{"one busy: the others are acked", busyShard{Engine: okEngine{}, busy: 1}, 200, 6, []int{1, 5, 8},
			[]string{"overloaded", "overloaded", "not_found"}},
		{"every shard down: the lowest shard's error", everyShardDown, 429, 0, []int{0, 1, 2, 3, 4, 5, 6, 7, 8},
			[]string{"overloaded", "unavailable", "overloaded", "unavailable", "overloaded", "unavailable", "overloaded", "unavailable", "not_found"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := callHandler(t, c.eng, func(s *Server) fasthttp.RequestHandler { return s.handleAckBatch }, map[string]any{"acks": acks})
			require.Equal(t, c.status, a.status, string(a.body))
			r := mustJSON[answer](t, a.body)
			require.Equal(t, c.acked, r.Acked)
			var got []string
			var codes []string
			for _, e := range r.Errors {
				got, codes = append(got, e.JobID), append(codes, e.Code)
			}
			var want []string
			for _, i := range c.failed {
				if i < len(ids) {
					want = append(want, ids[i])
				} else {
					want = append(want, "job_9_nope")
				}
			}
			require.Equal(t, want, got)
			require.Equal(t, c.codes, codes)
			if c.status == 429 {
				require.Equal(t, []string{"1"}, a.retryAfter)
			} else {
				require.Empty(t, a.retryAfter)
			}
		})
	}
}

// TestMultiShardHeartbeat: a heartbeat is answered whole — one shard
// failing answers the lowest failing shard's error, with one Retry-After.
func TestMultiShardHeartbeat(t *testing.T) {
	t.Parallel()
	jobs := map[string]any{}
	for i := 0; i < 8; i++ {
		jobs[jobOn(i%4)] = map[string]any{"attempt": 1}
	}
	body := map[string]any{"worker_id": "w", "jobs": jobs}
	for _, c := range []struct {
		name   string
		eng    Engine
		status int
		code   string
	}{
		{"all shards ok", okEngine{}, 200, ""},
		{"one busy", busyShard{Engine: okEngine{}, busy: 2}, 429, "overloaded"},
		{"mixed: the lowest shard's error", busyShard{Engine: failingShard{Engine: okEngine{}, bad: 1}, busy: 3}, 503, "unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := callHandler(t, c.eng, func(s *Server) fasthttp.RequestHandler { return s.handleHeartbeat }, body)
			require.Equal(t, c.status, a.status, string(a.body))
			if c.code == "" {
				r := mustJSON[struct {
					Jobs map[string]struct{ Status string } `json:"jobs"`
				}](t, a.body)
				require.Len(t, r.Jobs, 8)
				for id, j := range r.Jobs {
					require.Equal(t, "ok", j.Status, id)
				}
				require.Empty(t, a.retryAfter)
				return
			}
			require.Contains(t, string(a.body), `"code":"`+c.code+`"`)
			require.Equal(t, []string{"1"}, a.retryAfter)
		})
	}
}

// TestMultiShardBulk: a bulk by IDs applies what it can, in entries of at
// most 500 ops, and lists the jobs not applied in request order.
func TestMultiShardBulk(t *testing.T) {
	t.Parallel()
	var ids []string
	for i := 0; i < 1203; i++ {
		ids = append(ids, jobOn(i%2))
	}
	ids = append(ids, "job_7_nope")
	log := &proposalLog{}
	srv := New(Config{Logger: zerolog.Nop()}, busyShard{Engine: okEngine{log: log}, busy: 1})
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	mk := func(id string, _ int) statemachine.Op { return &statemachine.CancelOp{JobID: id} }
	affected, failed := srv.applyBulk(context.Background(), ids, mk)
	require.Equal(t, 602, affected)
	var got, want []string
	for _, f := range failed {
		got = append(got, f.id)
		require.Equal(t, map[bool]string{true: "not_found", false: "overloaded"}[f.id == "job_7_nope"], f.err.code)
	}
	for i := 1; i < 1203; i += 2 {
		want = append(want, ids[i])
	}
	want = append(want, "job_7_nope")
	require.Equal(t, want, got)
	require.Equal(t, []int{500, 102}, log.shard(0))
}
