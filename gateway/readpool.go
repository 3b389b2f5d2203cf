package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// The read pool. Searches, lists and job reads (the routes in pooledReads)
// each take one of a bounded number of slots, waiting in a bounded queue
// when all are taken, and run under a deadline (Config.ReadTimeout) that
// counts from the request's arrival: the wait for a slot, the wait for
// the mirror (read your writes) and the work share it. They never wait on
// the write path: a write's proposal queue, Raft or the mirror's writer
// beyond that deadline. A search the deadline cuts answers the matches it
// found with "partial": true (search.go); a read that cannot get a slot
// in time answers 429 reads_busy with Retry-After, at once when the queue
// is full.

// Metrics of the read pool (summed over the servers of a process).
var (
	readsRunning  = metrics.GetOrCreateGauge(`corvo_read_pool_running`, nil)
	readsQueued   = metrics.GetOrCreateGauge(`corvo_read_pool_queued`, nil)
	readsRejected = metrics.GetOrCreateCounter(`corvo_read_pool_rejected_total`)
	readsPartial  = metrics.GetOrCreateCounter(`corvo_search_partial_total`)
	readsDeadline = metrics.GetOrCreateCounter(`corvo_read_deadline_exceeded_total`)
)

// errReadQueueFull: every slot is taken and the queue is full.
var errReadQueueFull = errors.New("the read queue is full")

// readPool bounds the reads running at once (slots) and waiting (queue).
type readPool struct {
	slots chan struct{} // one token per running read
	queue chan struct{} // one token per waiting read
}

func newReadPool(running, queued int) *readPool {
	return &readPool{slots: make(chan struct{}, running), queue: make(chan struct{}, queued)}
}

// acquire takes a slot, waiting in the queue until ctx ends (its error),
// or fails at once with errReadQueueFull. The caller calls release once
// it is done.
func (p *readPool) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		readsRunning.Inc()
		return nil
	default:
	}
	select {
	case p.queue <- struct{}{}:
	default:
		return errReadQueueFull
	}
	readsQueued.Inc()
	defer func() {
		<-p.queue
		readsQueued.Dec()
	}()
	select {
	case p.slots <- struct{}{}:
		readsRunning.Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *readPool) release() {
	<-p.slots
	readsRunning.Dec()
}

// running and waiting are the slots taken and the reads queued.
func (p *readPool) running() int { return len(p.slots) }
func (p *readPool) waiting() int { return len(p.queue) }

// pooledReads are the routes that run on the read pool.
var pooledReads = map[string]bool{
	"POST /api/v1/jobs/search":   true,
	"GET /api/v1/usage/summary":  true,
	"GET /api/v1/scores/summary": true,
	"GET /api/v1/scores/compare": true,
	"GET /api/v1/jobs/{id}":      true,
	"GET /api/v1/dead":           true,
	"GET /api/v1/queues":         true,
	"GET /api/v1/workers":        true,
	"GET /api/v1/batches/{id}":   true,
	"GET /api/v1/bulk":           true,
	"GET /api/v1/audit":          true,
}

// readCtxKey holds a pooled read's context among the request's user values.
const readCtxKey = "corvo.read"

// pooled runs h on the read pool, under a deadline ReadTimeout after
// start; h finds its context with readContext.
func (s *Server) pooled(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		rctx, cancel := context.WithDeadline(context.Background(), s.clock.Now().Add(s.cfg.ReadTimeout))
		defer cancel()
		if err := s.reads.acquire(rctx); err != nil {
			readsRejected.Inc()
			writeError(ctx, codeReadsBusy.err("every read slot of this node is taken ("+err.Error()+"); retry after the Retry-After delay"))
			return
		}
		defer s.reads.release()
		ctx.SetUserValue(readCtxKey, rctx)
		h(ctx)
	}
}

// readContext is the pooled read's context (with its deadline), or a
// context ending ReadTimeout from now for a call from elsewhere.
func (s *Server) readContext(ctx *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	if c, ok := ctx.UserValue(readCtxKey).(context.Context); ok {
		return c, func() {}
	}
	return context.WithDeadline(context.Background(), s.clock.Now().Add(s.cfg.ReadTimeout))
}

// clock is the time the read pool's deadlines count from (tests stub it).
type clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
