package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/statemachine"
)

// searchRequest is the SDK's search body (one Go definition of the wire
// type), with the server's methods.
type searchRequest corvo.SearchRequest

// selectsAll reports whether the filter narrows nothing but the queue:
// every job of a queue, or of the cluster, matches it. Paging and order
// fields do not narrow; a state list naming every state does not either.
func (r *searchRequest) selectsAll() bool {
	narrowed := r.Priority != nil || len(r.Tags) > 0 || r.PayloadContains != "" || r.PayloadJQ != "" ||
		r.CreatedAfter != "" || r.CreatedBefore != "" || r.ScheduledAfter != "" || r.ScheduledBefore != "" ||
		r.StartedAfter != "" || r.StartedBefore != "" || r.CompletedAfter != "" || r.CompletedBefore != "" ||
		r.ExpireAfter != "" || r.ExpireBefore != "" || r.WorkerID != "" || r.HasErrors != nil || r.ErrorContains != "" ||
		r.BatchID != "" || r.DependsOn != "" || r.Model != "" || r.MinCostUSD != nil || r.UniqueKey != "" || r.RouteTarget != "" || r.AttemptMin != nil || r.AttemptMax != nil || r.JobIDPrefix != ""
	if narrowed {
		return false
	}
	if len(r.State) == 0 {
		return true
	}
	for st := statemachine.StatePending; st <= statemachine.StateHeld; st++ {
		if !slices.Contains(r.State, st.String()) {
			return false
		}
	}
	return true
}

// filter is the mirror's filter for r in namespace ns ("": no namespace
// restriction, the default namespace of a cluster with one).
func (r *searchRequest) filter(ns string) (mirror.Filter, error) {
	f := mirror.Filter{Namespace: ns, Queue: r.storedQueue(ns), States: r.State, Tags: r.Tags, PayloadContains: r.PayloadContains, PayloadJQ: r.PayloadJQ,
		WorkerID: r.WorkerID, HasErrors: r.HasErrors, ErrorContains: r.ErrorContains, BatchID: r.BatchID, DependsOn: r.DependsOn,
		Model: r.Model, UniqueKey: r.UniqueKey, RouteTarget: r.RouteTarget, AttemptMin: r.AttemptMin, AttemptMax: r.AttemptMax, JobIDPrefix: r.JobIDPrefix, Sort: r.Sort, Limit: r.Limit}
	if r.MinCostUSD != nil {
		c := *r.MinCostUSD
		if !(c >= 0 && c <= 1e9) { // a sum of many reports may pass one report's limit
			return f, fmt.Errorf("min_cost_usd: %v is not a cost of 0–1000000000 USD", c)
		}
		n := int64(math.Round(c * statemachine.NanosPerUSD))
		f.MinCostNanos = &n
	}
	if p, set, err := parsePriorityName(r.Priority); err != nil {
		return f, fmt.Errorf("priority: %w", err)
	} else if set {
		n := int(p)
		f.Priority = &n
	}
	switch r.Order {
	case "", "desc":
		f.Desc = true
	case "asc":
	default:
		return f, errors.New("order must be asc or desc")
	}
	if r.Cursor != nil {
		f.Cursor = *r.Cursor
	}
	for _, t := range []struct {
		name string
		in   string
		out  *int64
	}{{"created_after", r.CreatedAfter, &f.CreatedAfter}, {"created_before", r.CreatedBefore, &f.CreatedBefore},
		{"scheduled_after", r.ScheduledAfter, &f.ScheduledAfter}, {"scheduled_before", r.ScheduledBefore, &f.ScheduledBefore},
		{"started_after", r.StartedAfter, &f.StartedAfter}, {"started_before", r.StartedBefore, &f.StartedBefore},
		{"completed_after", r.CompletedAfter, &f.CompletedAfter}, {"completed_before", r.CompletedBefore, &f.CompletedBefore},
		{"expire_after", r.ExpireAfter, &f.ExpireAfter}, {"expire_before", r.ExpireBefore, &f.ExpireBefore}} {
		v, err := mirror.ParseTime(t.name, t.in)
		if err != nil {
			return f, err
		}
		*t.out = v
	}
	return f, nil
}

// countByQueueState answers the total over the given shards of a search
// that filters by queue and/or state only, from the state machines'
// per-queue state counts (exact in Pebble, O(queues)), so such a search
// need not count rows in SQLite. It does so only while the mirror has
// applied everything those shards committed, so the total always agrees
// with the pages (a bulk operation by filter acts on exactly what the
// search showed). It returns nil for any other filter.
func (s *Server) countByQueueState(r *searchRequest, ns string, shards []int) *int {
	other := *r
	other.Queue, other.State, other.Sort, other.Order, other.Cursor, other.Limit = "", nil, "", "", nil, 0
	if !reflect.DeepEqual(other, searchRequest{}) {
		return nil
	}
	var states []statemachine.State
	for _, name := range r.State {
		st, ok := statemachine.ParseState(name)
		if !ok {
			return nil
		}
		if !slices.Contains(states, st) {
			states = append(states, st)
		}
	}
	lag := s.cfg.Mirror.Lag()
	for _, sh := range shards {
		if sh < len(lag) && lag[sh] > 0 {
			return nil
		}
	}
	total := 0
	for _, sh := range shards {
		v, err := s.eng.Read(sh, statemachine.ListQueuesQuery{})
		if err != nil {
			return nil
		}
		for _, q := range v.([]statemachine.QueueInfo) {
			if r.Queue != "" && q.Name != r.storedQueue(ns) || r.Queue == "" && ns != "" && !router.QueueInNamespace(q.Name, ns) {
				continue
			}
			if len(states) == 0 {
				for _, c := range q.Stats.Counts {
					total += int(c)
				}
				continue
			}
			for _, st := range states {
				total += int(q.Stats.Counts[st])
			}
		}
	}
	return &total
}

// awaitMirror makes a search read its writes: it waits, up to
// Config.SearchWait and until ctx ends, until the mirror holds every
// change this node's replicas had applied when it was called — every
// write this node answered, and every write to its shards another node
// answered before asking it for a part. only, when not nil, limits the
// wait to those shards (those a search can match). False: it could not
// (the answer is then marked stale).
func (s *Server) awaitMirror(ctx context.Context, only []int) bool {
	if s.cfg.SearchWait < 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SearchWait)
	defer cancel()
	mark := s.cfg.Mirror.Mark()
	if only != nil {
		for sh := range mark {
			if !slices.Contains(only, sh) {
				mark[sh] = 0
			}
		}
	}
	t0 := time.Now()
	err := s.cfg.Mirror.WaitFor(ctx, mark)
	searchMirrorWait.UpdateDuration(t0)
	return err == nil
}

// Where a search's time goes: waiting for the mirror to hold the
// caller's writes (awaitMirror), and the query on this node's mirror.
var (
	searchMirrorWait = metrics.GetOrCreateHistogram(`corvo_search_mirror_wait_seconds`)
	searchQuery      = metrics.GetOrCreateHistogram(`corvo_search_query_seconds`)
)

// mirrorWaitShare is the share of a search's read deadline it may spend
// waiting for the mirror to hold its writes: the rest is the search's.
const mirrorWaitShare = 2

// POST /api/v1/jobs/search — every filter of the spec, newest first by
// default, with keyset cursors: over this node's mirror for the shards it
// holds, and over other nodes' for the others (search). A request with
// ?shards=1,3 (a part of another node's search) searches only those shards
// here, answers 503 if this node does not hold one of them, and adds each
// row's keyset position to the answer ("keys").
func (s *Server) handleSearch(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	if s.cfg.Mirror == nil {
		writeError(ctx, codeUnavailable.err("search needs the mirror, which this server runs without"))
		return
	}
	var req searchRequest
	if err := decodeBody(ctx.PostBody(), &req, true); err != nil {
		writeError(ctx, err)
		return
	}
	if !requireQueues(ctx, `the filter's "queue"`, nonEmpty(req.Queue)...) {
		return
	}
	only, aerr := s.shardsParam(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rctx, cancel := s.readContext(ctx)
	defer cancel()
	ns := s.searchNamespace(ctx)
	forwarded := peer.Forwarded(ctx)
	stale := false
	if only != nil || !forwarded {
		// A part waits too: the node that asked for it waited only for its
		// own mirror, and a write it answered for these shards was applied
		// here (TestClusterNamespacesIsolate missed a shard's jobs without).
		// Only the shards the filter can match (its queue's, those its
		// job_id_prefix names): a write elsewhere cannot change the answer.
		wait := s.searchShards(&req, ns, only)
		deadline, _ := rctx.Deadline()
		wctx, cancel := context.WithDeadline(rctx, deadline.Add(-s.cfg.ReadTimeout/mirrorWaitShare))
		stale = !s.awaitMirror(wctx, wait)
		cancel()
	}
	res, aerr := s.search(rctx, ns, &req, only, forwarded)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	stale = stale || res.stale
	if res.partial {
		readsPartial.Inc()
	}
	b := []byte(`{"jobs":[`)
	for i := range res.hits {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, res.hits[i].raw...)
	}
	b = append(b, `],"total":`...)
	b = appendInt(b, int64(res.total))
	b = append(b, `,"cursor":`...)
	b = appendNullableString(b, res.cursor)
	b = append(b, `,"has_more":`...)
	b = appendBool(b, res.hasMore)
	b = append(b, `,"duration_ms":`...)
	b = appendInt(b, time.Since(start).Milliseconds()) // integer ms, as every *_ms field
	if stale {
		b = append(b, `,"stale":true`...)
	}
	if res.partial {
		b = append(b, `,"partial":true`...)
	}
	if only != nil {
		b = append(b, `,"keys":[`...)
		for i := range res.hits {
			if i > 0 {
				b = append(b, ',')
			}
			h := &res.hits[i]
			b = append(b, `{"v":`...)
			b = appendInt(b, h.v)
			b = append(b, `,"id":`...)
			b = appendString(b, h.id)
			b = append(b, `,"queue":`...)
			b = appendString(b, h.queue)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	writeJSON(ctx, 200, append(b, '}'))
}

func appendNullableTime(b []byte, ns *int64) []byte {
	if ns == nil {
		return append(b, "null"...)
	}
	return appendTime(b, *ns)
}

func appendNullablePtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendString(b, *s)
}

// appendRow renders a search hit (the mirror's view of a job).
func appendRow(b []byte, r *mirror.Row) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"queue":`...)
	b = appendQueueName(b, r.Queue)
	b = append(b, `,"state":`...)
	b = appendString(b, r.State)
	b = append(b, `,"priority":`...)
	b = appendString(b, statemachine.Priority(r.Priority).String())
	b = append(b, `,"payload":`...)
	b = appendRaw(b, r.Payload, "null")
	if r.Payload == nil {
		b = append(b, `,"payload_omitted":true`...)
	}
	b = append(b, `,"payload_bytes":`...)
	b = appendInt(b, int64(r.PayloadBytes))
	b = append(b, `,"attempt":`...)
	b = appendInt(b, int64(r.Attempt))
	b = append(b, `,"max_retries":`...)
	b = appendInt(b, int64(r.MaxRetries))
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	b = append(b, `,"scheduled_at":`...)
	b = appendNullableTime(b, r.ScheduledAt)
	b = append(b, `,"started_at":`...)
	b = appendNullableTime(b, r.StartedAt)
	b = append(b, `,"completed_at":`...)
	b = appendNullableTime(b, r.CompletedAt)
	b = append(b, `,"last_error":`...)
	b = appendNullablePtr(b, r.LastError)
	b = append(b, `,"error_count":`...)
	b = appendInt(b, int64(r.ErrorCount))
	b = append(b, `,"reason":`...)
	b = appendNullablePtr(b, r.Reason)
	b = append(b, `,"tags":`...)
	b = appendRaw(b, r.Tags, "{}")
	b = append(b, `,"batch_id":`...)
	b = appendNullablePtr(b, r.BatchID)
	b = append(b, `,"unique_key":`...)
	b = appendNullablePtr(b, r.UniqueKey)
	b = append(b, `,"worker_id":`...)
	b = appendNullablePtr(b, r.WorkerID)
	b = append(b, `,"progress":`...)
	b = appendRaw(b, r.Progress, "null")
	return append(b, '}')
}

// POST /api/v1/admin/rebuild-mirror — rebuild this node's mirror from Pebble.
func (s *Server) handleRebuildMirror(ctx *fasthttp.RequestCtx) {
	if s.cfg.Mirror == nil {
		writeError(ctx, codeUnavailable.err("this server runs without a mirror"))
		return
	}
	s.cfg.Mirror.RequestRebuild()
	writeJSON(ctx, 202, []byte(`{"status":"rebuilding"}`))
}

// Search fan-out. A node's mirror holds the shards the node hosts; a
// search touching others is split: the shards held here are searched here,
// and the rest on a covering set of other nodes (greedily, the node that
// holds the most of the remaining shards first), each asked for its part
// with the same request and ?shards=. Every part returns up to the limit
// in the same order; the pages are merged by (sort value, job ID) — the
// mirror's keyset order — and cut at the limit. Cursors are keyset
// positions, valid on every node, so the merged page's cursor (its last
// row's position) continues every part. The plan, the parts and their
// retries are peer.Client.SearchShards': a part that fails is asked of
// another node holding its shards; when none answers, the search fails
// (503), never returning a page without a shard. A part its read
// deadline cut (partial) holds its matches up to some position: the
// merged page stops there too (mergeParts), so its cursor skips nothing.

// searchHit is one job of a search: its keyset position, the fields bulk
// operations need, and its rendered JSON.
type searchHit struct {
	v     int64 // the sort expression's value (mirror.Page.SortValues)
	id    string
	queue string
	raw   []byte
}

// searchResult is a search's page, merged from its parts.
type searchResult struct {
	hits    []searchHit
	total   int
	hasMore bool
	cursor  string // "" when !hasMore
	// partial: the read deadline cut a part short; hits are the matches
	// up to its last one, total a lower bound.
	partial bool
	// stale: a part's node could not wait for its mirror to hold the
	// writes it had applied.
	stale bool
}

// holder is implemented by mirrors that may not hold every shard
// (mirror.Mirror: a shard dropped, or refilling after it came back).
type holder interface {
	Holds(shard int) bool
}

// searchable reports whether this node's mirror can answer for shard sh.
func (s *Server) searchable(sh int) bool {
	if !s.hosted(sh) {
		return false
	}
	h, ok := s.cfg.Mirror.(holder)
	return !ok || h.Holds(sh)
}

// shardsParam reads ?shards=1,3 (nil when absent).
func (s *Server) shardsParam(ctx *fasthttp.RequestCtx) ([]int, *apiError) {
	if !ctx.QueryArgs().Has("shards") {
		return nil, nil
	}
	only := []int{}
	v := string(ctx.QueryArgs().Peek("shards"))
	if v == "" {
		return only, nil
	}
	for _, p := range strings.Split(v, ",") {
		sh, err := strconv.Atoi(p)
		if err != nil || sh < 0 || sh >= s.eng.Shards() {
			return nil, invalid("shards: %q is not a shard (0–%d)", p, s.eng.Shards()-1)
		}
		only = append(only, sh)
	}
	return only, nil
}

// pages is the request a bulk operation pages through its matches with:
// n at a time, oldest first.
// storedQueue is the stored name of the filter's queue ("" when none).
func (r *searchRequest) storedQueue(ns string) string {
	if r.Queue == "" {
		return ""
	}
	return router.NamespacedQueue(ns, r.Queue)
}

// searchNamespace is the namespace a search of the request is limited to:
// "" for the default namespace of a cluster that has no other (nothing to
// exclude, so the mirror gets no extra condition).
func (s *Server) searchNamespace(ctx *fasthttp.RequestCtx) string {
	ns := principal(ctx).Namespace
	if ns == router.DefaultNamespace && !s.keyState().MultiTenant() {
		return ""
	}
	return ns
}

func (r *searchRequest) pages(n int) *searchRequest {
	p := *r
	p.Limit, p.Order, p.Sort, p.Cursor = n, "asc", "created_at", nil
	return &p
}

// filterError is a search's error as a bulk operation reports it.
func filterError(e *apiError) *apiError {
	if e.status == 400 {
		return invalid("filter: %s", e.msg)
	}
	return e
}

// searchShards lists the shards whose jobs a search can match: the queue's
// shard, the shards whose job-ID tag fits job_id_prefix, or every shard;
// only, when not nil, keeps those among them.
func (s *Server) searchShards(r *searchRequest, ns string, only []int) []int {
	n := s.eng.Shards()
	qsh := -1
	if r.Queue != "" {
		qsh = s.rt.ShardForQueue(r.storedQueue(ns))
	}
	out := make([]int, 0, n)
	for sh := 0; sh < n; sh++ {
		if qsh >= 0 && sh != qsh || only != nil && !slices.Contains(only, sh) {
			continue
		}
		if r.JobIDPrefix != "" {
			// An ID of shard sh starts with its tag: it can start with
			// the prefix only if one of the two begins the other.
			tag := router.JobIDPrefix + itoa(sh) + "_"
			p := r.JobIDPrefix
			if !strings.HasPrefix(tag, p) && !strings.HasPrefix(p, tag) {
				continue
			}
		}
		out = append(out, sh)
	}
	return out
}

// search runs a search over every shard its filter can match: locally for
// the shards this node's mirror holds, on other nodes for the rest (unless
// the request was forwarded here: then it never goes further, and a shard
// not held here is a 503). only, when not nil, restricts it to those shards,
// which must all be held here (a part of another node's search). ns is the
// namespace the search is limited to (searchNamespace).
func (s *Server) search(ctx context.Context, ns string, req *searchRequest, only []int, forwarded bool) (*searchResult, *apiError) {
	if _, ok := ctx.Deadline(); !ok {
		// A bulk operation's pages: not a pooled read.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	f, err := req.filter(ns)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := f.Check(s.eng.Shards()); err != nil {
		return nil, invalid("%v", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = mirror.DefaultLimit
	}
	touched := s.searchShards(req, ns, only)
	var local, remote []int
	for _, sh := range touched {
		if s.searchable(sh) {
			local = append(local, sh)
		} else {
			remote = append(remote, sh)
		}
	}
	if len(remote) > 0 && (only != nil || forwarded) {
		return nil, codeUnavailable.err("shard " + itoa(remote[0]) + " is not hosted on this node")
	}
	if len(remote) == 0 && only == nil {
		// Everything the filter can match is here: no restriction, so
		// the plan is the one a single node always had.
		f.KnownTotal = s.countByQueueState(req, ns, touched)
		page, aerr := s.searchLocal(ctx, f)
		if aerr != nil {
			return nil, aerr
		}
		return mergeParts(f.Desc, limit, page), nil
	}

	var body []byte // each remote part is this request, with ?shards=
	if len(remote) > 0 {
		if body, err = json.Marshal(req, json.OmitZeroStructFields(true)); err != nil {
			return nil, codeInternal.err(err.Error())
		}
	}
	var (
		mu    sync.Mutex
		parts []*searchResult
		first *apiError // a failure that ends the search
		wg    sync.WaitGroup
	)
	fail := func(e *apiError) {
		mu.Lock()
		if first == nil {
			first = e
		}
		mu.Unlock()
	}
	if len(local) > 0 || len(remote) == 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lf := f
			lf.Shards = append([]int{}, local...)
			lf.KnownTotal = s.countByQueueState(req, ns, local)
			page, aerr := s.searchLocal(ctx, lf)
			if aerr != nil {
				fail(aerr)
				return
			}
			mu.Lock()
			parts = append(parts, page)
			mu.Unlock()
		}()
	}
	if len(remote) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, aerr := s.searchRemote(ns, body, remote, deadline)
			if aerr != nil {
				fail(aerr)
				return
			}
			mu.Lock()
			parts = append(parts, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return mergeParts(f.Desc, limit, parts...), nil
}

// searchLocal runs a filter on this node's mirror.
func (s *Server) searchLocal(ctx context.Context, f mirror.Filter) (*searchResult, *apiError) {
	t0 := time.Now()
	page, err := s.cfg.Mirror.Search(ctx, f)
	searchQuery.UpdateDuration(t0)
	if errors.Is(err, mirror.ErrBadFilter) {
		return nil, invalid("%v", err)
	}
	var de *mirror.DeadlineError
	if errors.As(err, &de) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		readsDeadline.Inc()
		if de != nil && len(de.Unindexed) > 0 {
			return nil, codeFilterNeedsIndex.err(fmt.Sprintf("the search found no match within %s: no index serves %s, tested job by job; narrow it with queue, state, created_after/created_before, batch_id, depends_on or job_id_prefix",
				s.cfg.ReadTimeout, strings.Join(de.Unindexed, ", ")))
		}
		return nil, codeReadsBusy.err("the search found no match within " + s.cfg.ReadTimeout.String() + " (the node is loaded); retry after the Retry-After delay")
	}
	if err != nil {
		return nil, codeInternal.err(err.Error())
	}
	out := &searchResult{total: page.Total, hasMore: page.HasMore, cursor: page.Cursor, partial: page.Partial, hits: make([]searchHit, len(page.Jobs))}
	var buf []byte
	ends := make([]int, len(page.Jobs))
	for i := range page.Jobs {
		buf = appendRow(buf, &page.Jobs[i])
		ends[i] = len(buf)
	}
	startAt := 0
	for i := range page.Jobs {
		r := &page.Jobs[i]
		out.hits[i] = searchHit{v: page.SortValues[i], id: r.ID, queue: r.Queue, raw: buf[startAt:ends[i]:ends[i]]}
		startAt = ends[i]
	}
	return out, nil
}

// mergeParts merges pages sorted alike into one of at most limit rows,
// whose cursor is its last row's keyset position.
//
// A partial part holds its matches only up to its last hit: rows of the
// other parts beyond the first such stop are dropped (a page never skips
// a match), and the page is partial.
func mergeParts(desc bool, limit int, parts ...*searchResult) *searchResult {
	out := &searchResult{}
	order := func(a, b searchHit) int {
		if desc {
			a, b = b, a
		}
		if c := cmp.Compare(a.v, b.v); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	}
	var stop *searchHit // the earliest last hit of a partial part
	for _, p := range parts {
		out.hits = append(out.hits, p.hits...)
		out.total += p.total
		out.hasMore = out.hasMore || p.hasMore
		out.stale = out.stale || p.stale
		if p.partial {
			out.partial = true
			if n := len(p.hits); n > 0 && (stop == nil || order(p.hits[n-1], *stop) < 0) {
				stop = &p.hits[n-1]
			}
		}
	}
	if len(parts) > 1 {
		slices.SortFunc(out.hits, order)
	}
	if stop != nil {
		cut := *stop
		out.hits = slices.DeleteFunc(out.hits, func(h searchHit) bool { return order(h, cut) > 0 })
		out.hasMore = true
	}
	if len(out.hits) > limit {
		out.hits, out.hasMore = out.hits[:limit], true
	}
	if out.hasMore && len(out.hits) > 0 {
		last := out.hits[len(out.hits)-1]
		out.cursor = mirror.CursorAfter(last.v, last.id)
	}
	return out
}

// searchRemote searches shards on other nodes (peer.Client.SearchShards:
// the plan, the parts in parallel, and the retries of a part that failed
// on another node) and turns their answers into parts to merge.
func (s *Server) searchRemote(ns string, body []byte, shards []int, deadline time.Time) ([]*searchResult, *apiError) {
	answers, err := s.peer.SearchShards(ns, shards, body, deadline)
	if err != nil {
		return nil, engineError(err)
	}
	out := make([]*searchResult, len(answers))
	for j, a := range answers {
		r := &searchResult{total: a.Total, hasMore: a.HasMore, partial: a.Partial, stale: a.Stale, hits: make([]searchHit, len(a.Jobs))}
		for i := range a.Jobs {
			k := &a.Keys[i]
			r.hits[i] = searchHit{v: k.V, id: k.ID, queue: k.Queue, raw: a.Jobs[i]}
		}
		out[j] = r
	}
	return out, nil
}
