package gateway

import (
	"reflect"
	"sort"
	"time"

	"github.com/valyala/fasthttp"

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
	deadline := time.Now().Add(timeout)
	queues := dedupe(req.Queues)
	for {
		// Watch before checking, so a job arriving in between still wakes us.
		watches := make([]<-chan struct{}, len(queues))
		for i, q := range queues {
			watches[i] = s.eng.Watch(q)
		}
		jobs, aerr := s.tryFetch(queues, &req, count)
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
		if len(jobs) > 0 {
			s.writeFetched(ctx, jobs, req.Count != nil)
			return
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
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
		if sh, ok := s.singleShard(queues); ok && !fetchable {
			op := &statemachine.FetchOp{Queues: queues, WorkerID: req.WorkerID, Hostname: req.Hostname, Count: uint32(count)}
			jobs, aerr, alive := s.waitParked(sh, op, watches, wait)
			if aerr != nil {
				writeError(ctx, aerr)
				return
			}
			if len(jobs) > 0 {
				s.writeFetched(ctx, jobs, req.Count != nil)
				return
			}
			if !alive {
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			}
			continue
		}
		if !s.waitAny(watches, wait) {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
	}
}

// singleShard reports the shard when every queue lives on the same one.
func (s *Server) singleShard(queues []string) (int, bool) {
	sh := s.rt.ShardForQueue(queues[0])
	for _, q := range queues[1:] {
		if s.rt.ShardForQueue(q) != sh {
			return 0, false
		}
	}
	return sh, true
}

// waitParked parks the fetch at its shard's proposer and waits for it to be
// served, for a queue signal (promotions, reclaims and resumes do not go
// through parked fetches) or for the wait to end. alive is false when the
// server is shutting down.
func (s *Server) waitParked(sh int, op *statemachine.FetchOp, watches []<-chan struct{}, wait time.Duration) ([]statemachine.JobView, *apiError, bool) {
	pk := s.eng.Park(sh, op)
	if pk == nil {
		return nil, nil, s.waitAny(watches, wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	var resp shard.Response
	got, alive := false, true
	if len(watches) == 1 {
		select {
		case resp = <-pk.Result():
			got = true
		case <-watches[0]:
		case <-t.C:
		case <-s.closed:
			alive = false
		}
	} else {
		chosen, v, _ := reflect.Select(selectCases(s.closed, t.C, pk.Result(), watches))
		switch chosen {
		case 0:
			alive = false
		case 2:
			resp, got = v.Interface().(shard.Response), true
		}
	}
	if !got {
		if s.eng.Unpark(sh, pk) {
			return nil, nil, alive
		}
		resp = <-pk.Result() // it rides in an entry already: its jobs are ours
	}
	jobs, err := resp.Jobs()
	if err != nil {
		return nil, engineError(err), alive
	}
	return jobs, nil, alive
}

func dedupe(qs []string) []string {
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
func selectCases(closed <-chan struct{}, timer <-chan time.Time, parked <-chan shard.Response, watches []<-chan struct{}) []reflect.SelectCase {
	cases := make([]reflect.SelectCase, 0, len(watches)+3)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(closed)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)})
	if parked != nil {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(parked)})
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
	byShard := map[int][]string{}
	for _, q := range queues {
		if s.eng.Fetchable(q) {
			sh := s.rt.ShardForQueue(q)
			byShard[sh] = append(byShard[sh], q)
		}
	}
	if len(byShard) == 0 {
		return nil, nil
	}
	order := make([]int, 0, len(byShard))
	for sh := range byShard {
		order = append(order, sh)
	}
	if len(order) > 1 {
		rank := make(map[int]statemachine.QueueHead, len(order))
		for _, sh := range order {
			rank[sh] = s.bestHead(byShard[sh])
		}
		sort.Slice(order, func(i, j int) bool {
			a, b := rank[order[i]], rank[order[j]]
			if a.OK != b.OK {
				return a.OK
			}
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			if a.CreatedAt != b.CreatedAt {
				return a.CreatedAt < b.CreatedAt
			}
			return order[i] < order[j]
		})
	}
	var jobs []statemachine.JobView
	for _, sh := range order {
		rs, aerr := s.propose(sh, &statemachine.FetchOp{Queues: byShard[sh], WorkerID: req.WorkerID, Hostname: req.Hostname, Count: uint32(count - len(jobs))})
		if aerr != nil {
			if len(jobs) > 0 {
				break // hand out what was claimed; the rest can wait
			}
			return nil, aerr
		}
		jobs = append(jobs, rs[0].Jobs...)
		if len(jobs) >= count {
			break
		}
	}
	return jobs, nil
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
	size := 128
	for i := range jobs {
		size += 256 + len(jobs[i].Job.Payload) + len(jobs[i].State.Checkpoint)
	}
	b := make([]byte, 0, size)
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
