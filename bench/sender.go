package bench

import (
	"context"
	"sync"
	"time"
)

// runSenders runs the open-loop senders of fixed-rate mode: job i is due at
// start + i/Rate and is sent by the next free sender as soon as it is due,
// whether or not the answers to earlier jobs have arrived. With Senders
// goroutines up to Senders requests can be outstanding; only when all of
// them are waiting for answers does a job go out late, which the
// schedule-lag latency shows.
//
// As in the peers' harness, each job's payload carries the time its
// enqueue request was sent (not the time it was due), and the workers
// measure the delivery latency from it. Every sender opens its connection
// first (GET /healthz), so that connecting is not part of the first jobs'
// latency; the schedule starts once all are connected, and runSenders
// returns that start with the senders' stats.
func (r *runner) runSenders() (time.Time, *stats) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	callers := make([]*caller, r.cfg.Senders)
	var wg sync.WaitGroup
	for i := range callers {
		callers[i] = newCaller(r.nextClient(), &r.ctr)
		wg.Go(callers[i].warmUp)
	}
	wg.Wait()
	start := time.Now()
	results := make([]*stats, r.cfg.Senders)
	for i := range results {
		wg.Go(func() { results[i] = r.sender(ctx, callers[i], start) })
	}
	wg.Wait()
	r.producersDone.Store(true)
	return start, mergeStats(results)
}

// dueAt is when job i of a fixed-rate run is due.
func (r *runner) dueAt(start time.Time, i int64) time.Time {
	return start.Add(time.Duration(float64(i) * float64(time.Second) / float64(r.cfg.Rate)))
}

func (r *runner) sender(ctx context.Context, c *caller, start time.Time) *stats {
	st := &stats{}
	defer c.release()
	var buf []byte
	for ctx.Err() == nil {
		i, n := r.claim()
		if n == 0 {
			break
		}
		due := r.dueAt(start, i)
		if sleepCtx(ctx, time.Until(due)) != nil {
			break
		}
		sent := time.Now()
		st.record(kindSendLag, sent.Sub(due))
		buf = r.appendEnqueue(buf[:0], i, 1, sent.UnixNano())
		if r.place != nil {
			c.client = r.forJob(i)
		}
		_, _, lat, err := c.post(ctx, pathEnqueue, buf, requestTimeout)
		if err != nil {
			if isCancel(err) {
				break
			}
			// The job is lost, not retried later: an open-loop sender
			// does not resend behind the schedule.
			r.fail(st, err)
			continue
		}
		r.succeed()
		st.record(kindEnqueueReq, lat)
		r.ctr.enqueued.Add(1)
	}
	return st
}
