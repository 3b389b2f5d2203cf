package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Enqueueing: POST /api/v1/enqueue and /enqueue/batch, their request
// types (options, chains, batches) and how a request becomes a
// statemachine.Job; GET /api/v1/batches/{id}.

func (s *Server) newJobID(shardIdx int) string { return router.JobID(shardIdx, ulid.Make()) }

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
	if !s.placeJob(ctx, &job) {
		return
	}
	sh := s.rt.ShardForQueue(job.Queue)
	if s.forwardIfElsewhere(ctx, sh) {
		return
	}
	verdict, reject := s.budgetVerdict(job.Queue, job.Tags)
	if reject != nil {
		s.budgetRejected(ctx, reject, "")
		return
	}
	job.ID = s.newJobID(sh)
	if job.Chain != nil {
		job.Chain.ID = job.ID
	}
	rs, aerr := s.propose(sh, &statemachine.EnqueueOp{Job: job, Budget: verdict})
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
	var buf [160]byte // the answer fits (writeJSON copies it)
	b := appendString(append(buf[:0], `{"job_id":`...), job.ID)
	b = append(b, `,"status":`...)
	b = appendString(b, stateName(rs[0].State))
	b = append(b, `,"unique_existing":false`...)
	if from := rs[0].CachedFrom; from != "" {
		// Completed from the cache: the result is the new job's (a read
		// of the shard that just wrote it).
		b = append(b, `,"cached":true,"cached_from":`...)
		b = appendString(b, from)
		b = append(b, `,"result":`...)
		var result []byte
		if v, err := s.read(sh, statemachine.GetJobQuery{ID: job.ID}); err == nil {
			if jv, _ := v.(*statemachine.JobView); jv != nil {
				result = jv.State.Result
			}
		}
		b = appendRaw(b, result, "null")
	}
	writeJSON(ctx, 201, append(b, '}'))
}

// POST /api/v1/enqueue/batch — the jobs of each shard travel in one entry,
// shards in parallel.
func (s *Server) handleEnqueueBatch(ctx *fasthttp.RequestCtx) {
	var req batchEnqueueRequest
	req.Jobs = getBatchJobs()
	defer func() { putBatchJobs(req.Jobs) }()
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
	ops := make([]statemachine.EnqueueOp, len(req.Jobs)) // one allocation, not one a job
	p := newShardOps(s.eng.Shards(), len(req.Jobs)+1)
	batchID, batchShard, create := s.newBatch(req.Batch, len(req.Jobs), principal(ctx).Namespace)
	if create != nil && create.Batch.CallbackQueue == "" && req.Batch.CallbackQueue != nil {
		writeError(ctx, invalid("field \"batch.callback_queue\": %v", router.ValidateQueueName(*req.Batch.CallbackQueue)))
		return
	}
	if create != nil && create.Batch.CallbackQueue != "" && !allowQueue(ctx, create.Batch.CallbackQueue) {
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
		if !s.placeJob(ctx, &job) {
			return
		}
		sh := s.rt.ShardForQueue(job.Queue)
		verdict, reject := s.budgetVerdict(job.Queue, job.Tags)
		if reject != nil {
			// Nothing of the batch is enqueued.
			s.budgetRejected(ctx, reject, "jobs["+itoa(i)+"]")
			return
		}
		job.ID = s.newJobID(sh)
		if job.Chain != nil {
			job.Chain.ID = job.ID
		}
		if create != nil {
			job.BatchID, job.BatchShard = batchID, uint32(batchShard)
		}
		ids[i] = job.ID
		ops[i] = statemachine.EnqueueOp{Job: job, Budget: verdict}
		p.add(sh, i, &ops[i])
	}
	var existing []bool // which job_ids name a live job that already held the unique key
	var cached []bool   // which jobs completed from the cache
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
			if r.CachedFrom != "" {
				if cached == nil {
					cached = make([]bool, len(ids))
				}
				cached[item] = true
			}
		}
	})
	// Sized for the IDs (new ones share one length): grown from a few
	// bytes it was copied about log2(jobs) times.
	b := make([]byte, 0, 64+len(ids)*(len(ids[0])+3))
	b = append(b, `{"job_ids":[`...)
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
	if cached != nil {
		b = append(b, `,"cached":[`...)
		for i, f := range cached {
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

// batchJobsPool keeps the decoded jobs of POST /enqueue/batch from one
// request to the next (as *[]enqueueRequest): decoding 1,000 jobs into a
// nil slice grew it a doubling at a time, ~400 bytes allocated a job. The
// decoder zeroes each element it reuses.
var batchJobsPool sync.Pool

// maxPooledBatchJobs: larger slices (a rare 10,000-job batch) are left to
// the collector.
const maxPooledBatchJobs = 2048

func getBatchJobs() []enqueueRequest {
	if p, ok := batchJobsPool.Get().(*[]enqueueRequest); ok {
		return (*p)[:0]
	}
	return nil
}

// putBatchJobs gives jobs back, cleared so that the pool keeps nothing a
// request referenced alive.
func putBatchJobs(jobs []enqueueRequest) {
	if cap(jobs) == 0 || cap(jobs) > maxPooledBatchJobs {
		return
	}
	jobs = clearedBatchJobs(jobs)
	batchJobsPool.Put(&jobs)
}

// clearedBatchJobs zeroes jobs to its capacity.
func clearedBatchJobs(jobs []enqueueRequest) []enqueueRequest {
	jobs = jobs[:cap(jobs)]
	clear(jobs)
	return jobs
}

// newBatch prepares a batch for a batch enqueue with a "batch" object: its
// ID (on the callback queue's shard, so the callback is local) and the op
// that creates it. No batch object: no batch.
func (s *Server) newBatch(req *batchRequest, total int, ns string) (string, int, *statemachine.BatchCreateOp) {
	if req == nil {
		return "", 0, nil
	}
	b := statemachine.Batch{Total: uint32(total), CallbackPayload: rawOrNil(req.CallbackPayload)}
	if ns != router.DefaultNamespace {
		b.Namespace = ns
	}
	shard := 0
	if req.CallbackQueue != nil {
		if router.ValidateQueueName(*req.CallbackQueue) != nil {
			return "", 0, &statemachine.BatchCreateOp{} // invalid: the caller answers 400
		}
		b.CallbackQueue = router.NamespacedQueue(ns, *req.CallbackQueue)
		shard = s.rt.ShardForQueue(b.CallbackQueue)
		b.CallbackShard = uint32(shard)
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
	if bt == nil || bt.Total == 0 || !batchInNamespace(ctx, bt) {
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
	if bt.CallbackQueue == "" {
		b = append(b, "null"...)
	} else {
		b = appendQueueName(b, bt.CallbackQueue)
	}
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

// enqueueRequest is one job as POST /enqueue and /enqueue/batch take it.
type enqueueRequest struct {
	Queue          *string           `json:"queue"`
	Payload        jsontext.Value    `json:"payload"`
	Priority       jsontext.Value    `json:"priority"`
	MaxRetries     *int64            `json:"max_retries"`
	RetryBackoff   *string           `json:"retry_backoff"`
	RetryBaseDelay *string           `json:"retry_base_delay"`
	RetryMaxDelay  *string           `json:"retry_max_delay"`
	LeaseDuration  *int64            `json:"lease_duration"`
	ScheduledAt    *string           `json:"scheduled_at"`
	ExpireAfter    *string           `json:"expire_after"`
	Tags           map[string]string `json:"tags"`
	UniqueKey      *string           `json:"unique_key"`
	UniquePeriod   *int64            `json:"unique_period"`
	Chain          *chainRequest     `json:"chain"`
	DependsOn      []string          `json:"depends_on"`
	ResultSchema   jsontext.Value    `json:"result_schema"`
	Cache          *cacheRequest     `json:"cache"`
	Routing        *routingRequest   `json:"routing"`
}

// toJob validates a request and builds the job an EnqueueOp carries (ID
// excluded; a chain's ID is the job's, set with it), from
// statemachine.DefaultJobOptions for the options not given. idx prefixes
// error messages inside a batch.
func (r *enqueueRequest) toJob(rt *router.Router, maxPayload int, idx string) (statemachine.Job, *apiError) {
	wrap := func(e *apiError) *apiError {
		if e != nil && idx != "" {
			e.msg = idx + ": " + e.msg
		}
		return e
	}
	j := statemachine.Job{JobOptions: statemachine.DefaultJobOptions()}
	if r.Queue == nil && r.Chain != nil && len(r.Chain.Steps) > 0 {
		r.Queue = r.Chain.Steps[0].Queue // a chain's job runs its first step
	}
	if r.Queue == nil {
		return j, wrap(invalid("field \"queue\" is required"))
	}
	if err := router.ValidateQueueName(*r.Queue); err != nil {
		return j, wrap(invalid("field \"queue\": %v", err))
	}
	j.Queue = *r.Queue
	switch {
	case len(r.Payload) == 0:
		j.Payload = []byte("{}")
	case len(r.Payload) > maxPayload:
		return j, wrap(codePayloadTooLarge.err(fmt.Sprintf("payload is %d bytes, over the %d-byte limit", len(r.Payload), maxPayload)))
	default:
		j.Payload = r.Payload
	}
	if p, set, err := parsePriority(r.Priority); err != nil {
		return j, wrap(invalid("field \"priority\": %v", err))
	} else if set {
		j.Priority = p
	}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 || *r.MaxRetries > maxRetriesLimit {
			return j, wrap(invalid("field \"max_retries\" must be 0–%d", maxRetriesLimit))
		}
		j.MaxRetries = uint32(*r.MaxRetries)
	}
	if r.RetryBackoff != nil {
		b, ok := statemachine.ParseBackoff(*r.RetryBackoff)
		if !ok {
			return j, wrap(invalid("field \"retry_backoff\": unknown value %q (use none, fixed, linear or exponential)", *r.RetryBackoff))
		}
		j.Backoff = b
	}
	var err *apiError
	if r.RetryBaseDelay != nil {
		if j.BaseDelayMs, err = parseDuration("retry_base_delay", *r.RetryBaseDelay, true); err != nil {
			return j, wrap(err)
		}
		j.BaseDelay = *r.RetryBaseDelay
	}
	if r.RetryMaxDelay != nil {
		if j.MaxDelayMs, err = parseDuration("retry_max_delay", *r.RetryMaxDelay, false); err != nil {
			return j, wrap(err)
		}
		j.MaxDelay = *r.RetryMaxDelay
	}
	if j.BaseDelayMs > j.MaxDelayMs {
		return j, wrap(invalid("retry_base_delay must not exceed retry_max_delay"))
	}
	if r.LeaseDuration != nil {
		if *r.LeaseDuration < 1 || *r.LeaseDuration > maxLeaseSeconds {
			return j, wrap(invalid("field \"lease_duration\" must be 1–%d seconds", maxLeaseSeconds))
		}
		j.LeaseSeconds = uint32(*r.LeaseDuration)
	}
	if r.ScheduledAt != nil {
		t, perr := time.Parse(time.RFC3339Nano, *r.ScheduledAt)
		if perr != nil {
			return j, wrap(invalid("field \"scheduled_at\": %q is not an RFC 3339 timestamp", *r.ScheduledAt))
		}
		j.ScheduledAt = t.UnixNano()
	}
	if r.ExpireAfter != nil {
		if j.ExpireAfterMs, err = parseDuration("expire_after", *r.ExpireAfter, false); err != nil {
			return j, wrap(err)
		}
		j.ExpireAfter = *r.ExpireAfter
	}
	if r.Tags != nil {
		if len(r.Tags) > maxTags {
			return j, wrap(invalid("at most %d tags", maxTags))
		}
		for k, v := range r.Tags {
			if k == "" || len(k) > maxTagKey || len(v) > maxTagValue {
				return j, wrap(invalid("tag keys must be 1–%d bytes and values at most %d bytes", maxTagKey, maxTagValue))
			}
		}
		if len(r.Tags) > 0 {
			j.Tags, _ = json.Marshal(r.Tags, json.Deterministic(true)) // sorted keys
		}
	}
	if r.Chain != nil {
		c, err := r.Chain.chain(rt, j.Queue, maxPayload)
		if err != nil {
			return j, wrap(err)
		}
		j.Chain = c
	}
	if r.UniqueKey != nil {
		if *r.UniqueKey == "" || len(*r.UniqueKey) > maxUniqueKey {
			return j, wrap(invalid("field \"unique_key\" must be 1–%d bytes", maxUniqueKey))
		}
		j.UniqueKey = *r.UniqueKey
	}
	if r.UniquePeriod != nil {
		if r.UniqueKey == nil {
			return j, wrap(invalid("field \"unique_period\" needs a \"unique_key\""))
		}
		if *r.UniquePeriod < 0 || *r.UniquePeriod > maxUniquePeriod {
			return j, wrap(invalid("field \"unique_period\" must be 0–%d seconds (0: until the job finishes)", maxUniquePeriod))
		}
		j.UniquePeriod = *r.UniquePeriod
	}
	if rs := rawOrNil(r.ResultSchema); rs != nil {
		if len(rs) > maxResultSchema {
			return j, wrap(invalid("field \"result_schema\" must be at most %d bytes", maxResultSchema))
		}
		if _, err := compileSchema(rs); err != nil {
			return j, wrap(invalid("field \"result_schema\" is not a valid JSON Schema: %v", err))
		}
		j.ResultSchema = rs
	}
	if aerr := r.Cache.apply(&j); aerr != nil {
		return j, wrap(aerr)
	}
	if aerr := r.Routing.apply(&j); aerr != nil {
		return j, wrap(aerr)
	}
	if len(r.DependsOn) > maxDependsOn {
		return j, wrap(invalid("at most %d jobs in \"depends_on\"", maxDependsOn))
	}
	seen := map[string]bool{}
	for i, id := range r.DependsOn {
		sh, err := rt.ShardForJob(id)
		if err != nil {
			return j, wrap(invalid("depends_on[%d]: %q is not a job id", i, id))
		}
		if !seen[id] {
			seen[id] = true
			j.DependsOn = append(j.DependsOn, statemachine.Dep{ID: id, Shard: uint32(sh)})
		}
	}
	return j, nil
}

type batchEnqueueRequest struct {
	Jobs  []enqueueRequest `json:"jobs"`
	Batch *batchRequest    `json:"batch"`
}

type batchRequest struct {
	CallbackQueue   *string        `json:"callback_queue"`
	CallbackPayload jsontext.Value `json:"callback_payload"`
}

// chainTargetRequest is a step or handler of a chain.
type chainTargetRequest struct {
	Queue   *string        `json:"queue"`
	Payload jsontext.Value `json:"payload"`
}

type chainRequest struct {
	Steps     []chainTargetRequest `json:"steps"`
	OnFailure *chainTargetRequest  `json:"on_failure"`
	OnExit    *chainTargetRequest  `json:"on_exit"`
}

const maxChainSteps = 100

func (t *chainTargetRequest) target(rt *router.Router, field string, maxPayload int) (statemachine.ChainTarget, *apiError) {
	if t.Queue == nil {
		return statemachine.ChainTarget{}, invalid("%s: field \"queue\" is required", field)
	}
	if err := router.ValidateQueueName(*t.Queue); err != nil {
		return statemachine.ChainTarget{}, invalid("%s: %v", field, err)
	}
	if len(t.Payload) > maxPayload {
		return statemachine.ChainTarget{}, codePayloadTooLarge.err(field + ": payload over the limit")
	}
	return statemachine.ChainTarget{Queue: *t.Queue, Shard: uint32(rt.ShardForQueue(*t.Queue)), Payload: rawOrNil(t.Payload)}, nil
}

// chain validates a chain and builds the job's chain state (its ID is set
// by the caller once the job has one).
func (r *chainRequest) chain(rt *router.Router, queue string, maxPayload int) (*statemachine.Chain, *apiError) {
	if len(r.Steps) == 0 || len(r.Steps) > maxChainSteps {
		return nil, invalid("field \"chain.steps\" must hold 1–%d steps", maxChainSteps)
	}
	c := &statemachine.Chain{}
	for i := range r.Steps {
		t, err := r.Steps[i].target(rt, fmt.Sprintf("chain.steps[%d]", i), maxPayload)
		if err != nil {
			return nil, err
		}
		c.Steps = append(c.Steps, t)
	}
	if c.Steps[0].Queue != queue {
		return nil, invalid("chain.steps[0].queue (%q) must be the job's queue (%q): the first step is the job itself", c.Steps[0].Queue, queue)
	}
	for name, h := range map[string]*chainTargetRequest{"on_failure": r.OnFailure, "on_exit": r.OnExit} {
		if h == nil {
			continue
		}
		t, err := h.target(rt, "chain."+name, maxPayload)
		if err != nil {
			return nil, err
		}
		if name == "on_failure" {
			c.OnFailure = &t
		} else {
			c.OnExit = &t
		}
	}
	c.Config, _ = json.Marshal(r, json.Deterministic(true))
	return c, nil
}
