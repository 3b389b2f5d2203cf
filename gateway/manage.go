package gateway

import (
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// jobOp proposes one op for the job in {id} (or the job a moved one
// became, onJob) and answers its error, if any.
func (s *Server) jobOp(ctx *fasthttp.RequestCtx, mk func(id string) statemachine.Op) (*statemachine.Result, bool) {
	var r *statemachine.Result
	_, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		r, aerr = s.proposeJob(sh, mk(id))
		return aerr
	})
	return r, ok
}

// POST /api/v1/jobs/{id}/retry — a completed, dead or cancelled job goes
// back to pending, attempts reset, error history kept.
func (s *Server) handleRetry(ctx *fasthttp.RequestCtx) {
	if _, ok := s.jobOp(ctx, func(id string) statemachine.Op { return &statemachine.RetryJobOp{JobID: id} }); ok {
		writeJSON(ctx, 200, []byte(`{"status":"pending"}`))
	}
}

// DELETE /api/v1/jobs/{id} — the job and everything about it, any state.
func (s *Server) handleDelete(ctx *fasthttp.RequestCtx) {
	if _, ok := s.jobOp(ctx, func(id string) statemachine.Op { return &statemachine.DeleteJobOp{JobID: id} }); ok {
		writeJSON(ctx, 200, []byte(`{"deleted":true}`))
	}
}

type moveRequest struct {
	Queue        *string `json:"queue"`
	ResetAttempt bool    `json:"reset_attempt"`
}

// POST /api/v1/jobs/{id}/move {"queue": "target", "reset_attempt": true}
func (s *Server) handleMove(ctx *fasthttp.RequestCtx) {
	var req moveRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if req.Queue == nil {
		writeError(ctx, invalid("field \"queue\" is required"))
		return
	}
	if err := router.ValidateQueueName(*req.Queue); err != nil {
		writeError(ctx, invalid("field \"queue\": %v", err))
		return
	}
	id, _ := ctx.UserValue("id").(string)
	var newID string
	r, ok := s.jobOp(ctx, func(id string) statemachine.Op {
		newID = id // id is the job's current ID (another after an earlier move)
		sh, _ := s.rt.ShardForJob(id)
		target := s.rt.ShardForQueue(*req.Queue)
		if target == sh {
			return &statemachine.MoveJobOp{JobID: id, Queue: *req.Queue, ResetAttempt: req.ResetAttempt}
		}
		// Job IDs carry their shard: on another shard the job gets a new
		// ID (same ULID), and travels there through the outbox.
		newID = router.JobID(target, ulid.MustParse(id[strings.LastIndexByte(id, '_')+1:]))
		return &statemachine.MoveOutOp{JobID: id, NewID: newID, Queue: *req.Queue, Target: target, ResetAttempt: req.ResetAttempt}
	})
	if !ok {
		return
	}
	arrived := true
	if newID != id {
		arrived = s.awaitJob(newID, time.Now().Add(s.cfg.RequestTimeout))
	}
	b := append([]byte(`{"job_id":`), appendString(nil, newID)...)
	if newID != id {
		b = append(b, `,"moved_from":`...)
		b = appendString(b, id)
	}
	b = append(b, `,"queue":`...)
	b = appendString(b, r.Queue)
	b = append(b, `,"status":`...)
	b = appendString(b, r.State.String())
	if !arrived {
		b = append(b, `,"in_transit":true`...)
	}
	writeJSON(ctx, 200, append(b, '}'))
}

// awaitJob waits until job id is readable on its shard, or until deadline
// (false). A move to another shard commits on the source; the job reaches
// its new shard through the outbox relay a few milliseconds later, and the
// move answers only once the new ID can be read. The shard layer has no
// per-job notification (and the target shard may be on another node), so
// this reads again with a backoff from 1 to 50 ms.
func (s *Server) awaitJob(id string, deadline time.Time) bool {
	sh, err := s.rt.ShardForJob(id)
	if err != nil {
		return false
	}
	wait := time.Millisecond
	for {
		if v, err := s.read(sh, statemachine.GetJobQuery{ID: id}); err == nil {
			if jv, _ := v.(*statemachine.JobView); jv != nil {
				return true
			}
		}
		if time.Now().Add(wait).After(deadline) {
			return false
		}
		select {
		case <-time.After(wait):
		case <-s.closed:
			return false
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// POST /api/v1/jobs/{id}/approve and /reject — release a held job to
// pending, or make it dead ("rejected").
func (s *Server) handleRelease(approve bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		r, ok := s.jobOp(ctx, func(id string) statemachine.Op { return &statemachine.ReleaseOp{JobID: id, Approve: approve} })
		if !ok {
			return
		}
		writeJSON(ctx, 200, append(append([]byte(`{"status":`), appendString(nil, r.State.String())...), '}'))
	}
}
