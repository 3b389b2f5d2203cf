package gateway

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/statemachine"
)

// The worker's side of a lease: ack, ack batch, fail and heartbeat, and
// their request types (the lease a call speaks for: worker_id, attempt;
// --strict-leases).

// POST /api/v1/ack/{id} — with "fetch", the worker's next fetch rides
// along: answered in the same response, and, when the fetch's queues live
// on the acked job's shard, claimed in the same Raft entry as the ack (a
// refused ack claims nothing).
func (s *Server) handleAck(ctx *fasthttp.RequestCtx) {
	var req ackOneRequest
	if err := decodeBody(ctx.PostBody(), &req, true); err != nil {
		writeError(ctx, err)
		return
	}
	if err := req.validate(s.cfg.StrictLeases, named("an ack")); err != nil {
		writeError(ctx, err)
		return
	}
	next, aerr := s.nextFetch(ctx, req.Fetch, req.WorkerID)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var r *statemachine.Result
	var violations []schemaViolation
	combined := false
	if _, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		ack := statemachine.AckOp{JobID: id, Holder: req.holder(), Result: rawOrNil(req.Result), StepStatus: req.stepStatus(), Usage: req.usage}
		propose := func() {
			if combined = next != nil && next.onShard(s, sh); combined {
				r, aerr = s.proposeJob(sh, &statemachine.AckFetchOp{Ack: ack, Fetch: next.op()})
			} else {
				r, aerr = s.proposeJob(sh, &ack)
			}
		}
		propose()
		if aerr != nil && aerr.code == codeResultSchemaInvalid.Code {
			// The job has a result_schema: validate, then ack again
			// (resultschema.go).
			if violations, aerr = s.checkResult(sh, id, ack.Result); aerr != nil || len(violations) > 0 {
				return aerr
			}
			ack.SchemaChecked = true
			propose()
		}
		return aerr
	}); !ok {
		return
	}
	if len(violations) > 0 {
		writeSchemaInvalid(ctx, violations)
		return
	}
	s.counters(r.Queue).completed.Inc()
	countUsage(r.Usage)
	if next == nil {
		writeJSON(ctx, 200, []byte(`{"status":"completed"}`))
		return
	}
	jobs := r.Jobs
	if len(jobs) == 0 && (!combined || next.timeout > 0) && s.allHosted(next.queues) {
		jobs, aerr, _ = s.pollLocal(next.queues, next.req, next.count, time.Now().Add(next.timeout))
		if aerr != nil {
			// The ack is done: say so, and why the fetch failed.
			b := append([]byte(`{"status":"completed","jobs":[],"fetch_error":`), appendString(nil, aerr.msg)...)
			writeJSON(ctx, 200, append(b, '}'))
			return
		}
	}
	if s.handBack(ctx, next.req.WorkerID, jobs, nil) {
		jobs = nil
	}
	for i := range jobs {
		s.counters(jobs[i].Job.Queue).fetched.Inc()
	}
	b := append(make([]byte, 0, 256*len(jobs)+64), `{"status":"completed","jobs":[`...)
	for i := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFetchedJob(b, &jobs[i])
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// ackOneRequest is POST /ack/{id}'s body: the ack, and optionally the
// worker's next fetch.
type ackOneRequest struct {
	ackRequest
	Fetch *fetchRequest `json:"fetch"`
}

// nextFetch is a fetch that rides along an ack.
type nextFetch struct {
	req     *fetchRequest
	queues  []string // stored names, deduplicated
	timeout time.Duration
	count   int
}

// nextFetch validates the fetch an ack carries (nil: none) like a fetch
// of its own; its worker is the ack's unless it names one.
func (s *Server) nextFetch(ctx *fasthttp.RequestCtx, f *fetchRequest, worker string) (*nextFetch, *apiError) {
	if f == nil {
		return nil, nil
	}
	if f.WorkerID == "" {
		f.WorkerID = worker
	}
	timeout, count, aerr := f.validate()
	if aerr != nil {
		aerr.msg = "fetch: " + aerr.msg
		return nil, aerr
	}
	if !principal(ctx).Can(auth.PermJobsWork) {
		return nil, codeForbidden.err("fetch: the key may not fetch jobs")
	}
	for i, q := range f.Queues {
		if !principal(ctx).AllowsQueue(q) {
			return nil, codeForbidden.errf("fetch: the key may not use queue %q", q)
		}
		f.Queues[i] = storedQueue(ctx, q)
	}
	return &nextFetch{req: f, queues: dedupe(f.Queues), timeout: timeout, count: count}, nil
}

// onShard reports whether every queue of the fetch lives on shard sh.
func (n *nextFetch) onShard(s *Server, sh int) bool {
	for _, q := range n.queues {
		if s.rt.ShardForQueue(q) != sh {
			return false
		}
	}
	return true
}

func (n *nextFetch) op() statemachine.FetchOp {
	return statemachine.FetchOp{Queues: n.queues, WorkerID: n.req.WorkerID, Hostname: n.req.Hostname, Count: uint32(n.count)}
}

// POST /api/v1/ack/batch — with "fetch", the worker's next fetch rides
// along and runs after the batch's acks, only if at least one of them
// applied; when every ack and the fetch's queues live on one shard, the
// acks and the claim are one entry (statemachine.AcksFetchOp).
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
	p := newShardOps(s.eng.Shards(), len(req.Acks)+1)
	// The acks' ops: one allocation, not one an ack.
	ops := make([]statemachine.AckOp, len(req.Acks))
	onShard, proposed := -1, 0 // the one shard of every proposed ack (-2: several)
	for i := range req.Acks {
		a := &req.Acks[i]
		if a.JobID == nil {
			writeError(ctx, invalid("acks[%d]: field \"job_id\" is required", i))
			return
		}
		if err := a.validate(s.cfg.StrictLeases, itemName{"acks", i}); err != nil {
			writeError(ctx, err)
			return
		}
		sh, err := s.rt.ShardForJob(*a.JobID)
		if err != nil || !s.jobInScope(ctx, *a.JobID, sh) {
			p.reject(i, codeNotFound.err("job not found"))
			continue
		}
		if onShard == -1 {
			onShard = sh
		} else if onShard != sh {
			onShard = -2
		}
		proposed++
		ops[i] = statemachine.AckOp{JobID: *a.JobID, Holder: a.holder(), Result: rawOrNil(a.Result), StepStatus: a.stepStatus(), Usage: a.usage}
		p.add(sh, i, &ops[i])
	}
	next, aerr := s.nextFetch(ctx, req.Fetch, req.Acks[0].WorkerID)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	combined := next != nil && onShard >= 0 && next.onShard(s, onShard)
	if combined {
		p.add(onShard, -1, &statemachine.AcksFetchOp{Acks: uint32(proposed), Fetch: next.op()})
	}
	var jobs []statemachine.JobView
	out := s.proposeAll(context.Background(), p, func(_ int, op statemachine.Op, r *statemachine.Result) {
		if _, ok := op.(*statemachine.AcksFetchOp); ok {
			jobs = r.Jobs
			return
		}
		s.counters(r.Queue).completed.Inc()
		countUsage(r.Usage)
	})
	if s.recheckSchemas(&req, &out) {
		combined = false // the fetch the entry carried ran before these acks
	}
	b := appendInt(append(make([]byte, 0, 256), `{"acked":`...), int64(out.applied))
	b = append(b, `,"errors":`...)
	b = appendFailures(b, jobFailures(nil, &out, func(i int) string { return *req.Acks[i].JobID }), 0)
	if next != nil {
		b = s.appendNextJobs(ctx, b, next, jobs, out.applied > 0, combined)
	}
	// Some acks committed: 200, their errors listed. None could be
	// committed at all (overload, no leader): that entry error's status.
	var fail *apiError
	if out.applied == 0 {
		fail = out.whole
	}
	writeMulti(ctx, 200, fail, append(b, '}'))
}

// recheckSchemas validates the results of the batch's acks the state
// machine refused for want of a schema check (jobs with a result_schema)
// and proposes the valid ones again; an invalid one stays failed with
// result_schema_invalid and the reason. It reports whether it acked any.
func (s *Server) recheckSchemas(req *ackBatchRequest, out *multiOutcome) bool {
	acked := false
	kept := out.failed[:0]
	for _, f := range out.failed {
		if f.err.code != codeResultSchemaInvalid.Code {
			kept = append(kept, f)
			continue
		}
		a := &req.Acks[f.item]
		sh, _ := s.rt.ShardForJob(*a.JobID)
		ack := &statemachine.AckOp{JobID: *a.JobID, Holder: a.holder(), Result: rawOrNil(a.Result), StepStatus: a.stepStatus(), Usage: a.usage, SchemaChecked: true}
		vs, aerr := s.checkResult(sh, ack.JobID, ack.Result)
		if aerr == nil && len(vs) > 0 {
			aerr = codeResultSchemaInvalid.err(schemaMessage(vs))
		}
		var r *statemachine.Result
		if aerr == nil {
			r, aerr = s.proposeJob(sh, ack)
		}
		if aerr != nil {
			kept = append(kept, itemFailure{f.item, aerr})
			continue
		}
		acked = true
		out.applied++
		s.counters(r.Queue).completed.Inc()
		countUsage(r.Usage)
	}
	out.failed = kept
	return acked
}

// appendNextJobs writes an ack batch's fetch: `,"jobs":[…]`, and
// `,"fetch_error":…` when it failed. It runs only when an ack applied
// (acked); jobs are what the acks' entry claimed (combined), else the
// fetch long-polls now over queues this node hosts.
func (s *Server) appendNextJobs(ctx *fasthttp.RequestCtx, b []byte, next *nextFetch, jobs []statemachine.JobView, acked, combined bool) []byte {
	var ferr *apiError
	if acked && len(jobs) == 0 && (!combined || next.timeout > 0) && s.allHosted(next.queues) {
		jobs, ferr, _ = s.pollLocal(next.queues, next.req, next.count, time.Now().Add(next.timeout))
	}
	if s.handBack(ctx, next.req.WorkerID, jobs, nil) {
		jobs = nil
	}
	for i := range jobs {
		s.counters(jobs[i].Job.Queue).fetched.Inc()
	}
	b = append(slices.Grow(b, 64+fetchedSize(jobs)), `,"jobs":[`...)
	for i := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFetchedJob(b, &jobs[i])
	}
	b = append(b, ']')
	if ferr != nil {
		b = append(b, `,"fetch_error":`...)
		b = appendString(b, ferr.msg)
	}
	return b
}

// POST /api/v1/fail/{id}
func (s *Server) handleFail(ctx *fasthttp.RequestCtx) {
	var req failRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if err := req.validate(s.cfg.StrictLeases, named("a fail")); err != nil {
		writeError(ctx, err)
		return
	}
	var r *statemachine.Result
	if _, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		r, aerr = s.proposeJob(sh, &statemachine.FailOp{JobID: id, Holder: req.holder(), Error: *req.Error, Backtrace: req.Backtrace, Checkpoint: rawOrNil(req.Checkpoint), Usage: req.usage,
			ProviderError: req.ProviderError})
		return aerr
	}); !ok {
		return
	}
	countUsage(r.Usage)
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

// POST /api/v1/unclaim/{id} — a worker gives back a job it claimed and
// will not run (a job it held when it began to drain): pending again at
// once, the attempt not counted, no error recorded, as the server does
// for a fetch whose client left (undelivered.go); cancelled instead when
// a cancel came meanwhile. Only the lease's holder may: worker_id and
// attempt are required.
func (s *Server) handleUnclaim(ctx *fasthttp.RequestCtx) {
	var req holderFields
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	if req.WorkerID == "" || noAttempt(req.Attempt) {
		writeError(ctx, invalid("an unclaim must name the lease's \"worker_id\" and \"attempt\""))
		return
	}
	var r *statemachine.Result
	if _, ok := s.onJob(ctx, func(id string, sh int) (aerr *apiError) {
		r, aerr = s.proposeJob(sh, &statemachine.UnclaimOp{JobID: id, Holder: req.holder()})
		return aerr
	}); !ok {
		return
	}
	unclaimedJobs.Inc()
	writeJSON(ctx, 200, append(append([]byte(`{"status":`), appendString(nil, stateName(r.State))...), '}'))
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
	usage := make(map[string]*statemachine.Usage)
	for _, id := range ids {
		u, aerr := req.Jobs[id].Usage.toUsage(named("heartbeat job " + id))
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		if u != nil {
			usage[id] = u
		}
	}
	if s.cfg.StrictLeases {
		for _, id := range ids {
			if noAttempt(req.Jobs[id].Attempt) {
				writeError(ctx, leaseRequired(named("heartbeat job "+id)))
				return
			}
		}
	}
	status := make(map[string]string, len(ids))
	var overBudget []string // jobs past a per-job budget (budget.go)
	p := newShardOps(s.eng.Shards(), s.eng.Shards())
	perShard := make([]*statemachine.HeartbeatOp, s.eng.Shards()) // the shard's jobs in one op
	for _, id := range ids {
		sh, err := s.rt.ShardForJob(id)
		if err != nil || !s.jobInScope(ctx, id, sh) {
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
		op.Jobs = append(op.Jobs, statemachine.HeartbeatJob{JobID: id, Progress: rawOrNil(hj.Progress), Checkpoint: rawOrNil(hj.Checkpoint), Attempt: attempt, Usage: usage[id]})
	}
	out := s.proposeAll(context.Background(), p, func(_ int, op statemachine.Op, r *statemachine.Result) {
		hb := op.(*statemachine.HeartbeatOp)
		for i, hs := range r.Heartbeats {
			status[hb.Jobs[i].JobID] = heartbeatName(hs)
			if hs == statemachine.HeartbeatBudgetExceeded {
				overBudget = append(overBudget, hb.Jobs[i].JobID)
			}
		}
		countUsage(r.Usage)
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
		if slices.Contains(overBudget, id) {
			b = append(b, `,"budget_exceeded":true`...)
		}
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
	case statemachine.HeartbeatOK, statemachine.HeartbeatBudgetExceeded:
		return "ok"
	case statemachine.HeartbeatCancel:
		return "cancel"
	case statemachine.HeartbeatLost:
		return "lost"
	}
	return "not_found"
}

type holderFields struct {
	WorkerID string  `json:"worker_id"`
	Attempt  *uint32 `json:"attempt"`
}

// itemName names what a request carries in its errors ("an ack",
// "acks[3]", "heartbeat job …"): a name, and an index after it when index
// >= 0, put together only when an error is written (a batch's acks
// otherwise built "acks[i]" for every ack: two allocations each).
type itemName struct {
	name  string
	index int
}

func named(name string) itemName { return itemName{name, -1} }

func (n itemName) String() string {
	if n.index < 0 {
		return n.name
	}
	return n.name + "[" + itoa(n.index) + "]"
}

// leaseRequired is the error for a request without the lease's attempt
// under Config.StrictLeases.
func leaseRequired(what itemName) *apiError {
	return codeLeaseRequired.errf("%s must name the lease's \"attempt\" (the server runs with --strict-leases)", what)
}

// noAttempt reports whether a request names no lease: attempts start at
// 1, and the state machine does not check a 0.
func noAttempt(a *uint32) bool { return a == nil || *a == 0 }

// checkLease refuses, under --strict-leases, a call that names no lease.
func (h holderFields) checkLease(strict bool, what itemName) *apiError {
	if strict && noAttempt(h.Attempt) {
		return leaseRequired(what)
	}
	return nil
}

func (h holderFields) holder() statemachine.Holder {
	out := statemachine.Holder{WorkerID: h.WorkerID}
	if h.Attempt != nil {
		out.Attempt = *h.Attempt
	}
	return out
}

type ackRequest struct {
	Result     jsontext.Value `json:"result"`
	StepStatus *string        `json:"step_status"`
	Usage      *usageRequest  `json:"usage"`
	holderFields
	usage *statemachine.Usage // Usage, validated
}

func (r *ackRequest) stepStatus() string {
	if r.StepStatus == nil {
		return ""
	}
	return *r.StepStatus
}

// validate checks the ack; strict (--strict-leases) requires the lease's
// attempt, what names the call in the error.
func (r *ackRequest) validate(strict bool, what itemName) *apiError {
	if r.StepStatus != nil && *r.StepStatus != "continue" && *r.StepStatus != "exit" {
		return invalid("field \"step_status\": unknown value %q (use continue or exit)", *r.StepStatus)
	}
	var aerr *apiError
	if r.usage, aerr = r.Usage.toUsage(what); aerr != nil {
		return aerr
	}
	return r.checkLease(strict, what)
}

type ackBatchItem struct {
	JobID *string `json:"job_id"`
	ackRequest
}

type ackBatchRequest struct {
	Acks  []ackBatchItem `json:"acks"`
	Fetch *fetchRequest  `json:"fetch"` // its worker_id defaults to the first ack's
}

type failRequest struct {
	Error      *string        `json:"error"`
	Backtrace  string         `json:"backtrace"`
	Checkpoint jsontext.Value `json:"checkpoint"`
	Usage      *usageRequest  `json:"usage"`
	// ProviderError: the model's provider failed; a routed job moves to
	// its next model (routing.go).
	ProviderError bool `json:"provider_error"`
	holderFields
	usage *statemachine.Usage // Usage, validated
}

// validate checks the failure, and its lease as ackRequest.validate does.
func (r *failRequest) validate(strict bool, what itemName) *apiError {
	if r.Error == nil {
		return invalid("field \"error\" is required")
	}
	if len(*r.Error) > maxErrorText || len(r.Backtrace) > maxErrorText {
		return invalid("error and backtrace must be at most %d bytes each", maxErrorText)
	}
	var aerr *apiError
	if r.usage, aerr = r.Usage.toUsage(what); aerr != nil {
		return aerr
	}
	return r.checkLease(strict, what)
}

type heartbeatJob struct {
	Progress   jsontext.Value `json:"progress"`
	Checkpoint jsontext.Value `json:"checkpoint"`
	Attempt    *uint32        `json:"attempt"` // the lease's; a wrong one: lost
	Usage      *usageRequest  `json:"usage"`   // the attempt's so far (cumulative)
}

type heartbeatRequest struct {
	WorkerID string                  `json:"worker_id"`
	Jobs     map[string]heartbeatJob `json:"jobs"`
}

func (r *heartbeatRequest) sortedIDs() []string {
	ids := make([]string, 0, len(r.Jobs))
	for id := range r.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
