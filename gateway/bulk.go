package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// maxBulkJobs bounds one synchronous bulk operation.
const maxBulkJobs = 100000

// asyncBulkThreshold: operations over this many jobs run in the background.
const asyncBulkThreshold = 10000

type bulkRequest struct {
	JobIDs      []string       `json:"job_ids"`
	Filter      *searchRequest `json:"filter"`
	Action      string         `json:"action"`
	MoveToQueue string         `json:"move_to_queue"`
	Priority    jsontext.Value `json:"priority"`
	Async       bool           `json:"async"`
	// Confirm: the caller knows the filter selects every job of a queue
	// (or of the cluster); without it such a request is refused.
	Confirm bool `json:"confirm"`

	// ns is the namespace the request acts in (searchNamespace): its
	// filter searches there and move_to_queue is one of its queues.
	ns string
}

// POST /api/v1/jobs/bulk — one action over job IDs or over every job a
// search filter matches, applied through Raft in chunks per shard: at once
// for up to 10,000 jobs, in the background (202) above that or when asked.
func (s *Server) handleBulk(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	var req bulkRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	req.ns = s.searchNamespace(ctx)
	mk, aerr := s.bulkOp(&req)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if p := principal(ctx); p.Scoped() {
		// A key limited to some queues acts on one of them by filter (a
		// list of IDs could name any job).
		if req.Filter == nil {
			writeError(ctx, codeForbidden.errf("the key %q is limited to some queues: bulk by a filter naming one of them, not by job IDs", p.Name))
			return
		}
		if !requireQueues(ctx, `the filter's "queue"`, nonEmpty(req.Filter.Queue)...) ||
			(req.MoveToQueue != "" && !allowQueue(ctx, req.MoveToQueue)) {
			return
		}
	}
	auditNote(ctx, req.Action)
	var outside []jobFailure // job IDs of another namespace (or scope): not found
	req.JobIDs, outside = s.jobsInScope(ctx, req.JobIDs)
	if len(outside) > 0 && len(req.JobIDs) == 0 {
		writeBulkResult(ctx, 0, outside, start, false)
		return
	}
	stale := false
	if req.Filter != nil && s.cfg.Mirror != nil {
		stale = !s.awaitMirror(context.Background(), nil) // a filter matches what this node wrote before
	}
	async, total, aerr := s.bulkIsAsync(&req)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if req.Filter != nil && !req.Confirm && req.Filter.selectsAll() {
		writeConfirmationRequired(ctx, &req, total)
		return
	}
	if async {
		s.startAsyncBulk(ctx, &req, mk, total, outside)
		return
	}
	ids, aerr := s.bulkTargets(&req)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	affected, failed := s.applyBulk(context.Background(), ids, mk)
	failed = append(outside, failed...)
	auditNote(ctx, fmt.Sprintf("%s, %d jobs affected, %d failed", req.Action, affected, len(failed)))
	writeBulkResult(ctx, affected, failed, start, stale)
}

// writeBulkResult answers a bulk action done at once.
func writeBulkResult(ctx *fasthttp.RequestCtx, affected int, failed []jobFailure, start time.Time, stale bool) {
	b := append([]byte(`{"affected":`), appendInt(nil, int64(affected))...)
	b = append(b, `,"errors":`...)
	b = appendInt(b, int64(len(failed)))
	b = append(b, `,"failed":`...)
	b = appendFailures(b, failed, maxListedFailures)
	b = append(b, `,"duration_ms":`...)
	b = appendInt(b, time.Since(start).Milliseconds())
	if stale {
		b = append(b, `,"stale":true`...)
	}
	writeJSON(ctx, 200, append(b, '}'))
}

// writeConfirmationRequired refuses a bulk action over every job of a
// queue or of the cluster sent without "confirm": true, saying how many
// jobs it would touch (the total the bulk itself would use).
func writeConfirmationRequired(ctx *fasthttp.RequestCtx, req *bulkRequest, total int) {
	scope := "every job of the cluster"
	if req.Filter.Queue != "" {
		scope = "every job of queue " + req.Filter.Queue
	}
	msg := fmt.Sprintf("the filter selects %s: %s would touch %d jobs; send \"confirm\": true to go ahead (corvo bulk --confirm)",
		scope, req.Action, total)
	b := append([]byte(`{"error":`), appendString(nil, msg)...)
	b = append(b, `,"code":`...)
	b = appendString(b, codeConfirmationRequired.Code)
	b = append(b, `,"would_affect":`...)
	b = appendInt(b, int64(total))
	writeJSON(ctx, codeConfirmationRequired.Status, append(b, '}'))
}

// bulkOp validates the action and returns the op for one job.
func (s *Server) bulkOp(req *bulkRequest) (func(id string, sh int) statemachine.Op, *apiError) {
	switch req.Action {
	case "retry":
		return func(id string, _ int) statemachine.Op { return &statemachine.RetryJobOp{JobID: id} }, nil
	case "requeue":
		return func(id string, _ int) statemachine.Op { return &statemachine.RequeueOp{JobID: id} }, nil
	case "delete":
		return func(id string, _ int) statemachine.Op { return &statemachine.DeleteJobOp{JobID: id} }, nil
	case "cancel":
		return func(id string, _ int) statemachine.Op { return &statemachine.CancelOp{JobID: id} }, nil
	case "change_priority":
		p, set, err := parsePriority(req.Priority)
		if err != nil || !set {
			return nil, invalid("field \"priority\" must be critical, high or normal (or 0, 1 or 2) for change_priority")
		}
		return func(id string, _ int) statemachine.Op { return &statemachine.PriorityOp{JobID: id, Priority: p} }, nil
	case "move":
		if err := router.ValidateQueueName(req.MoveToQueue); err != nil {
			return nil, invalid("field \"move_to_queue\": %v", err)
		}
		req.MoveToQueue = router.NamespacedQueue(req.ns, req.MoveToQueue)
		target := s.rt.ShardForQueue(req.MoveToQueue)
		return func(id string, sh int) statemachine.Op {
			if sh == target {
				return &statemachine.MoveJobOp{JobID: id, Queue: req.MoveToQueue}
			}
			newID := router.JobID(target, ulid.MustParse(id[strings.LastIndexByte(id, '_')+1:]))
			return &statemachine.MoveOutOp{JobID: id, NewID: newID, Queue: req.MoveToQueue, Target: target}
		}, nil
	}
	return nil, invalid("field \"action\": unknown value %q (use retry, delete, cancel, move, requeue or change_priority)", req.Action)
}

// bulkTargets resolves the job IDs: as given, or every match of the filter.
func (s *Server) bulkTargets(req *bulkRequest) ([]string, *apiError) {
	switch {
	case len(req.JobIDs) > 0 && req.Filter != nil:
		return nil, invalid("give job_ids or filter, not both")
	case len(req.JobIDs) > 0:
		if len(req.JobIDs) > maxBulkJobs {
			return nil, codeBulkTooLarge.err("at most 100000 job ids")
		}
		return req.JobIDs, nil
	case req.Filter == nil:
		return nil, invalid("give job_ids or a filter")
	}
	if s.cfg.Mirror == nil {
		return nil, codeUnavailable.err("a bulk filter needs the mirror")
	}
	f := req.Filter.pages(1000)
	var ids []string
	for {
		page, aerr := s.search(context.Background(), req.ns, f, nil, false)
		if aerr != nil {
			return nil, filterError(aerr)
		}
		for _, h := range page.hits {
			ids = append(ids, h.id)
		}
		if len(ids) > maxBulkJobs {
			return nil, codeBulkTooLarge.err("the filter matches more than 100000 jobs; narrow it")
		}
		if !page.hasMore {
			return ids, nil
		}
		f.Cursor = &page.cursor
	}
}

// maxListedFailures: the first hundred failures say enough.
const maxListedFailures = 100

// bulkEntryOps bounds the ops of one bulk Raft entry.
const bulkEntryOps = 500

// applyBulk proposes one op per job, 500 per entry, shards in parallel.
// Cancelling ctx abandons the proposals in flight (their outcome is then
// unknown and they count as failed).
// An ID a job had before a move to another shard acts on the job it
// became (resolveMoved), as for every single-job endpoint.
func (s *Server) applyBulk(ctx context.Context, ids []string, mk func(id string, sh int) statemachine.Op) (int, []jobFailure) {
	affected, failed := s.applyBulkOnce(ctx, ids, mk)
	var again []string
	oldOf := map[string]string{}
	kept := failed[:0]
	for _, f := range failed {
		if f.err.status == 404 {
			if sh, err := s.rt.ShardForJob(f.id); err == nil {
				if nid, _, moved := s.resolveMoved(f.id, sh); moved {
					if _, dup := oldOf[nid]; !dup {
						oldOf[nid] = f.id
						again = append(again, nid)
					}
					continue
				}
			}
		}
		kept = append(kept, f)
	}
	if len(again) == 0 {
		return affected, kept
	}
	n, failed2 := s.applyBulkOnce(ctx, again, mk)
	for _, f := range failed2 {
		kept = append(kept, jobFailure{oldOf[f.id], f.err})
	}
	return affected + n, kept
}

func (s *Server) applyBulkOnce(ctx context.Context, ids []string, mk func(id string, sh int) statemachine.Op) (int, []jobFailure) {
	p := newShardOps(s.eng.Shards(), len(ids))
	p.max = bulkEntryOps
	for i, id := range ids {
		sh, err := s.rt.ShardForJob(id)
		if err != nil {
			p.reject(i, codeNotFound.err("job not found"))
			continue
		}
		p.add(sh, i, mk(id, sh))
	}
	out := s.proposeAll(ctx, p, nil)
	return out.applied, jobFailures(nil, &out, func(i int) string { return ids[i] })
}
