package gateway

import (
	"bufio"
	"context"
	stdjson "encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Asynchronous bulk operations: over 10,000 jobs (or "async": true) the
// request answers 202 at once and a background runner applies the action
// a chunk at a time — a page of filter matches streamed from the mirror by
// keyset, or a slice of the given IDs — each chunk split per shard into
// Raft entries as the synchronous path does. The runner keeps its record
// in the node's mirror (status, not job truth) and tells subscribers of
// GET /bulk/{id}/progress after every chunk.

const (
	maxAsyncBulkOps = 4    // running at once per node
	bulkChunk       = 1000 // jobs per chunk (one progress step)
	bulkStopWait    = 3 * time.Second
)

// bulkRun is one operation running on this node.
type bulkRun struct {
	mu        sync.Mutex
	rec       mirror.BulkRecord
	failed    []jobFailure  // the first maxListedFailures
	cancelled bool          // DELETE asked it to stop
	changed   chan struct{} // closed and replaced after every chunk
	done      chan struct{} // closed once the final record is saved
	ns        string        // the namespace its filter searches (bulkRequest.ns)
}

// bulkRunner holds the node's running operations.
type bulkRunner struct {
	mu   sync.Mutex
	runs map[string]*bulkRun
	ctx  context.Context // ends at shutdown: runners stop, their records say interrupted
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func newBulkRunner() *bulkRunner {
	ctx, stop := context.WithCancel(context.Background())
	return &bulkRunner{runs: map[string]*bulkRun{}, ctx: ctx, stop: stop}
}

// shutdown stops every runner and waits for them to save their records.
func (br *bulkRunner) shutdown(ctx context.Context) {
	// Under mu: a start either added to wg before this, or sees the
	// context ended and starts nothing.
	br.mu.Lock()
	br.stop()
	br.mu.Unlock()
	done := make(chan struct{})
	go func() { br.wg.Wait(); close(done) }()
	t := time.NewTimer(bulkStopWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (br *bulkRunner) get(id string) *bulkRun {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.runs[id]
}

// bulkIsAsync decides whether a request runs in the background and
// estimates its size.
func (s *Server) bulkIsAsync(req *bulkRequest) (bool, int, *apiError) {
	switch {
	case len(req.JobIDs) > 0 && req.Filter != nil:
		return false, 0, invalid("give job_ids or filter, not both")
	case len(req.JobIDs) > 0:
		big := len(req.JobIDs) > asyncBulkThreshold
		if s.cfg.Mirror == nil && big && !req.Async && len(req.JobIDs) <= maxBulkJobs {
			return false, 0, nil // no mirror to keep a record in: as before, at once
		}
		return req.Async || big, len(req.JobIDs), nil
	case req.Filter == nil:
		return false, 0, invalid("give job_ids or a filter")
	}
	if s.cfg.Mirror == nil {
		return false, 0, codeUnavailable.err("a bulk filter needs the mirror")
	}
	f := *req.Filter
	f.Limit, f.Cursor = 1, nil
	page, aerr := s.search(context.Background(), req.ns, &f, nil, false)
	if aerr != nil {
		return false, 0, filterError(aerr)
	}
	total := page.total
	if !page.hasMore {
		total = len(page.hits)
	}
	return req.Async || total > asyncBulkThreshold, total, nil
}

// startAsyncBulk answers 202 and starts the runner.
func (s *Server) startAsyncBulk(ctx *fasthttp.RequestCtx, req *bulkRequest, mk func(string, int) statemachine.Op, total int, outside []jobFailure) {
	if s.cfg.Mirror == nil {
		writeError(ctx, codeUnavailable.err("asynchronous bulk operations keep their status in the mirror, which this server runs without"))
		return
	}
	var filter *searchRequest
	if req.Filter != nil {
		if _, err := req.Filter.filter(req.ns); err != nil {
			writeError(ctx, invalid("filter: %v", err))
			return
		}
		filter = req.Filter.pages(bulkChunk)
	}
	run := &bulkRun{
		rec: mirror.BulkRecord{ID: "bulk_" + ulid.Make().String(), Action: req.Action, Status: "processing",
			Total: int64(total), CreatedAt: time.Now().UnixNano(), Namespace: principal(ctx).Namespace},
		changed: make(chan struct{}), done: make(chan struct{}),
		ns: req.ns,
	}
	if len(outside) > 0 {
		run.rec.Total += int64(len(outside))
		run.rec.Processed, run.rec.Errors = int64(len(outside)), int64(len(outside))
		run.failed = append(run.failed, outside[:min(len(outside), maxListedFailures)]...)
	}
	br := s.bulk
	br.mu.Lock()
	if br.ctx.Err() != nil {
		br.mu.Unlock()
		writeError(ctx, codeShuttingDown.err("the server is shutting down"))
		return
	}
	if len(br.runs) >= maxAsyncBulkOps {
		br.mu.Unlock()
		ctx.Response.Header.Set("Retry-After", "5")
		writeError(ctx, codeBulkBusy.err(strconv.Itoa(maxAsyncBulkOps)+" bulk operations are running on this node; retry when one finishes"))
		return
	}
	br.runs[run.rec.ID] = run
	br.wg.Add(1)
	br.mu.Unlock()
	rec := run.rec
	if err := s.saveBulk(&rec); err != nil {
		br.mu.Lock()
		delete(br.runs, rec.ID)
		br.mu.Unlock()
		br.wg.Done()
		writeError(ctx, codeInternal.err("cannot record the operation: "+err.Error()))
		return
	}
	var ids []string
	if filter == nil {
		ids = req.JobIDs
	}
	moveTo := ""
	if req.Action == "move" {
		moveTo = req.MoveToQueue
	}
	go s.runBulk(run, ids, filter, moveTo, mk)
	b := append([]byte(`{"bulk_operation_id":`), appendString(nil, rec.ID)...)
	b = append(b, `,"status":"processing","estimated_total":`...)
	b = appendInt(b, int64(total))
	b = append(b, `,"progress_url":`...)
	b = appendString(b, "/api/v1/bulk/"+rec.ID+"/progress")
	writeJSON(ctx, 202, append(b, '}'))
}

func (s *Server) saveBulk(rec *mirror.BulkRecord) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.cfg.Mirror.SaveBulk(ctx, rec)
}

// runBulk applies the operation a chunk at a time until it is done,
// cancelled, or the server stops.
func (s *Server) runBulk(run *bulkRun, ids []string, filter *searchRequest, moveTo string, mk func(string, int) statemachine.Op) {
	br := s.bulk
	defer br.wg.Done()
	status, failure := "completed", ""
	chunk := make([]string, 0, bulkChunk)
	step := func() bool {
		run.mu.Lock()
		stop := run.cancelled
		run.mu.Unlock()
		if stop || br.ctx.Err() != nil {
			return false
		}
		affected, failed := s.applyBulkPatient(br.ctx, run, chunk, mk)
		run.mu.Lock()
		run.rec.Processed += int64(len(chunk))
		run.rec.Affected += int64(affected)
		run.rec.Errors += int64(len(failed))
		if run.rec.Processed > run.rec.Total {
			run.rec.Total = run.rec.Processed
		}
		if room := maxListedFailures - len(run.failed); room > 0 {
			run.failed = append(run.failed, failed[:min(room, len(failed))]...)
		}
		rec := run.snapshotLocked()
		close(run.changed)
		run.changed = make(chan struct{})
		run.mu.Unlock()
		if err := s.saveBulk(&rec); err != nil {
			s.log.Warn().Err(err).Str("bulk", rec.ID).Msg("cannot save bulk progress")
		}
		return br.ctx.Err() == nil
	}
	if filter == nil {
		for len(ids) > 0 {
			n := min(len(ids), bulkChunk)
			chunk = append(chunk[:0], ids[:n]...)
			ids = ids[n:]
			if !step() {
				break
			}
		}
	} else {
		for {
			page, aerr := s.search(br.ctx, run.ns, filter, nil, false)
			if aerr != nil {
				if br.ctx.Err() == nil {
					status, failure = "failed", "reading the filter's matches: "+aerr.msg
				}
				break
			}
			chunk = chunk[:0]
			for i := range page.hits {
				// A job moved across shards reappears under a new ID with
				// the same creation time, after the cursor: already done.
				if moveTo != "" && page.hits[i].queue == moveTo {
					continue
				}
				chunk = append(chunk, page.hits[i].id)
			}
			if len(chunk) > 0 && !step() {
				break
			}
			if !page.hasMore {
				break
			}
			filter.Cursor = &page.cursor
		}
	}
	run.mu.Lock()
	switch {
	case run.cancelled:
		status, failure = "cancelled", ""
	case br.ctx.Err() != nil:
		status, failure = "interrupted", "the server stopped before the operation finished"
	}
	run.rec.Status, run.rec.Error, run.rec.FinishedAt = status, failure, time.Now().UnixNano()
	if status == "completed" {
		run.rec.Total = run.rec.Processed
	}
	rec := run.snapshotLocked()
	run.mu.Unlock()
	if err := s.saveBulk(&rec); err != nil {
		s.log.Warn().Err(err).Str("bulk", rec.ID).Msg("cannot save the bulk operation's final status")
	}
	br.mu.Lock()
	delete(br.runs, rec.ID)
	br.mu.Unlock()
	run.mu.Lock()
	close(run.changed)
	close(run.done)
	run.mu.Unlock()
}

// applyBulkPatient is applyBulk for an operation nobody waits on: the
// jobs refused because the node was overloaded (429 overloaded: the
// proposal queue or the memory budget was full, nothing was applied) are
// proposed again after a pause, as a client honouring Retry-After would,
// until they go through or the operation is cancelled or the server
// stops. Any other failure is the job's outcome.
func (s *Server) applyBulkPatient(ctx context.Context, run *bulkRun, ids []string, mk func(string, int) statemachine.Op) (int, []jobFailure) {
	affected, failed := s.applyBulk(ctx, ids, mk)
	pause := bulkRetryPause
	for {
		var again []string
		kept := failed[:0]
		for _, f := range failed {
			if f.err.code == codeOverloaded.Code {
				again = append(again, f.id)
			} else {
				kept = append(kept, f)
			}
		}
		if len(again) == 0 || !run.waitBeforeRetry(ctx, pause) {
			return affected, failed
		}
		pause = min(2*pause, bulkRetryPauseMax)
		n, failed2 := s.applyBulk(ctx, again, mk)
		affected += n
		failed = append(kept, failed2...)
	}
}

// The pauses of applyBulkPatient: doubling from the first to the last.
const (
	bulkRetryPause    = 50 * time.Millisecond
	bulkRetryPauseMax = 2 * time.Second
)

// waitBeforeRetry waits d and reports whether the operation should go on
// (not cancelled, the server not stopping).
func (r *bulkRun) waitBeforeRetry(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.cancelled
}

// snapshotLocked copies the record with its failure list rendered (run.mu held).
func (r *bulkRun) snapshotLocked() mirror.BulkRecord {
	rec := r.rec
	rec.Failed = appendFailures(nil, r.failed, maxListedFailures)
	return rec
}

// state returns the current record, a channel closed at the next change,
// and whether the operation has finished.
func (r *bulkRun) state() (mirror.BulkRecord, <-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
		return r.snapshotLocked(), nil, true
	default:
		return r.snapshotLocked(), r.changed, false
	}
}

// appendBulkRecord renders an operation's status.
func appendBulkRecord(b []byte, r *mirror.BulkRecord) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"action":`...)
	b = appendString(b, r.Action)
	b = append(b, `,"status":`...)
	b = appendString(b, r.Status)
	b = append(b, `,"namespace":`...)
	b = appendString(b, r.Namespace)
	for _, f := range []struct {
		k string
		v int64
	}{{"total", r.Total}, {"processed", r.Processed}, {"affected", r.Affected}, {"errors", r.Errors}} {
		b = append(b, `,"`...)
		b = append(b, f.k...)
		b = append(b, `":`...)
		b = appendInt(b, f.v)
	}
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	end := time.Now().UnixNano()
	if r.FinishedAt != 0 {
		b = append(b, `,"finished_at":`...)
		b = appendTime(b, r.FinishedAt)
		end = r.FinishedAt
	}
	b = append(b, `,"duration_ms":`...)
	b = appendInt(b, (end-r.CreatedAt)/1e6)
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, r.Error)
	}
	if len(r.Failed) > 2 { // not "[]"
		b = append(b, `,"failed":`...)
		b = append(b, r.Failed...)
	}
	return append(b, '}')
}

// bulkID validates a bulk operation ID from the path.
func bulkID(ctx *fasthttp.RequestCtx) (string, *apiError) {
	id, _ := ctx.UserValue("id").(string)
	rest, ok := strings.CutPrefix(id, "bulk_")
	if !ok {
		return "", invalid("%q is not a bulk operation id (bulk_<ULID>)", id)
	}
	if _, err := ulid.ParseStrict(rest); err != nil {
		return "", invalid("%q is not a bulk operation id (bulk_<ULID>)", id)
	}
	return id, nil
}

// lookupBulk finds an operation: running here, or recorded in the mirror.
// In a cluster an operation lives on the node that took it; for an id this
// node does not know, peer is the live node that does ("" when none), so
// the caller can relay or redirect (requests between nodes carry
// ?local=true and are never passed on again).
func (s *Server) lookupBulk(ctx *fasthttp.RequestCtx) (run *bulkRun, rec *mirror.BulkRecord, peer string, ok bool) {
	if s.cfg.Mirror == nil {
		writeError(ctx, codeUnavailable.err("bulk operation records live in the mirror, which this server runs without"))
		return nil, nil, "", false
	}
	id, aerr := bulkID(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return nil, nil, "", false
	}
	if run := s.bulk.get(id); run != nil {
		rec, _, _ := run.state()
		if !s.bulkInNamespace(ctx, rec.Namespace) {
			writeError(ctx, codeNotFound.err("bulk operation not found"))
			return nil, nil, "", false
		}
		return run, &rec, "", true
	}
	c, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	rec, err := s.cfg.Mirror.GetBulk(c, id)
	if err != nil {
		writeError(ctx, codeInternal.err(err.Error()))
		return nil, nil, "", false
	}
	if rec != nil && s.bulkInNamespace(ctx, rec.Namespace) {
		return nil, rec, "", true
	}
	if rec == nil && string(ctx.QueryArgs().Peek("local")) != "true" {
		if peer, status, body := s.findBulkPeer(id); peer != "" && s.bulkInNamespace(ctx, bulkNamespaceOf(body)) {
			if string(ctx.Method()) == fasthttp.MethodGet && !strings.HasSuffix(string(ctx.Path()), "/progress") {
				writeJSON(ctx, status, body) // the record, as its node has it
				return nil, nil, "", false
			}
			return nil, nil, peer, true
		}
	}
	writeError(ctx, codeNotFound.err("bulk operation not found"))
	return nil, nil, "", false
}

// findBulkPeer asks every other live node of the cluster for an operation
// and returns the HTTP address of the one that has it, with its answer.
func (s *Server) findBulkPeer(id string) (addr string, status int, body []byte) {
	for _, r := range s.peer.AskOthers("/api/v1/bulk/"+id+"?local=true", 2*time.Second) {
		return r.Addr, 200, r.Body
	}
	return "", 0, nil
}

// GET /api/v1/bulk/{id}
func (s *Server) handleGetBulk(ctx *fasthttp.RequestCtx) {
	if _, rec, _, ok := s.lookupBulk(ctx); ok {
		writeJSON(ctx, 200, appendBulkRecord(nil, rec))
	}
}

// DELETE /api/v1/bulk/{id} — stop a running operation before its next
// chunk; answers once it has stopped.
func (s *Server) handleCancelBulk(ctx *fasthttp.RequestCtx) {
	run, rec, peer, ok := s.lookupBulk(ctx)
	if !ok {
		return
	}
	if peer != "" {
		s.relayToPeer(ctx, peer)
		return
	}
	if run == nil || rec.Status != "processing" {
		writeError(ctx, codeConflict.err("bulk operation is "+rec.Status+"; only a processing one can be cancelled"))
		return
	}
	run.mu.Lock()
	run.cancelled = true
	run.mu.Unlock()
	select {
	case <-run.done:
	case <-time.After(s.cfg.RequestTimeout):
	case <-s.closed:
	}
	final, _, _ := run.state()
	writeJSON(ctx, 200, appendBulkRecord(nil, &final))
}

// relayToPeer passes the request on to the node that owns the operation
// and answers with its answer.
func (s *Server) relayToPeer(ctx *fasthttp.RequestCtx, peer string) {
	status, body, err := s.peer.Call(string(ctx.Method()), peer, string(ctx.Path())+"?local=true", nil, s.cfg.RequestTimeout+time.Second)
	if err != nil {
		writeError(ctx, codeUnavailable.err("the node running the operation did not answer: "+err.Error()))
		return
	}
	writeJSON(ctx, status, body)
}

// GET /api/v1/bulk?limit=50 — this node's recent operations, newest first.
func (s *Server) handleListBulk(ctx *fasthttp.RequestCtx) {
	if s.cfg.Mirror == nil {
		writeError(ctx, codeUnavailable.err("bulk operation records live in the mirror, which this server runs without"))
		return
	}
	limit := 50
	if v := ctx.QueryArgs().Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1000 {
			writeError(ctx, invalid("limit must be 1–1000"))
			return
		}
		limit = n
	}
	c, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	ns := principal(ctx).Namespace
	if peer.Forwarded(ctx) || ctx.QueryArgs().Has("local") {
		ns = "" // another node's lookup: it checks the namespace itself
	}
	recs, err := s.cfg.Mirror.ListBulk(c, limit, ns)
	if err != nil {
		writeError(ctx, codeInternal.err(err.Error()))
		return
	}
	b := []byte(`{"operations":[`)
	for i := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		if run := s.bulk.get(recs[i].ID); run != nil {
			recs[i], _, _ = run.state()
		}
		b = appendBulkRecord(b, &recs[i])
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// GET /api/v1/bulk/{id}/progress — SSE: a progress frame now and after
// every chunk, then a done frame with the final status.
func (s *Server) handleBulkProgress(ctx *fasthttp.RequestCtx) {
	run, rec, peer, ok := s.lookupBulk(ctx)
	if !ok {
		return
	}
	if peer != "" {
		// The operation runs on another node: its stream is there.
		ctx.Redirect(s.peer.URL(peer, string(ctx.Path())), fasthttp.StatusTemporaryRedirect)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	markStream(ctx)
	final := *rec
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if run == nil {
			writeFlush(w, bulkFrame(nil, "done", &final))
			return
		}
		keepalive := time.NewTicker(s.cfg.EventsKeepalive)
		defer keepalive.Stop()
		for {
			rec, changed, done := run.state()
			if done {
				writeFlush(w, bulkFrame(nil, "done", &rec))
				return
			}
			if !writeFlush(w, bulkFrame(nil, "progress", &rec)) {
				return
			}
			for wait := true; wait; {
				select {
				case <-changed:
					wait = false
				case <-keepalive.C:
					if !writeFlush(w, []byte(": keepalive\n\n")) {
						return
					}
				case <-s.closed:
					return
				}
			}
		}
	})
}

func bulkFrame(b []byte, event string, rec *mirror.BulkRecord) []byte {
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: "...)
	b = appendBulkRecord(b, rec)
	return append(b, "\n\n"...)
}

// interruptLeftovers marks operations a previous run of this node left
// processing as interrupted.
func (s *Server) interruptLeftovers() {
	if s.cfg.Mirror == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := s.cfg.Mirror.InterruptBulk(ctx, time.Now().UnixNano())
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn().Err(err).Msg("cannot mark unfinished bulk operations interrupted")
	} else if n > 0 {
		s.log.Info().Int64("operations", n).Msg("bulk operations of the previous run marked interrupted")
	}
}

// bulkInNamespace reports whether an operation of namespace ns is the
// request's business: the request acts in ns, or it is another node's
// lookup (?local=true with the cluster secret), which the node that asked
// checks.
func (s *Server) bulkInNamespace(ctx *fasthttp.RequestCtx, ns string) bool {
	if ns == "" {
		ns = router.DefaultNamespace
	}
	if principal(ctx) == &clusterPrincipal && string(ctx.QueryArgs().Peek("local")) == "true" {
		return true
	}
	return ns == principal(ctx).Namespace
}

// bulkNamespaceOf reads the namespace of a bulk record as a node answered
// it ("" when the answer has none: the default namespace).
func bulkNamespaceOf(body []byte) string {
	var r struct {
		Namespace string `json:"namespace"`
	}
	_ = stdjson.Unmarshal(body, &r)
	return r.Namespace
}
