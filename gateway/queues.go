package gateway

import (
	"sort"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// maxLimit bounds concurrency caps and throttle rates.
const maxLimit = 1 << 30

// queueParam reads and checks {name}, and forwards the request when
// another node hosts the queue's shard (ok false: the request is
// answered).
func (s *Server) queueParam(ctx *fasthttp.RequestCtx) (string, bool) {
	name, _ := ctx.UserValue("name").(string)
	if err := router.ValidateQueueName(name); err != nil {
		writeError(ctx, invalid("%v", err))
		return "", false
	}
	if !allowQueue(ctx, name) {
		return "", false
	}
	name = storedQueue(ctx, name)
	if s.forwardIfElsewhere(ctx, s.rt.ShardForQueue(name)) {
		return "", false
	}
	return name, true
}

// GET /api/v1/queues — every queue with its counts, from every shard
// (readEach).
func (s *Server) handleListQueues(ctx *fasthttp.RequestCtx) {
	vs, err := s.readEach(func(int) any { return statemachine.ListQueuesQuery{} })
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	var all []statemachine.QueueInfo
	for _, v := range vs {
		all = append(all, v.([]statemachine.QueueInfo)...)
	}
	if p := principal(ctx); p.Scoped() || p.Namespace != router.DefaultNamespace || s.keyState().MultiTenant() {
		kept := all[:0]
		for _, q := range all {
			if inNamespace(ctx, q.Name) && p.AllowsQueue(q.Name) {
				kept = append(kept, q)
			}
		}
		all = kept
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	lat := s.queueLatencies(ctx)
	b := []byte(`{"queues":[`)
	for i := range all {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendQueue(b, &all[i])
		b = b[:len(b)-1] // reopen the object for its throughput
		b = append(b, `,"throughput":`...)
		st := &all[i].Stats
		if r, ok := s.rates.rate(all[i].Name, s.rt.ShardForQueue(all[i].Name), [3]int64{st.Enqueued, st.Completed, st.Failed}); ok {
			b = append(b, `{"enqueued_per_s":`...)
			b = strconv.AppendFloat(b, r[0], 'f', -1, 64)
			b = append(b, `,"completed_per_s":`...)
			b = strconv.AppendFloat(b, r[1], 'f', -1, 64)
			b = append(b, `,"failed_per_s":`...)
			b = strconv.AppendFloat(b, r[2], 'f', -1, 64)
			b = append(b, '}')
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"latency":`...)
		b = appendLatency(b, lat[all[i].Name])
		b = append(b, '}')
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

func appendQueue(b []byte, q *statemachine.QueueInfo) []byte {
	b = append(b, `{"name":`...)
	b = appendQueueName(b, q.Name)
	for _, st := range []statemachine.State{statemachine.StatePending, statemachine.StateActive, statemachine.StateScheduled,
		statemachine.StateRetrying, statemachine.StateCompleted, statemachine.StateDead, statemachine.StateCancelled, statemachine.StateHeld} {
		b = append(b, ',', '"')
		b = append(b, st.String()...)
		b = append(b, '"', ':')
		b = appendInt(b, q.Stats.Counts[st])
	}
	b = append(b, `,"paused":`...)
	b = appendBool(b, q.Config.Paused)
	b = append(b, `,"max_concurrency":`...)
	if q.Config.MaxConcurrency == 0 {
		b = append(b, "null"...)
	} else {
		b = appendInt(b, int64(q.Config.MaxConcurrency))
	}
	b = append(b, `,"throttle":`...)
	if q.Config.RateLimit == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"rate":`...)
		b = appendInt(b, int64(q.Config.RateLimit))
		b = append(b, `,"period":`...)
		b = appendString(b, formatMs(q.Config.RateWindowMs))
		b = append(b, `,"window_ms":`...)
		b = appendInt(b, q.Config.RateWindowMs)
		b = append(b, '}')
	}
	b = append(b, `,"provider":`...)
	if q.Config.Provider == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, q.Config.Provider)
	}
	b = append(b, `,"totals":{"enqueued":`...)
	b = appendInt(b, q.Stats.Enqueued)
	b = append(b, `,"completed":`...)
	b = appendInt(b, q.Stats.Completed)
	b = append(b, `,"failed":`...)
	b = appendInt(b, q.Stats.Failed)
	b = append(b, `,"dead":`...)
	b = appendInt(b, q.Stats.Dead)
	return append(b, "}}"...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// POST /api/v1/queues/{name}/pause and /resume
func (s *Server) handlePause(pause bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		name, ok := s.queueParam(ctx)
		if !ok {
			return
		}
		var op statemachine.Op = &statemachine.ResumeQueueOp{Queue: name}
		if pause {
			op = &statemachine.PauseQueueOp{Queue: name}
		}
		if _, aerr := s.propose(s.rt.ShardForQueue(name), op); aerr != nil {
			writeError(ctx, aerr)
			return
		}
		b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
		b = append(b, `,"paused":`...)
		writeJSON(ctx, 200, append(appendBool(b, pause), '}'))
	}
}

type concurrencyRequest struct {
	Max *int64 `json:"max"`
}

// POST /api/v1/queues/{name}/concurrency {"max": N} — cap the queue's
// active jobs across all workers; 1 makes a singleton queue, null or 0
// removes the cap.
func (s *Server) handleConcurrency(ctx *fasthttp.RequestCtx) {
	name, ok := s.queueParam(ctx)
	if !ok {
		return
	}
	var req concurrencyRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	var max uint32
	if req.Max != nil {
		if *req.Max < 0 || *req.Max > maxLimit {
			writeError(ctx, invalid("field \"max\" must be 0–%d (0 or null: no cap)", maxLimit))
			return
		}
		max = uint32(*req.Max)
	}
	op := &statemachine.SetLimitsOp{Queue: name, SetConcurrency: true, MaxConcurrency: max}
	if _, aerr := s.propose(s.rt.ShardForQueue(name), op); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
	b = append(b, `,"max_concurrency":`...)
	if max == 0 {
		b = append(b, "null"...)
	} else {
		b = appendInt(b, int64(max))
	}
	writeJSON(ctx, 200, append(b, '}'))
}

type throttleRequest struct {
	Rate     *int64  `json:"rate"`
	Period   *string `json:"period"`
	WindowMs *int64  `json:"window_ms"`
}

// POST /api/v1/queues/{name}/throttle {"rate": 100, "period": "1m"} (or
// "window_ms": 60000) — at most rate jobs fetched in any such window.
// DELETE removes the throttle.
func (s *Server) handleThrottle(ctx *fasthttp.RequestCtx) {
	name, ok := s.queueParam(ctx)
	if !ok {
		return
	}
	op := &statemachine.SetLimitsOp{Queue: name, SetThrottle: true}
	if string(ctx.Method()) == fasthttp.MethodPost {
		var req throttleRequest
		if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
			writeError(ctx, err)
			return
		}
		if req.Rate == nil || *req.Rate < 1 || *req.Rate > maxLimit {
			writeError(ctx, invalid("field \"rate\" must be 1–%d", maxLimit))
			return
		}
		var window int64
		switch {
		case req.Period != nil && req.WindowMs != nil:
			writeError(ctx, invalid("give \"period\" or \"window_ms\", not both"))
			return
		case req.Period != nil:
			ms, aerr := parseDuration("period", *req.Period, false)
			if aerr != nil {
				writeError(ctx, aerr)
				return
			}
			window = ms
		case req.WindowMs != nil:
			window = *req.WindowMs
		default:
			writeError(ctx, invalid("field \"period\" (e.g. \"1m\") or \"window_ms\" is required"))
			return
		}
		if window < 1 || window > int64(30*24*time.Hour/time.Millisecond) {
			writeError(ctx, invalid("the throttle window must be 1 ms – 30 days"))
			return
		}
		op.RateLimit, op.RateWindowMs = uint32(*req.Rate), window
	}
	if _, aerr := s.propose(s.rt.ShardForQueue(name), op); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
	b = append(b, `,"throttle":`...)
	if op.RateLimit == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"rate":`...)
		b = appendInt(b, int64(op.RateLimit))
		b = append(b, `,"period":`...)
		b = appendString(b, formatMs(op.RateWindowMs))
		b = append(b, `,"window_ms":`...)
		b = appendInt(b, op.RateWindowMs)
		b = append(b, '}')
	}
	writeJSON(ctx, 200, append(b, '}'))
}

// dropQueue walks the given indexes of a queue's shard, step by step, and
// returns how many jobs it deleted.
func (s *Server) dropQueue(name string, indexes ...uint8) (int, *apiError) {
	sh := s.rt.ShardForQueue(name)
	total := 0
	for _, idx := range indexes {
		var after []byte
		for {
			rs, aerr := s.propose(sh, &statemachine.DropQueueOp{Queue: name, Index: idx, After: after, Limit: 2000})
			if aerr == nil {
				aerr = resultError(&rs[0])
			}
			if aerr != nil {
				return total, aerr
			}
			total += int(rs[0].Count)
			if rs[0].Cursor == nil {
				break
			}
			after = rs[0].Cursor
		}
	}
	return total, nil
}

// POST /api/v1/queues/{name}/clear — delete every pending, scheduled and
// retrying job: afterwards none can be fetched (DECISIONS.md).
func (s *Server) handleClear(ctx *fasthttp.RequestCtx) {
	name, ok := s.queueParam(ctx)
	if !ok {
		return
	}
	n, aerr := s.dropQueue(name, statemachine.DropPending, statemachine.DropDue)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
	b = append(b, `,"cleared":`...)
	b = appendInt(b, int64(n))
	writeJSON(ctx, 200, append(b, '}'))
}

// POST /api/v1/queues/{name}/drain — stop handing out new jobs (pause) and
// let active ones finish; the answer says how many are still active (poll
// GET /api/v1/queues until it is 0).
func (s *Server) handleDrain(ctx *fasthttp.RequestCtx) {
	name, ok := s.queueParam(ctx)
	if !ok {
		return
	}
	sh := s.rt.ShardForQueue(name)
	if _, aerr := s.propose(sh, &statemachine.PauseQueueOp{Queue: name}); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var active int64
	if v, err := s.eng.Read(sh, statemachine.ListQueuesQuery{}); err == nil {
		for _, q := range v.([]statemachine.QueueInfo) {
			if q.Name == name {
				active = q.Stats.Counts[statemachine.StateActive]
			}
		}
	}
	b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
	b = append(b, `,"paused":true,"draining":`...)
	b = appendBool(b, active > 0)
	b = append(b, `,"active":`...)
	b = appendInt(b, active)
	writeJSON(ctx, 200, append(b, '}'))
}

// DELETE /api/v1/queues/{name}?confirm=true — the queue and all its jobs.
func (s *Server) handleDeleteQueue(ctx *fasthttp.RequestCtx) {
	name, ok := s.queueParam(ctx)
	if !ok {
		return
	}
	if string(ctx.QueryArgs().Peek("confirm")) != "true" {
		writeError(ctx, invalid("deleting a queue deletes all its jobs: add ?confirm=true"))
		return
	}
	n, aerr := s.dropQueue(name, statemachine.DropPending, statemachine.DropDue, statemachine.DropActive,
		statemachine.DropFinished, statemachine.DropConfig)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
	b = append(b, `,"deleted":true,"jobs_deleted":`...)
	b = appendInt(b, int64(n))
	writeJSON(ctx, 200, append(b, '}'))
}
