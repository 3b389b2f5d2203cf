package corvo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"
)

// Enqueue coalescing (ioredis' auto-pipelining): an Enqueue made while
// fewer than maxEnqueueRequests requests are in flight goes out at once;
// the ones made while they are all out wait and go together as the next
// POST /enqueue/batch, capped by count and bytes.

const (
	// maxEnqueueBatch and maxEnqueueBatchBytes cap one coalesced request
	// (the server takes 10,000 jobs and 64 MiB).
	maxEnqueueBatch      = 1000
	maxEnqueueBatchBytes = 1 << 20
	// batchTimeout bounds a coalesced request, which no caller's context
	// ends.
	batchTimeout = time.Minute
	// maxEnqueueRequests is how many enqueue requests a client has in
	// flight. Measured end to end (BENCHMARKS.md, session 9; 16
	// producers, 8 queues): with 1 the calls wait a whole round trip for
	// the request ahead of them and the batches, split per shard, make
	// 0.95 Raft entries per job; with 2, 8–27 % more jobs/s at 11–20 %
	// less server CPU per job; 4 measured no better than 2.
	maxEnqueueRequests = 2
)

// coalescable reports whether a batch answer says all a lone enqueue's
// would: a batch names each job's ID, not its status, which is "pending"
// for every job without scheduled_at, depends_on or a unique key.
func coalescable(r *EnqueueRequest) bool {
	return r.ScheduledAt == nil && len(r.DependsOn) == 0 && r.UniqueKey == ""
}

type enqueueAnswer struct {
	out *Enqueued
	err error
}

type pendingEnqueue struct {
	ctx   context.Context
	queue string
	body  []byte // the job's JSON
	done  chan enqueueAnswer
}

type coalescer struct {
	mu      sync.Mutex
	senders int               // requests out (each sender loops over waiting)
	waiting []*pendingEnqueue // gathered while busy, in call order
	// testWaiting, when set (tests), is told how many calls wait after
	// each one joins.
	testWaiting chan int
}

func (q *coalescer) enqueue(ctx context.Context, c *Client, r EnqueueRequest) (*Enqueued, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return &Enqueued{}, err
	}
	p := &pendingEnqueue{ctx: ctx, queue: r.Queue, body: body, done: make(chan enqueueAnswer, 1)}
	q.mu.Lock()
	if q.senders >= maxEnqueueRequests {
		q.waiting = append(q.waiting, p)
		n := len(q.waiting)
		q.mu.Unlock()
		if q.testWaiting != nil {
			q.testWaiting <- n
		}
	} else {
		q.senders++
		q.mu.Unlock()
		go q.send(c, []*pendingEnqueue{p})
	}
	select {
	case a := <-p.done:
		return a.out, a.err
	case <-ctx.Done():
		return &Enqueued{}, ctx.Err()
	}
}

// send sends batch, then what gathered meanwhile, until nothing waits.
func (q *coalescer) send(c *Client, batch []*pendingEnqueue) {
	for len(batch) > 0 {
		c.sendEnqueues(batch)
		// The callers just answered are runnable, and a producer's next
		// call usually follows at once: yielding once lets those calls
		// join the waiting ones, for this sender to take as one request,
		// instead of finding no sender busy and going alone.
		runtime.Gosched()
		q.mu.Lock()
		batch = q.next()
		if len(batch) == 0 {
			q.senders--
		}
		q.mu.Unlock()
	}
}

// next takes the waiting calls that fit in one request. Call with q.mu
// held.
func (q *coalescer) next() []*pendingEnqueue {
	n, size := 0, 0
	for n < len(q.waiting) && n < maxEnqueueBatch && (n == 0 || size+len(q.waiting[n].body) <= maxEnqueueBatchBytes) {
		size += len(q.waiting[n].body) + 1
		n++
	}
	batch := q.waiting[:n:n]
	q.waiting = append([]*pendingEnqueue(nil), q.waiting[n:]...)
	return batch
}

// sendEnqueues sends a batch and answers each call. With the placement
// known, the batch is split by the node its jobs' queues live on (their
// shards' leader), one request to each node, all at once: no job costs a
// forwarding hop.
func (c *Client) sendEnqueues(batch []*pendingEnqueue) {
	live := batch[:0:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- enqueueAnswer{&Enqueued{}, err} // given up before it was sent
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	if c.placement() == nil {
		c.sendEnqueuesTo(nil, live)
		return
	}
	var order []string
	groups := map[string][]*pendingEnqueue{}
	routes := map[string][]string{}
	for _, p := range live {
		route := c.routeQueue(p.queue)
		key := ""
		if len(route) > 0 {
			key = route[0]
		}
		if _, ok := groups[key]; !ok {
			order = append(order, key)
			routes[key] = route
		}
		groups[key] = append(groups[key], p)
	}
	if len(order) == 1 {
		c.sendEnqueuesTo(routes[order[0]], live)
		return
	}
	var wg sync.WaitGroup
	for _, key := range order {
		wg.Go(func() { c.sendEnqueuesTo(routes[key], groups[key]) })
	}
	wg.Wait()
}

// sendEnqueuesTo sends jobs to the first node of route (nil: the client's
// current node), as one batch (one job: a plain enqueue), and answers each
// call. Whatever the batch does not settle, each job settles alone.
func (c *Client) sendEnqueuesTo(route []string, live []*pendingEnqueue) {
	if len(live) == 1 {
		live[0].alone(c)
		return
	}
	var b bytes.Buffer
	b.WriteString(`{"jobs":[`)
	for i, p := range live {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(p.body)
	}
	b.WriteString(`]}`)
	// One attempt: a failed batch is not sent again whole (some of its
	// shards may have committed), its jobs go alone.
	// No caller's cancel ends it (it carries the others' jobs too).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), batchTimeout)
	defer cancel()
	base, _ := c.base()
	if len(route) > 0 {
		base = route[0]
	}
	status, data, err := c.roundTrip(ctx, http.MethodPost, base+"/api/v1/enqueue/batch", b.Bytes())
	if err != nil && len(route) > 0 && dialFailed(err) {
		c.place.markDown(base) // each job goes alone, to the shard's next node
		c.refreshPlacement()
	}
	var ans batchAnswer
	var ae *Error
	switch {
	case err == nil && status == http.StatusCreated:
	case errors.As(err, &ae) && (ae.Status == 429 || ae.Status == 503):
		// A shard did not commit: the answer names what was not applied.
		// Without job_ids nothing was (overload, rate limit, shutdown).
	default:
		// A refused batch stored nothing (a validation error, a key not
		// allowed a queue): each job alone gets its own answer. A
		// transport error: each retried alone, as a lone enqueue would be.
		aloneAll(c, live)
		return
	}
	if json.Unmarshal(data, &ans) != nil || len(ans.JobIDs) != len(live) {
		if err == nil {
			e := fmt.Errorf("corvo: batch enqueue answered %d job ids for %d jobs", len(ans.JobIDs), len(live))
			for _, p := range live {
				p.done <- enqueueAnswer{&Enqueued{}, e}
			}
			return
		}
		aloneAll(c, live)
		return
	}
	notApplied := make(map[int]bool, len(ans.NotApplied))
	for _, i := range ans.NotApplied {
		notApplied[i] = true
	}
	var again []*pendingEnqueue
	for i, p := range live {
		if notApplied[i] {
			again = append(again, p)
			continue
		}
		p.done <- enqueueAnswer{&Enqueued{JobID: ans.JobIDs[i], Status: "pending"}, nil}
	}
	aloneAll(c, again)
}

// batchAnswer is /enqueue/batch's answer, whole or partial.
type batchAnswer struct {
	JobIDs     []string `json:"job_ids"`
	NotApplied []int    `json:"not_applied"`
}

// alone sends the job as a lone Enqueue (its context, the retries).
func (p *pendingEnqueue) alone(c *Client) {
	var out Enqueued
	_, err := c.doRouted(p.ctx, c.routeQueue(p.queue), http.MethodPost, "/api/v1/enqueue", p.body, &out)
	p.done <- enqueueAnswer{&out, err}
}

// aloneAll sends each job alone, all at once, and returns when every one
// has its answer.
func aloneAll(c *Client, ps []*pendingEnqueue) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.alone(c) })
	}
	wg.Wait()
}
