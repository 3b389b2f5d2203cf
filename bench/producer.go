package bench

import (
	"context"
	"encoding/json"
	"time"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// producer enqueues jobs until its budget is spent or ctx ends. p, if not
// nil, paces the requests.
func (r *runner) producer(ctx context.Context, p *pacer) *stats {
	st := &stats{}
	c := newCaller(r.nextClient(), &r.ctr)
	defer c.release()
	path := pathEnqueue
	if r.cfg.EnqueueBatch > 1 {
		path = pathEnqueueBatch
	}
	var buf []byte
	for ctx.Err() == nil {
		first, n := r.claim()
		if n == 0 {
			break
		}
		if p != nil && !p.take(ctx) {
			break
		}
		buf = r.appendEnqueue(buf[:0], first, n, time.Now().UnixNano())
		if r.place != nil { // a batch goes where its first job's queue is
			c.client = r.forJob(first)
		}
		_, body, lat, err := c.post(ctx, path, buf, requestTimeout)
		if err != nil {
			if isCancel(err) {
				break
			}
			r.fail(st, err)
			if sleepCtx(ctx, errBackoff) != nil {
				break
			}
			continue
		}
		r.succeed()
		st.record(kindEnqueueReq, lat)
		r.ctr.enqueued.Add(int64(r.accepted(body, n)))
	}
	return st
}

// accepted returns how many of the n jobs of an enqueue request the server
// accepted, judged by the job_ids of a batch answer.
func (r *runner) accepted(body []byte, n int) int {
	if r.cfg.EnqueueBatch == 1 {
		return 1
	}
	var resp corvo.BatchEnqueued
	if json.Unmarshal(body, &resp) != nil || resp.JobIDs == nil {
		return n
	}
	return len(resp.JobIDs)
}
