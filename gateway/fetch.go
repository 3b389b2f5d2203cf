package gateway

import (
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// retryEmptyFetch is how long a long-poll waits before trying again when a
// queue looked fetchable but the fetch claimed nothing (another worker won
// the race); a new job wakes it sooner.
const retryEmptyFetch = 50 * time.Millisecond

// POST /api/v1/fetch — long-poll: wait on the queues' signals (never spin
// proposals against empty queues), then claim through Raft.
func (s *Server) handleFetch(ctx *fasthttp.RequestCtx) {
	var req fetchRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	timeout, count, aerr := req.validate()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	for i, q := range req.Queues {
		if !allowQueue(ctx, q) {
			return
		}
		req.Queues[i] = storedQueue(ctx, q)
	}
	queues := dedupe(req.Queues)
	if !s.allHosted(queues) {
		s.fetchElsewhere(ctx, &req, queues, timeout, count)
		return
	}
	jobs, aerr, _ := s.pollLocal(queues, &req, count, time.Now().Add(timeout))
	switch {
	case aerr != nil:
		writeError(ctx, aerr)
	case s.handBack(ctx, req.WorkerID, jobs, nil):
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	case len(jobs) > 0:
		s.writeFetched(ctx, jobs, req.Count != nil)
	default:
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}
}

// pollLocal long-polls queues, whose shards this node hosts, until it
// claims jobs, the deadline passes (no jobs, no error) or the server shuts
// down (alive false): wait on the queues' signals or parked at their
// proposers, never spinning proposals on empty queues.
func (s *Server) pollLocal(queues []string, req *fetchRequest, count int, deadline time.Time) ([]statemachine.JobView, *apiError, bool) {
	for {
		// Watch before checking, so a job arriving in between still wakes us.
		watches := make([]<-chan struct{}, len(queues))
		for i, q := range queues {
			watches[i] = s.eng.Watch(q)
		}
		jobs, aerr := s.tryFetch(queues, req, count)
		if aerr != nil || len(jobs) > 0 {
			return jobs, aerr, true
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, nil, true
		}
		fetchable := s.anyFetchable(queues)
		if fetchable && wait > retryEmptyFetch {
			wait = retryEmptyFetch
		}
		if until := s.throttledUntil(queues); until > 0 {
			// A throttle window frees up then; nothing will signal it.
			if d := time.Until(time.Unix(0, until)); d < wait {
				wait = max(d, time.Millisecond)
			}
		}
		if !fetchable {
			jobs, aerr, alive := s.waitParked(queues, req, count, watches, wait)
			if aerr != nil || len(jobs) > 0 || !alive {
				return jobs, aerr, alive
			}
			continue
		}
		if !s.waitAny(watches, wait) {
			return nil, nil, false
		}
	}
}

// parkedPart is the part of a fetch parked at one shard.
type parkedPart struct {
	sh int
	pk *shard.Parked
}

// waitParked parks the fetch at the proposer of each of its queues'
// shards (one part per shard, grouped so that only one is ever served:
// shard.ParkGroup) and waits for a part to be served, for a queue signal
// (promotions, reclaims and resumes do not go through parked fetches) or
// for the wait to end. alive is false when the server is shutting down.
func (s *Server) waitParked(queues []string, req *fetchRequest, count int, watches []<-chan struct{}, wait time.Duration) ([]statemachine.JobView, *apiError, bool) {
	var groupsBuf [8]fetchPart
	groups := s.groupByShard(groupsBuf[:0], queues, false)
	var g *shard.ParkGroup
	if len(groups) > 1 {
		g = new(shard.ParkGroup)
	}
	parts := make([]parkedPart, 0, len(groups))
	for _, gr := range groups {
		sh := gr.shard
		op := &statemachine.FetchOp{Queues: gr.queues, WorkerID: req.WorkerID, Hostname: req.Hostname, Count: uint32(count)}
		pk := s.eng.Park(sh, op, g)
		if pk == nil { // this shard's proposer cannot park: poll on signals
			if resp, taken := s.unparkAll(parts, -1); taken {
				return s.parkedJobs(resp, true)
			}
			return nil, nil, s.waitAny(watches, wait)
		}
		parts = append(parts, parkedPart{sh, pk})
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	var resp shard.Response
	answered, alive := -1, true
	if len(parts) == 1 && len(watches) == 1 {
		select {
		case resp = <-parts[0].pk.Result():
			answered = 0
		case <-watches[0]:
		case <-t.C:
		case <-s.closed:
			alive = false
		}
	} else {
		chosen, v, _ := reflect.Select(selectCases(s.closed, t.C, parts, watches))
		switch {
		case chosen == 0:
			alive = false
		case chosen >= 2 && chosen < 2+len(parts):
			answered = chosen - 2
			resp = v.Interface().(shard.Response)
		}
	}
	if r, taken := s.unparkAll(parts, answered); taken {
		resp, answered = r, 0
	}
	if answered < 0 {
		return nil, nil, alive
	}
	return s.parkedJobs(resp, alive)
}

// unparkAll withdraws every part but skip; a part a proposer took already
// cannot be withdrawn, and its response (its jobs are the fetch's) is
// returned. The group lets at most one part be taken.
func (s *Server) unparkAll(parts []parkedPart, skip int) (shard.Response, bool) {
	var resp shard.Response
	taken := false
	for i, p := range parts {
		if i == skip {
			continue
		}
		if !s.eng.Unpark(p.sh, p.pk) {
			resp, taken = <-p.pk.Result(), true
		}
	}
	return resp, taken
}

func (s *Server) parkedJobs(resp shard.Response, alive bool) ([]statemachine.JobView, *apiError, bool) {
	jobs, err := resp.Jobs()
	if err != nil {
		return nil, engineError(err), alive
	}
	return jobs, nil, alive
}

func dedupe(qs []string) []string {
	if len(qs) <= 16 { // the usual few: no map, and no copy without a repeat
		repeat := false
		for i := 1; i < len(qs) && !repeat; i++ {
			repeat = slices.Contains(qs[:i], qs[i])
		}
		if !repeat {
			return qs
		}
	}
	seen := make(map[string]struct{}, len(qs))
	out := qs[:0:0]
	for _, q := range qs {
		if _, ok := seen[q]; !ok {
			seen[q] = struct{}{}
			out = append(out, q)
		}
	}
	return out
}

// throttledUntil is the earliest time a throttled queue among queues frees
// up (0: none is waiting on a throttle).
func (s *Server) throttledUntil(queues []string) int64 {
	var until int64
	for _, q := range queues {
		if t := s.eng.ThrottledUntil(q); t > 0 && (until == 0 || t < until) {
			until = t
		}
	}
	return until
}

func (s *Server) anyFetchable(queues []string) bool {
	for _, q := range queues {
		if s.eng.Fetchable(q) {
			return true
		}
	}
	return false
}

// waitAny waits until a watch fires (true), the wait ends (true, to retry)
// or the server shuts down (false).
func (s *Server) waitAny(watches []<-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	if len(watches) == 1 {
		select {
		case <-watches[0]:
		case <-t.C:
		case <-s.closed:
			return false
		}
		return true
	}
	chosen, _, _ := reflect.Select(selectCases(s.closed, t.C, nil, watches))
	return chosen != 0
}

// selectCases builds [closed, timer, parked?, watches...] for reflect.Select.
func selectCases(closed <-chan struct{}, timer <-chan time.Time, parts []parkedPart, watches []<-chan struct{}) []reflect.SelectCase {
	cases := make([]reflect.SelectCase, 0, len(watches)+len(parts)+2)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(closed)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)})
	for _, p := range parts {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.pk.Result())})
	}
	for _, w := range watches {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	return cases
}

// tryFetch claims up to count jobs from the fetchable queues. Queues on one
// shard are fetched in one op; when several shards have work, the shard
// whose head job ranks first (priority, then age) goes first, so priority
// holds across shards.
func (s *Server) tryFetch(queues []string, req *fetchRequest, count int) ([]statemachine.JobView, *apiError) {
	var partsBuf [8]fetchPart
	parts := s.groupByShard(partsBuf[:0], queues, true)
	if len(parts) == 0 {
		return nil, nil
	}
	if len(parts) > 1 {
		for i := range parts {
			parts[i].head = s.bestHead(parts[i].queues)
		}
		// Insertion sort: a few parts, and no closure or reflection.
		for i := 1; i < len(parts); i++ {
			for j := i; j > 0 && parts[j].before(&parts[j-1]); j-- {
				parts[j], parts[j-1] = parts[j-1], parts[j]
			}
		}
	}
	var jobs []statemachine.JobView
	for i := range parts {
		sh, qs := parts[i].shard, parts[i].queues
		// The claim asks for the jobs it reserved, so that claims in
		// flight at once never ask for more than are pending.
		res := s.eng.Reserve(qs, count-len(jobs))
		if res.N == 0 {
			continue
		}
		rs, aerr := s.propose(sh, &statemachine.FetchOp{Queues: qs, WorkerID: req.WorkerID, Hostname: req.Hostname, Count: uint32(res.N)})
		s.eng.Release(res, aerr != nil || len(rs[0].Jobs) > 0)
		if aerr != nil {
			if len(jobs) > 0 {
				break // hand out what was claimed; the rest can wait
			}
			return nil, aerr
		}
		if jobs == nil {
			jobs = rs[0].Jobs // one shard's claim: no copy
		} else {
			// Room for the rest of the claims at once (count bounds them).
			jobs = append(slices.Grow(jobs, max(count-len(jobs), len(rs[0].Jobs))), rs[0].Jobs...)
		}
		if len(jobs) >= count {
			break
		}
	}
	return jobs, nil
}

// fetchPart is a fetch's queues on one shard, in the order asked, and
// (tryFetch, when several shards have work) their best head.
type fetchPart struct {
	shard  int
	queues []string
	head   statemachine.QueueHead
}

// before ranks parts: the one with work first, then by its head's
// priority and age, then by shard.
func (p *fetchPart) before(q *fetchPart) bool {
	a, b := &p.head, &q.head
	if a.OK != b.OK {
		return a.OK
	}
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if a.CreatedAt != b.CreatedAt {
		return a.CreatedAt < b.CreatedAt
	}
	return p.shard < q.shard
}

// groupByShard appends to parts the queues (only the fetchable ones when
// fetchable) grouped by shard: shards in the order their first queue
// comes, each shard's queues in the order given, all over one array of
// names (one allocation; a map of slices made several).
func (s *Server) groupByShard(parts []fetchPart, queues []string, fetchable bool) []fetchPart {
	var shardsBuf [32]int
	shards := shardsBuf[:0] // each queue's shard, -1: left out
	n := 0
	for _, q := range queues {
		sh := -1
		if !fetchable || s.eng.Fetchable(q) {
			sh = s.rt.ShardForQueue(q)
			n++
		}
		shards = append(shards, sh)
	}
	if n == 0 {
		return parts
	}
	names := make([]string, 0, n)
	for i, sh := range shards {
		if sh < 0 {
			continue
		}
		start := len(names)
		for j := i; j < len(shards); j++ {
			if shards[j] == sh {
				names = append(names, queues[j])
				shards[j] = -1
			}
		}
		parts = append(parts, fetchPart{shard: sh, queues: names[start:len(names):len(names)]})
	}
	return parts
}

// bestHead is the highest-ranked head among a shard's queues, from the
// signals each Update leaves (no read on the hot path).
func (s *Server) bestHead(queues []string) statemachine.QueueHead {
	var best statemachine.QueueHead
	for _, q := range queues {
		h := s.eng.Head(q)
		if !h.OK {
			continue
		}
		if !best.OK || h.Priority < best.Priority || (h.Priority == best.Priority && h.CreatedAt < best.CreatedAt) {
			best = h
		}
	}
	return best
}

func (s *Server) writeFetched(ctx *fasthttp.RequestCtx, jobs []statemachine.JobView, many bool) {
	for i := range jobs {
		s.counters(jobs[i].Job.Queue).fetched.Inc()
	}
	b := make([]byte, 0, 128+fetchedSize(jobs))
	if !many {
		writeJSON(ctx, 200, appendFetchedJob(b, &jobs[0]))
		return
	}
	b = append(b, `{"jobs":[`...)
	for i := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFetchedJob(b, &jobs[i])
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// fetchedSize is about what appendFetchedJob writes for jobs, so that a
// response is allocated once rather than grown job by job.
func fetchedSize(jobs []statemachine.JobView) int {
	n := 0
	for i := range jobs {
		n += 256 + len(jobs[i].Job.Payload) + len(jobs[i].State.Checkpoint)
	}
	return n
}

// ---- fetch over queues on shards this node does not host ----

// allHosted reports whether this node hosts the shard of every queue.
func (s *Server) allHosted(queues []string) bool {
	for _, q := range queues {
		if !s.hosted(s.rt.ShardForQueue(q)) {
			return false
		}
	}
	return true
}

// fetchElsewhere serves a fetch naming a queue whose shard this node does
// not host (peer.Client.PlanFetch). A node hosting every queue's shard
// gets the whole request (it long-polls with its own signals); failing
// that, the queues are split between this node and a few others, waited
// on all at once and claimed from as they get work
// (peer.Client.FetchRounds, with this node's part served by localFetch).
func (s *Server) fetchElsewhere(ctx *fasthttp.RequestCtx, req *fetchRequest, queues []string, timeout time.Duration, count int) {
	if peer.Forwarded(ctx) {
		// Sent here by a node that took this one for a host of them all.
		writeError(ctx, codeUnavailable.err("not every queue's shard is hosted on this node"))
		ctx.Response.Header.Set(peer.NotHostedHeader, "1")
		return
	}
	byShard := map[int][]string{}
	var shards []int
	lf := &localFetch{s: s, req: req}
	for _, q := range queues {
		sh := s.rt.ShardForQueue(q)
		if _, ok := byShard[sh]; !ok {
			shards = append(shards, sh)
		}
		byShard[sh] = append(byShard[sh], q)
		if s.hosted(sh) {
			lf.queues = append(lf.queues, q)
		}
	}
	all, groups := s.peer.PlanFetch(shards, byShard, s.hosted)
	if len(all) > 0 {
		if err := s.forward(ctx, all, time.Now().Add(timeout+s.cfg.RequestTimeout)); err != nil {
			writeError(ctx, codeUnavailable.err("the queues' shards are hosted on another node, and forwarding failed: "+err.Error()))
		}
		return
	}
	if len(lf.queues) == 0 && len(groups) == 0 {
		writeError(ctx, codeUnavailable.err("the queues' shards are not hosted on this node, and no node hosting them is known"))
		return
	}
	raw, err := s.peer.FetchRounds(peer.FetchRounds{Local: lf, LocalQueues: len(lf.queues) > 0, Groups: groups, Namespace: principal(ctx).Namespace,
		WorkerID: req.WorkerID, Hostname: req.Hostname, Count: count, Deadline: time.Now().Add(timeout)})
	switch {
	case err != nil:
		writeError(ctx, engineError(err))
	case s.handBack(ctx, req.WorkerID, lf.jobs, raw):
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	case len(lf.jobs)+len(raw) > 0:
		s.writeFetchedFrom(ctx, lf.jobs, raw, req.Count != nil)
	default:
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}
}

// localFetch is this node's part of a fetch over several nodes
// (peer.FetchLocal): its queues, watched and claimed (tryFetch) here; the
// jobs it claimed.
type localFetch struct {
	s       *Server
	req     *fetchRequest
	queues  []string
	watches []<-chan struct{}
	jobs    []statemachine.JobView
}

func (l *localFetch) Watch() {
	l.watches = l.watches[:0]
	for _, q := range l.queues {
		l.watches = append(l.watches, l.s.eng.Watch(q))
	}
}

func (l *localFetch) Fetch(want int) (int, error) {
	got, aerr := l.s.tryFetch(l.queues, l.req, want)
	if aerr != nil {
		return 0, aerr
	}
	l.jobs = append(l.jobs, got...)
	return len(got), nil
}

// Wait waits on the local queues' signals and on remote (the other
// nodes' waits, peer.FetchRounds). A local queue that looks fetchable
// while the last claim took nothing (another worker won, a concurrency
// cap) is retried after retryEmptyFetch, a throttled one when its window
// frees up: neither signals.
func (l *localFetch) Wait(d time.Duration, remote <-chan int) (int, bool) {
	if l.s.anyFetchable(l.queues) {
		d = min(d, retryEmptyFetch)
	}
	if until := l.s.throttledUntil(l.queues); until > 0 {
		d = min(d, max(time.Until(time.Unix(0, until)), time.Millisecond))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	cases := selectCases(l.s.closed, t.C, nil, l.watches)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(remote)})
	switch chosen, v, _ := reflect.Select(cases); {
	case chosen == 0:
		return -1, false
	case chosen == len(cases)-1:
		return int(v.Int()), true
	}
	return -1, true
}

// writeFetchedFrom answers with jobs claimed here and jobs another node
// claimed and rendered (spliced in as they came, so a worker sees the same
// JSON either way).
func (s *Server) writeFetchedFrom(ctx *fasthttp.RequestCtx, jobs []statemachine.JobView, raw [][]byte, many bool) {
	if len(raw) == 0 {
		s.writeFetched(ctx, jobs, many)
		return
	}
	if !many && len(jobs) == 0 && len(raw) == 1 {
		writeJSON(ctx, 200, raw[0])
		return
	}
	size := 128
	for i := range raw {
		size += len(raw[i]) + 1
	}
	for i := range jobs {
		s.counters(jobs[i].Job.Queue).fetched.Inc()
	}
	b := append(make([]byte, 0, size+fetchedSize(jobs)), `{"jobs":[`...)
	for i := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFetchedJob(b, &jobs[i])
	}
	for i := range raw {
		if i > 0 || len(jobs) > 0 {
			b = append(b, ',')
		}
		b = append(b, raw[i]...)
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

type fetchRequest struct {
	Queues   queueList `json:"queues"`
	WorkerID string    `json:"worker_id"`
	Hostname string    `json:"hostname"`
	Timeout  *float64  `json:"timeout"`
	Count    *int      `json:"count"`
}

func (r *fetchRequest) validate() (time.Duration, int, *apiError) {
	if len(r.Queues) == 0 {
		return 0, 0, invalid("field \"queues\" must list at least one queue")
	}
	if len(r.Queues) > defaultFetchQueueMax {
		return 0, 0, invalid("at most %d queues per fetch", defaultFetchQueueMax)
	}
	for _, q := range r.Queues {
		if err := router.ValidateQueueName(q); err != nil {
			return 0, 0, invalid("field \"queues\": %v", err)
		}
	}
	if len(r.WorkerID) > maxWorkerIDLen || len(r.Hostname) > maxWorkerIDLen {
		return 0, 0, invalid("worker_id and hostname must be at most %d bytes", maxWorkerIDLen)
	}
	var timeout time.Duration
	if r.Timeout != nil {
		t := *r.Timeout
		if t < 0 || t > maxFetchTimeout || math.IsNaN(t) {
			return 0, 0, invalid("field \"timeout\" must be 0–%d seconds", maxFetchTimeout)
		}
		timeout = time.Duration(t * float64(time.Second))
	}
	count := 1
	if r.Count != nil {
		if *r.Count < 1 || *r.Count > maxFetchCount {
			return 0, 0, invalid("field \"count\" must be 1–%d", maxFetchCount)
		}
		count = *r.Count
	}
	return timeout, count, nil
}
