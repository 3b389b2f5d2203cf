package corvo

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The worker's completer (river's BatchCompleter is the model): a slot
// whose handler succeeded hands its ack here, with how many jobs its
// fetch should bring (its next one, and one to hold after a quick
// handler: Worker.runSlot), and waits for them unless it holds its next
// job already. Acks that finish within AckWindow of each other go out as
// one POST /ack/batch carrying a fetch for the slots they free; a lone ack
// goes out as the single ack-and-fetch. A batch is sent at once when no
// handler is left running (nothing more can join it), so an idle worker's
// ack waits for nothing.

const (
	// AckWindow is how long the worker's first waiting ack waits for
	// others to share its request, while handlers are still running.
	AckWindow = time.Millisecond
	// maxAckBatch bounds the acks of one request: an ack batch's fetch
	// claims at most 1,000 jobs (the server's fetch count limit).
	maxAckBatch = 1000
	// maxAckRequests bounds the worker's ack requests in flight; acks that
	// finish while all of them are out wait for the next one
	// (backpressure: the batches grow instead).
	maxAckRequests = 4
)

// pendingAck is a slot's ack; next receives the jobs its fetch claimed
// for the slot (up to want: the slot's next job, and one to hold while it
// runs that one; Worker.runSlot), already registered as running (none:
// the slot has nothing more from this ack).
type pendingAck struct {
	a    Ack
	g    *fetchGroup // the slot's: its next jobs come from the group's queues
	want int
	next chan []*JobContext
}

type completer struct {
	w   *Worker
	in  chan *pendingAck // at most one per slot
	sem chan struct{}    // requests in flight
	max int
	wg  sync.WaitGroup
}

func newCompleter(w *Worker) *completer {
	c := &completer{
		w:   w,
		in:  make(chan *pendingAck, w.opt.Concurrency),
		sem: make(chan struct{}, maxAckRequests),
		max: min(w.opt.Concurrency, maxAckBatch),
	}
	c.wg.Add(1)
	go c.run()
	return c
}

// ack queues the ack of a slot of group g, whose fetch asks for want jobs
// for the slot, and returns where they will come (want 0: none; the
// channel is answered once the ack is).
func (c *completer) ack(a Ack, g *fetchGroup, want int) <-chan []*JobContext {
	p := &pendingAck{a: a, g: g, want: want, next: make(chan []*JobContext, 1)}
	c.in <- p
	return p.next
}

// stop ends the completer once every slot has had its answer.
func (c *completer) stop() {
	close(c.in)
	c.wg.Wait()
}

func (c *completer) run() {
	defer c.wg.Done()
	window := time.NewTimer(time.Hour)
	window.Stop()
	for {
		first, ok := <-c.in
		if !ok {
			return
		}
		batch := []*pendingAck{first}
		window.Reset(AckWindow)
		open := true
	gather:
		for len(batch) < c.max {
			select {
			case p, ok := <-c.in: // already waiting: always joins
				if !ok {
					open = false
					break gather
				}
				batch = append(batch, p)
				continue
			default:
			}
			if c.w.running() == 0 {
				break // no handler left to finish: go now
			}
			select {
			case p, ok := <-c.in:
				if !ok {
					open = false
					break gather
				}
				batch = append(batch, p)
			case <-window.C:
				break gather
			}
		}
		window.Stop()
		// One request per group: its acks go to the group's node, and
		// fetch from its queues.
		for _, part := range byGroup(batch) {
			c.sem <- struct{}{}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer func() { <-c.sem }()
				c.send(part)
			}()
		}
		if !open {
			return
		}
	}
}

// byGroup splits a batch by the slots' groups, in order.
func byGroup(batch []*pendingAck) [][]*pendingAck {
	var parts [][]*pendingAck
	for _, p := range batch {
		i := slices.IndexFunc(parts, func(part []*pendingAck) bool { return part[0].g == p.g })
		if i < 0 {
			parts = append(parts, nil)
			i = len(parts) - 1
		}
		parts[i] = append(parts[i], p)
	}
	return parts
}

// send acks a batch of one group's slots and hands each slot its jobs:
// the first keep of them (Worker.keep) fetch what they want from the
// group's queues, the others are given back.
func (c *completer) send(batch []*pendingAck) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := c.w
	g := batch[0].g
	keep := w.keep(g, len(batch))
	want := 0
	for _, p := range batch[:keep] {
		want += p.want
	}
	if len(batch) == 1 {
		batch[0].next <- w.startAll(w.ackOne(ctx, batch[0].a, g, want), g)
		return
	}
	acks := make([]Ack, len(batch))
	for i, p := range batch {
		acks[i] = p.a
	}
	var out *AckBatchResult
	var err error
	if want > 0 && !w.draining.Load() && !w.plainBatch.Load() {
		out, err = w.c.ackBatch(ctx, acks, &FetchBody{Queues: g.queues, WorkerID: w.opt.ID, Hostname: w.opt.Hostname, Count: want})
		if isBadRequest(err) {
			// A server without the batch's fetch refuses the field, and
			// acked nothing: ack batches plainly, from now on.
			w.plainBatch.Store(true)
		}
	}
	if out == nil && (err == nil || isBadRequest(err)) {
		out, err = w.c.ackBatch(ctx, acks, nil)
	}
	var jobs []FetchedJob
	if err == nil {
		jobs = out.Jobs
		// An ack that was not committed for a reason a single ack's
		// request is retried for (overload, no leader, a node stopping)
		// goes again alone, with the client's retries. Any other failure
		// is final, as a single ack's is.
		byID := make(map[string]Ack, len(acks))
		for _, a := range acks {
			byID[a.JobID] = a
		}
		for _, f := range out.Errors {
			if retryableCode(f.Code) {
				_ = w.c.Ack(ctx, byID[f.JobID])
			}
		}
	}
	if w.draining.Load() {
		w.handBack(ctx, jobs) // claimed as the worker began to drain
		jobs = nil
	}
	if len(jobs) > want {
		w.handBack(ctx, jobs[want:]) // more than asked for: not ours to run
		jobs = jobs[:want]
	}
	// All running before any slot has its job (as a poller's fetch does);
	// each slot's next job first, then the ones to hold.
	jcs := w.startAll(jobs, g)
	got := make([][]*JobContext, len(batch))
	for round := 0; len(jcs) > 0 && round < 2; round++ {
		for i, p := range batch[:keep] {
			if len(jcs) > 0 && p.want > round {
				got[i], jcs = append(got[i], jcs[0]), jcs[1:]
			}
		}
	}
	for i, p := range batch {
		p.next <- got[i]
	}
}

// ackOne acks a lone job of group g, with a fetch of want jobs from the
// group's queues (none when want is 0, the worker drains or the server
// refuses the field).
func (w *Worker) ackOne(ctx context.Context, a Ack, g *fetchGroup, want int) []FetchedJob {
	if want == 0 || w.draining.Load() || w.plainAcks.Load() {
		_ = w.c.Ack(ctx, a)
		return nil
	}
	out, err := w.c.AckAndFetch(ctx, a, FetchBody{Queues: g.queues, WorkerID: w.opt.ID, Hostname: w.opt.Hostname, Count: want})
	if isBadRequest(err) {
		// A server without ack-and-fetch refuses the field, and acked
		// nothing: ack plainly, from now on.
		w.plainAcks.Store(true)
		_ = w.c.Ack(ctx, a)
		return nil
	}
	if err != nil || len(out.Jobs) == 0 {
		return nil
	}
	if w.draining.Load() {
		w.handBack(ctx, out.Jobs)
		return nil
	}
	if len(out.Jobs) > want {
		w.handBack(ctx, out.Jobs[want:])
		return out.Jobs[:want]
	}
	return out.Jobs
}

// handBack gives back jobs the worker claimed but will not run: pending
// again at once, their attempts not counted (Client.Unclaim). A server
// without the endpoint (404) has them failed with "worker_shutdown"
// instead, which it retries as any failure.
func (w *Worker) handBack(ctx context.Context, jobs []FetchedJob) {
	for _, j := range jobs {
		if _, err := w.c.Unclaim(ctx, j.JobID, w.opt.ID, j.Attempt); IsNotFound(err) {
			_, _ = w.c.Fail(ctx, j.JobID, Failure{Error: "worker_shutdown", WorkerID: w.opt.ID, Attempt: j.Attempt})
		}
	}
}

func isBadRequest(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusBadRequest
}

// retryableCode: the codes of the answers Client retries (429, 503).
func retryableCode(code string) bool {
	switch code {
	case CodeOverloaded, CodeRateLimited, CodeUnavailable, CodeShuttingDown:
		return true
	}
	return false
}
