package gateway

import (
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// One job by ID: GET, cancel, retry, delete, move, approve/reject, and how
// an ID is routed (jobParam) and followed after a move (onJob,
// resolveMoved).

func stateName(st statemachine.State) string { return st.String() }

// GET /api/v1/jobs/{id} — an ID the job had before a move to another
// shard answers the job as it is now, with "moved_from".
func (s *Server) handleGetJob(ctx *fasthttp.RequestCtx) {
	var jv *statemachine.JobView
	id, ok := s.onJob(ctx, func(id string, sh int) *apiError {
		v, err := s.read(sh, statemachine.GetJobQuery{ID: id})
		if err != nil {
			return engineError(err)
		}
		if jv, _ = v.(*statemachine.JobView); jv == nil {
			return codeNotFound.err("job " + id + " not found")
		}
		return nil
	})
	if !ok {
		return
	}
	b := appendJob(make([]byte, 0, 1024+len(jv.Job.Payload)), jv)
	b = b[:len(b)-1]
	if jv.Job.ID != id {
		b = append(b, `,"moved_from":`...)
		b = appendString(b, id)
	}
	b = append(b, `,"timeline":`...)
	b = appendTimeline(b, jobTimeline(jv))
	writeJSON(ctx, 200, append(b, '}'))
}

// maxMoveHops bounds how many moves resolveMoved follows (a job moved
// back to a shard it left gets its old ID again, so chains can loop).
const maxMoveHops = 16

// resolveMoved follows the moves of a job that is no longer at id on shard
// sh: the ID and shard it has now, and whether it moved at all. Every job
// endpoint reaches it through onJob (bulk by IDs through applyBulk).
func (s *Server) resolveMoved(id string, sh int) (string, int, bool) {
	cur, cursh := id, sh
	for hop := 0; hop < maxMoveHops; hop++ {
		v, err := s.read(cursh, statemachine.MovedQuery{ID: cur})
		to, _ := v.(string)
		if err != nil || to == "" {
			break
		}
		nsh, err := s.rt.ShardForJob(to)
		if err != nil {
			break
		}
		cur, cursh = to, nsh
	}
	return cur, cursh, cur != id
}

// onJob runs do on the job in {id} (answering the request itself when it
// cannot: a malformed ID, a forward, an error from do). A job moved to a
// queue on another shard is not found at its old ID: do then runs again on
// the job under its new ID, so stored IDs keep working for every job
// endpoint. It returns the ID of the request.
func (s *Server) onJob(ctx *fasthttp.RequestCtx, do func(id string, sh int) *apiError) (string, bool) {
	id, sh, ok := s.jobParam(ctx)
	if !ok {
		return "", false
	}
	if !s.jobInScope(ctx, id, sh) {
		writeError(ctx, codeNotFound.err("job "+id+" not found"))
		return "", false
	}
	aerr := do(id, sh)
	if aerr != nil && aerr.status == 404 {
		if nid, nsh, moved := s.resolveMoved(id, sh); moved && s.jobInScope(ctx, nid, nsh) {
			aerr = do(nid, nsh)
		}
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return "", false
	}
	return id, true
}

// proposeJob proposes one op and maps a rejected result to its error.
func (s *Server) proposeJob(sh int, op statemachine.Op) (*statemachine.Result, *apiError) {
	rs, aerr := s.propose(sh, op)
	if aerr == nil {
		aerr = resultError(&rs[0])
	}
	if aerr != nil {
		return nil, aerr
	}
	return &rs[0], nil
}

// jobParam reads {id} and routes it; it answers 404 itself for IDs that
// cannot exist, and forwards the request when another node hosts the
// job's shard (ok false: the request is answered).
func (s *Server) jobParam(ctx *fasthttp.RequestCtx) (string, int, bool) {
	id, _ := ctx.UserValue("id").(string)
	sh, err := s.rt.ShardForJob(id)
	if err != nil {
		writeError(ctx, codeNotFound.err("job "+id+" not found"))
		return "", 0, false
	}
	if s.forwardIfElsewhere(ctx, sh) {
		return "", 0, false
	}
	return id, sh, true
}

// POST /api/v1/jobs/{id}/cancel
func (s *Server) handleCancel(ctx *fasthttp.RequestCtx) {
	var r *statemachine.Result
	if _, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		r, aerr = s.proposeJob(sh, &statemachine.CancelOp{JobID: id})
		return aerr
	}); !ok {
		return
	}
	if r.State == statemachine.StateActive {
		writeJSON(ctx, 200, []byte(`{"status":"cancelling"}`))
		return
	}
	writeJSON(ctx, 200, []byte(`{"status":"cancelled"}`))
}

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
	Queue        *string        `json:"queue"`
	ResetAttempt bool           `json:"reset_attempt"`
	Priority     jsontext.Value `json:"priority"`
}

// POST /api/v1/jobs/{id}/move {"queue": "target", "reset_attempt": true,
// "priority": "high"} (without priority the job keeps its own)
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
	prio, setPrio, err := parsePriority(req.Priority)
	if err != nil {
		writeError(ctx, invalid("field \"priority\": %v", err))
		return
	}
	if !allowQueue(ctx, *req.Queue) {
		return
	}
	*req.Queue = storedQueue(ctx, *req.Queue)
	id, _ := ctx.UserValue("id").(string)
	var newID string
	r, ok := s.jobOp(ctx, func(id string) statemachine.Op {
		newID = id // id is the job's current ID (another after an earlier move)
		sh, _ := s.rt.ShardForJob(id)
		target := s.rt.ShardForQueue(*req.Queue)
		if target == sh {
			return &statemachine.MoveJobOp{JobID: id, Queue: *req.Queue, ResetAttempt: req.ResetAttempt, SetPriority: setPrio, Priority: prio}
		}
		// Job IDs carry their shard: on another shard the job gets a new
		// ID (same ULID), and travels there through the outbox.
		newID = router.JobID(target, ulid.MustParse(id[strings.LastIndexByte(id, '_')+1:]))
		return &statemachine.MoveOutOp{JobID: id, NewID: newID, Queue: *req.Queue, Target: target, ResetAttempt: req.ResetAttempt, SetPriority: setPrio, Priority: prio}
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
	b = appendQueueName(b, r.Queue)
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
