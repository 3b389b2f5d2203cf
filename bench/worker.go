package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// emptyObject is the body of a single ack without result.
var emptyObject = []byte("{}")

// worker fetches jobs until every enqueued job has been fetched or ctx
// ends. Each fetch names every queue, the list rotated by one queue from
// the previous fetch. With cfg.AckBatch == 1 it acks each job right after fetching it;
// otherwise it hands the jobs to its own acker goroutine, which batches them
// without holding them across long-poll fetches.
func (r *runner) worker(ctx context.Context, id int) *stats {
	st := &stats{}
	client := r.nextClient()
	if r.place != nil {
		node, _ := r.workerQueues(id)
		client = r.clients[node]
	}
	c := newCaller(client, &r.ctr)
	defer c.release()
	var a *acker
	if r.cfg.AckBatch > 1 {
		a = r.startAcker(client)
	}
	bodies := r.fetchBodies(id)
	var ackFetch [][]byte
	if r.cfg.AckFetch && a == nil && r.cfg.FetchBatch <= 1 {
		ackFetch = r.ackFetchBodies(bodies)
	}
	timeout := time.Duration(r.cfg.FetchTimeout)*time.Second + requestTimeout
	for n := 0; !r.fetchingDone(ctx); n++ {
		c.client = client // an ack may have gone elsewhere
		status, resp, lat, err := c.post(ctx, pathFetch, bodies[n%len(bodies)], timeout)
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
		if status == http.StatusNoContent {
			continue // long-poll timeout: not a fetch latency sample
		}
		st.record(kindFetchReq, lat)
		jobs := r.received(st, resp, time.Now())
		if a != nil {
			done := 0
			for done < len(jobs) && r.work(ctx) == nil {
				done++ // stopped mid-job: its lease runs out
			}
			a.in <- jobs[:done]
			continue
		}
		for k := 0; k < len(jobs); k++ {
			if r.work(ctx) != nil {
				break // stopped mid-job: its lease runs out
			}
			if next := r.ackOne(c, st, jobs[k], ackFetch, n+k); next != nil {
				jobs = append(jobs, next...)
			}
		}
	}
	if a != nil {
		st.merge(a.stop())
	}
	return st
}

// received decodes a fetch answer received at recv and records the
// enqueue-to-start latency of the jobs. A job of the run delivered again
// is counted as a duplicate, not as fetched (the run waits for every
// distinct job) nor, once acked, as completed.
func (r *runner) received(st *stats, body []byte, recv time.Time) []fetchedJob {
	jobs, err := r.decodeFetch(body, make([]fetchedJob, 0, r.cfg.FetchBatch))
	if err != nil {
		r.fail(st, err)
		return nil
	}
	var own, stale int64
	for k := range jobs {
		j := &jobs[k]
		if !j.own {
			stale++
			continue
		}
		if r.deliveredBefore(j.index) {
			r.ctr.dupes.Add(1)
			j.dup = true
			continue
		}
		own++
		if j.sentNs > 0 {
			st.record(kindToStart, recv.Sub(time.Unix(0, j.sentNs)))
		}
	}
	r.ctr.fetched.Add(own)
	if stale > 0 {
		r.ctr.stale.Add(stale)
	}
	return jobs
}

// deliveredBefore marks job i as delivered and reports whether it already
// was (a redelivery: the peers' harness counts these as duplicates_seen).
// Without a job count (a duration run) nothing is tracked.
func (r *runner) deliveredBefore(i int64) bool {
	if i < 0 || i >= int64(len(r.delivered))*64 {
		return false
	}
	bit := uint64(1) << (i % 64)
	return r.delivered[i/64].Or(bit)&bit != 0
}

// ackOne acks job j; with ackFetch (the worker's ack bodies carrying a
// fetch, one per queue rotation) it uses the n-th of them and returns the
// next jobs the ack brought.
func (r *runner) ackOne(c *caller, st *stats, j fetchedJob, ackFetch [][]byte, n int) []fetchedJob {
	if r.place != nil {
		if to := r.forJobID(j.id); to != nil {
			c.client = to
		}
	}
	body := emptyObject
	if ackFetch != nil {
		body = ackFetch[n%len(ackFetch)]
	}
	_, resp, lat, err := c.post(r.ctx, pathAck+url.PathEscape(j.id), body, requestTimeout)
	if err != nil {
		if !isCancel(err) {
			r.fail(st, err)
		}
		return nil
	}
	r.succeed()
	st.record(kindAckReq, lat)
	done := time.Now()
	r.completed(st, []fetchedJob{j}, nil, done)
	if ackFetch == nil {
		return nil
	}
	return r.received(st, resp, done)
}

func (r *runner) ackBatch(c *caller, st *stats, jobs []fetchedJob) {
	c.scratch = appendAckBatch(c.scratch[:0], jobs)
	_, resp, lat, err := c.post(r.ctx, pathAckBatch, c.scratch, requestTimeout)
	if err != nil {
		if !isCancel(err) {
			r.fail(st, err)
		}
		return
	}
	r.succeed()
	st.record(kindAckReq, lat)
	done := time.Now()
	var ar corvo.AckBatchResult
	if err := json.Unmarshal(resp, &ar); err != nil {
		r.fail(st, fmt.Errorf("decode ack batch response: %w", err))
		return
	}
	var failed map[string]bool
	for _, e := range ar.Errors {
		if failed == nil {
			failed = make(map[string]bool, len(ar.Errors))
		}
		failed[e.JobID] = true
		r.ctr.errors.Add(1)
		st.lastErr = errors.New("ack " + e.JobID + ": " + e.Code + ": " + e.Error)
	}
	r.completed(st, jobs, failed, done)
}

// completed accounts for acked jobs (except those in failed) at time done.
func (r *runner) completed(st *stats, jobs []fetchedJob, failed map[string]bool, done time.Time) {
	var own int64
	for _, j := range jobs {
		if !j.own || j.dup || failed[j.id] {
			continue
		}
		own++
		if j.sentNs > 0 {
			st.record(kindToAck, done.Sub(time.Unix(0, j.sentNs)))
		}
	}
	if own > 0 {
		r.ctr.completed.Add(own)
		st.lastAck = done
	}
}

// work is a job's handler (Config.JobTime): a sleep, ended early by ctx.
func (r *runner) work(ctx context.Context) error {
	if r.cfg.JobTime <= 0 {
		return nil
	}
	if r.cfg.sleep != nil {
		return r.cfg.sleep(ctx, r.cfg.JobTime)
	}
	return sleepCtx(ctx, r.cfg.JobTime)
}
