package gateway

import (
	"context"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

func (s *Server) newJobID(shardIdx int) string { return router.JobID(shardIdx, ulid.Make()) }

func stateName(st statemachine.State) string { return st.String() }

// POST /api/v1/enqueue
func (s *Server) handleEnqueue(ctx *fasthttp.RequestCtx) {
	var req enqueueRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	job, aerr := req.toJob(s.rt, s.cfg.MaxPayloadBytes, "")
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	sh := s.rt.ShardForQueue(job.Queue)
	if s.forwardIfElsewhere(ctx, sh) {
		return
	}
	job.ID = s.newJobID(sh)
	if job.Chain != nil {
		job.Chain.ID = job.ID
	}
	rs, aerr := s.propose(sh, &statemachine.EnqueueOp{Job: job})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if e := resultError(&rs[0]); e != nil {
		writeError(ctx, e)
		return
	}
	if rs[0].Existing {
		// A live job holds the unique key: answer it (DECISIONS.md: 200).
		b := append([]byte(`{"job_id":`), appendString(nil, rs[0].JobID)...)
		b = append(b, `,"status":`...)
		b = appendString(b, stateName(rs[0].State))
		b = append(b, `,"unique_existing":true}`...)
		writeJSON(ctx, 200, b)
		return
	}
	s.counters(job.Queue).enqueued.Inc()
	b := append([]byte(`{"job_id":`), appendString(nil, job.ID)...)
	b = append(b, `,"status":`...)
	b = appendString(b, stateName(rs[0].State))
	b = append(b, `,"unique_existing":false}`...)
	writeJSON(ctx, 201, b)
}

// POST /api/v1/enqueue/batch — the jobs of each shard travel in one entry,
// shards in parallel.
func (s *Server) handleEnqueueBatch(ctx *fasthttp.RequestCtx) {
	var req batchEnqueueRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if len(req.Jobs) == 0 {
		writeError(ctx, invalid("field \"jobs\" must hold at least one job"))
		return
	}
	if len(req.Jobs) > s.cfg.MaxBatchJobs {
		writeError(ctx, codeBatchTooLarge.err("at most "+itoa(s.cfg.MaxBatchJobs)+" jobs per batch"))
		return
	}
	ids := make([]string, len(req.Jobs))
	p := newShardOps(s.eng.Shards(), len(req.Jobs)+1)
	batchID, batchShard, create := s.newBatch(req.Batch, len(req.Jobs))
	if create != nil && create.Batch.CallbackQueue == "" && req.Batch.CallbackQueue != nil {
		writeError(ctx, invalid("field \"batch.callback_queue\": %v", router.ValidateQueueName(*req.Batch.CallbackQueue)))
		return
	}
	if create != nil {
		// The batch record travels first in its shard's entry, and that
		// entry before the other shards': were the jobs applied without
		// it, they would report to a batch that does not exist and it
		// would never call back. If the record fails, nothing else is
		// proposed (every job is then not applied, and a retry starts
		// clean). Done-reports that beat the record are kept anyway.
		p.add(batchShard, -1, create)
		p.lead = batchShard
	}
	for i := range req.Jobs {
		job, aerr := req.Jobs[i].toJob(s.rt, s.cfg.MaxPayloadBytes, "jobs["+itoa(i)+"]")
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		sh := s.rt.ShardForQueue(job.Queue)
		job.ID = s.newJobID(sh)
		if job.Chain != nil {
			job.Chain.ID = job.ID
		}
		if create != nil {
			job.BatchID, job.BatchShard = batchID, uint32(batchShard)
		}
		ids[i] = job.ID
		p.add(sh, i, &statemachine.EnqueueOp{Job: job})
	}
	var existing []bool // which job_ids name a live job that already held the unique key
	out := s.proposeAll(context.Background(), p, func(item int, op statemachine.Op, r *statemachine.Result) {
		e, ok := op.(*statemachine.EnqueueOp)
		switch {
		case !ok:
		case r.Existing:
			if existing == nil {
				existing = make([]bool, len(ids))
			}
			ids[item], existing[item] = r.JobID, true
		default:
			s.counters(e.Job.Queue).enqueued.Inc()
		}
	})
	b := []byte(`{"job_ids":[`)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, id)
	}
	b = append(b, `],"batch_id":`...)
	b = appendNullableString(b, batchID)
	if existing != nil {
		b = append(b, `,"unique_existing":[`...)
		for i, f := range existing {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendBool(b, f)
		}
		b = append(b, ']')
	}
	if out.err != nil {
		// A partial failure names exactly the jobs that were not applied.
		b = appendNotApplied(b, &out)
	}
	writeMulti(ctx, 201, out.err, append(b, '}'))
}

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
	aerr := do(id, sh)
	if aerr != nil && aerr.status == 404 {
		if nid, nsh, moved := s.resolveMoved(id, sh); moved {
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

// POST /api/v1/ack/{id}
func (s *Server) handleAck(ctx *fasthttp.RequestCtx) {
	var req ackRequest
	if err := decodeBody(ctx.PostBody(), &req, true); err != nil {
		writeError(ctx, err)
		return
	}
	if err := req.validate(); err != nil {
		writeError(ctx, err)
		return
	}
	if s.cfg.StrictLeases && noAttempt(req.Attempt) {
		writeError(ctx, leaseRequired("an ack"))
		return
	}
	var r *statemachine.Result
	if _, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		r, aerr = s.proposeJob(sh, &statemachine.AckOp{JobID: id, Holder: req.holder(), Result: rawOrNil(req.Result), StepStatus: req.stepStatus()})
		return aerr
	}); !ok {
		return
	}
	s.counters(r.Queue).completed.Inc()
	writeJSON(ctx, 200, []byte(`{"status":"completed"}`))
}

// POST /api/v1/ack/batch
func (s *Server) handleAckBatch(ctx *fasthttp.RequestCtx) {
	var req ackBatchRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if len(req.Acks) == 0 || len(req.Acks) > s.cfg.MaxBatchJobs {
		writeError(ctx, invalid("field \"acks\" must hold 1–%d acks", s.cfg.MaxBatchJobs))
		return
	}
	p := newShardOps(s.eng.Shards(), len(req.Acks))
	for i := range req.Acks {
		a := &req.Acks[i]
		if a.JobID == nil {
			writeError(ctx, invalid("acks[%d]: field \"job_id\" is required", i))
			return
		}
		if err := a.validate(); err != nil {
			writeError(ctx, err)
			return
		}
		if s.cfg.StrictLeases && noAttempt(a.Attempt) {
			writeError(ctx, leaseRequired("acks["+itoa(i)+"]"))
			return
		}
		sh, err := s.rt.ShardForJob(*a.JobID)
		if err != nil {
			p.reject(i, codeNotFound.err("job not found"))
			continue
		}
		p.add(sh, i, &statemachine.AckOp{JobID: *a.JobID, Holder: a.holder(), Result: rawOrNil(a.Result), StepStatus: a.stepStatus()})
	}
	out := s.proposeAll(context.Background(), p, func(_ int, _ statemachine.Op, r *statemachine.Result) {
		s.counters(r.Queue).completed.Inc()
	})
	b := append([]byte(`{"acked":`), appendInt(nil, int64(out.applied))...)
	b = append(b, `,"errors":`...)
	b = appendFailures(b, jobFailures(nil, &out, func(i int) string { return *req.Acks[i].JobID }), 0)
	// Some acks committed: 200, their errors listed. None could be
	// committed at all (overload, no leader): that entry error's status.
	var fail *apiError
	if out.applied == 0 {
		fail = out.whole
	}
	writeMulti(ctx, 200, fail, append(b, '}'))
}

// POST /api/v1/fail/{id}
func (s *Server) handleFail(ctx *fasthttp.RequestCtx) {
	var req failRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if err := req.validate(); err != nil {
		writeError(ctx, err)
		return
	}
	if s.cfg.StrictLeases && noAttempt(req.Attempt) {
		writeError(ctx, leaseRequired("a fail"))
		return
	}
	var r *statemachine.Result
	if _, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		r, aerr = s.proposeJob(sh, &statemachine.FailOp{JobID: id, Holder: req.holder(), Error: *req.Error, Backtrace: req.Backtrace, Checkpoint: rawOrNil(req.Checkpoint)})
		return aerr
	}); !ok {
		return
	}
	c := s.counters(r.Queue)
	c.failed.Inc()
	if r.State == statemachine.StateDead {
		c.dead.Inc()
	}
	// The answer is the attempt's outcome: a job with retries left is
	// "retrying", even when its backoff is none and it is pending again at
	// once (fetchable now; next_attempt_at is the failure's time).
	status := stateName(r.State)
	retry := r.State == statemachine.StateRetrying || r.State == statemachine.StatePending
	if retry {
		status = stateName(statemachine.StateRetrying)
	}
	b := append([]byte(`{"status":`), appendString(nil, status)...)
	if retry {
		b = append(b, `,"next_attempt_at":`...)
		b = appendTime(b, r.NextAttemptAt)
	}
	b = append(b, `,"attempts_remaining":`...)
	b = appendInt(b, int64(r.AttemptsRemaining))
	writeJSON(ctx, 200, append(b, '}'))
}

// POST /api/v1/heartbeat — one request for every job a worker holds; jobs
// on different shards are proposed in parallel.
func (s *Server) handleHeartbeat(ctx *fasthttp.RequestCtx) {
	var req heartbeatRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > s.cfg.MaxBatchJobs {
		writeError(ctx, invalid("field \"jobs\" must hold 1–%d jobs", s.cfg.MaxBatchJobs))
		return
	}
	ids := req.sortedIDs()
	if s.cfg.StrictLeases {
		for _, id := range ids {
			if noAttempt(req.Jobs[id].Attempt) {
				writeError(ctx, leaseRequired("heartbeat job "+id))
				return
			}
		}
	}
	status := make(map[string]string, len(ids))
	p := newShardOps(s.eng.Shards(), s.eng.Shards())
	perShard := make([]*statemachine.HeartbeatOp, s.eng.Shards()) // the shard's jobs in one op
	for _, id := range ids {
		sh, err := s.rt.ShardForJob(id)
		if err != nil {
			status[id] = "not_found"
			continue
		}
		op := perShard[sh]
		if op == nil {
			op = &statemachine.HeartbeatOp{WorkerID: req.WorkerID}
			perShard[sh] = op
			p.add(sh, -1, op)
		}
		hj := req.Jobs[id]
		var attempt uint32
		if hj.Attempt != nil {
			attempt = *hj.Attempt
		}
		op.Jobs = append(op.Jobs, statemachine.HeartbeatJob{JobID: id, Progress: rawOrNil(hj.Progress), Checkpoint: rawOrNil(hj.Checkpoint), Attempt: attempt})
	}
	out := s.proposeAll(context.Background(), p, func(_ int, op statemachine.Op, r *statemachine.Result) {
		hb := op.(*statemachine.HeartbeatOp)
		for i, hs := range r.Heartbeats {
			status[hb.Jobs[i].JobID] = heartbeatName(hs)
		}
	})
	if out.err != nil {
		// A heartbeat is answered whole: the worker sends it again.
		writeError(ctx, out.err)
		return
	}
	held := false
	b := []byte(`{"jobs":{`)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, id)
		b = append(b, `:{"status":`...)
		b = appendString(b, status[id])
		b = append(b, '}')
		if st := status[id]; st == "ok" || st == "cancel" {
			held = true
		}
	}
	b = append(b, "}}"...)
	if !held {
		// No job in the request is held by this worker any more.
		writeJSON(ctx, 409, b)
		return
	}
	writeJSON(ctx, 200, b)
}

func heartbeatName(h statemachine.HeartbeatStatus) string {
	switch h {
	case statemachine.HeartbeatOK:
		return "ok"
	case statemachine.HeartbeatCancel:
		return "cancel"
	case statemachine.HeartbeatLost:
		return "lost"
	}
	return "not_found"
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

// newBatch prepares a batch for a batch enqueue with a "batch" object: its
// ID (on the callback queue's shard, so the callback is local) and the op
// that creates it. No batch object: no batch.
func (s *Server) newBatch(req *batchRequest, total int) (string, int, *statemachine.BatchCreateOp) {
	if req == nil {
		return "", 0, nil
	}
	b := statemachine.Batch{Total: uint32(total), CallbackPayload: rawOrNil(req.CallbackPayload)}
	shard := 0
	if req.CallbackQueue != nil {
		if router.ValidateQueueName(*req.CallbackQueue) != nil {
			return "", 0, &statemachine.BatchCreateOp{} // invalid: the caller answers 400
		}
		shard = s.rt.ShardForQueue(*req.CallbackQueue)
		b.CallbackQueue, b.CallbackShard = *req.CallbackQueue, uint32(shard)
		b.CallbackJobID = s.newJobID(shard)
	} else {
		shard = int(ulid.Make().Time() % uint64(s.eng.Shards()))
	}
	b.ID = "batch_" + itoa(shard) + "_" + ulid.Make().String()
	return b.ID, shard, &statemachine.BatchCreateOp{Batch: b}
}

// GET /api/v1/batches/{id}
func (s *Server) handleGetBatch(ctx *fasthttp.RequestCtx) {
	id, _ := ctx.UserValue("id").(string)
	rest, ok := strings.CutPrefix(id, "batch_")
	num, _, ok2 := strings.Cut(rest, "_")
	sh, err := strconv.Atoi(num)
	if !ok || !ok2 || err != nil || sh < 0 || sh >= s.eng.Shards() {
		writeError(ctx, codeNotFound.err("batch "+id+" not found"))
		return
	}
	v, rerr := s.read(sh, statemachine.BatchQuery{ID: id})
	if rerr != nil {
		writeError(ctx, engineError(rerr))
		return
	}
	bt, _ := v.(*statemachine.Batch)
	if bt == nil || bt.Total == 0 {
		writeError(ctx, codeNotFound.err("batch "+id+" not found"))
		return
	}
	b := append([]byte(`{"id":`), appendString(nil, bt.ID)...)
	b = append(b, `,"total":`...)
	b = appendInt(b, int64(bt.Total))
	b = append(b, `,"pending":`...)
	b = appendInt(b, int64(bt.Total)-int64(bt.Succeeded)-int64(bt.Failed))
	b = append(b, `,"succeeded":`...)
	b = appendInt(b, int64(bt.Succeeded))
	b = append(b, `,"failed":`...)
	b = appendInt(b, int64(bt.Failed))
	b = append(b, `,"callback_queue":`...)
	b = appendNullableString(b, bt.CallbackQueue)
	b = append(b, `,"callback_payload":`...)
	b = appendRaw(b, bt.CallbackPayload, "null")
	b = append(b, `,"callback_job_id":`...)
	if bt.CompletedAt != 0 && bt.CallbackQueue != "" {
		b = appendString(b, bt.CallbackJobID)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"created_at":`...)
	b = appendTime(b, bt.CreatedAt)
	b = append(b, `,"completed_at":`...)
	b = appendTime(b, bt.CompletedAt)
	writeJSON(ctx, 200, append(b, '}'))
}
