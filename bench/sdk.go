package bench

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// Client kinds accepted in Config.Client.
const (
	ClientHTTP = "http" // the load generator's own requests (default)
	ClientSDK  = "sdk"  // the Go SDK's Client.Enqueue and Worker, untuned
)

// runSDK is mode e2e through the Go SDK as an application would use it:
// Producers goroutines calling Client.Enqueue (coalesced by the SDK) and
// one Worker of Workers slots over every queue (batched acks that fetch),
// with no tuning; with Rate, the calls are paced to Rate a second. Request latencies are not recorded (the SDK sends
// them); a job counts as completed when its handler returns (the ack
// follows in the SDK).
func (r *runner) runSDK(start time.Time) *stats {
	opts := []corvo.Option{}
	if r.cfg.APIKey != "" {
		opts = append(opts, corvo.WithAPIKey(r.cfg.APIKey))
	}
	if r.cfg.TLSConfig != nil {
		opts = append(opts, corvo.WithTLSConfig(r.cfg.TLSConfig))
	}
	c := corvo.New(r.cfg.URL, opts...)
	w := corvo.NewWorker(c, corvo.WorkerOptions{Concurrency: r.cfg.Workers, Hostname: r.hostname,
		FetchTimeout: time.Duration(r.cfg.FetchTimeout) * time.Second})
	wst := &stats{}
	var wmu sync.Mutex
	for _, q := range r.cfg.queueNames() {
		w.Register(q, func(ctx context.Context, j *corvo.JobContext) (any, error) {
			fresh := r.sdkStarted(wst, &wmu, j)
			if err := r.work(ctx); err != nil {
				return nil, err
			}
			if fresh {
				wmu.Lock()
				wst.lastAck = time.Now()
				wmu.Unlock()
				r.ctr.completed.Add(1)
			}
			return nil, nil
		})
	}
	wctx, wcancel := r.workerContext(start)
	defer wcancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(wctx)
	}()
	pctx, pcancel := r.producerContext(start)
	var (
		p         *pacer
		pacerDone <-chan struct{}
	)
	if r.cfg.Rate > 0 { // --rate: Rate calls a second over all producers
		p, pacerDone = startPacer(pctx, float64(r.cfg.Rate), r.cfg.Producers)
	}
	results := make([]*stats, r.cfg.Producers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = r.sdkProducer(pctx, c, p) })
	}
	wg.Wait()
	r.producersDone.Store(true)
	pcancel()
	if p != nil {
		<-pacerDone
	}
	// The workers stop once every job enqueued is completed (or the
	// monitor or a deadline ends workCtx).
	for wctx.Err() == nil && r.ctr.completed.Load() < r.ctr.enqueued.Load() {
		select {
		case <-wctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	wcancel()
	<-done
	all := mergeStats(results)
	all.merge(wst)
	return all
}

func (r *runner) sdkProducer(ctx context.Context, c *corvo.Client, p *pacer) *stats {
	st := &stats{}
	queues := r.cfg.queueNames()
	var buf []byte
	for ctx.Err() == nil {
		i, n := r.claim()
		if n == 0 {
			break
		}
		if p != nil && !p.take(ctx) {
			break
		}
		sent := time.Now()
		buf = r.appendPayload(buf[:0], i, sent.UnixNano())
		_, err := c.Enqueue(ctx, corvo.EnqueueRequest{Queue: queues[i%int64(len(queues))], Payload: json.RawMessage(buf)})
		if err != nil {
			if !isCancel(err) {
				r.fail(st, err)
			}
			continue
		}
		r.succeed()
		r.ctr.enqueued.Add(1)
		st.record(kindEnqueueReq, time.Since(sent))
	}
	return st
}

// sdkStarted accounts for a job the SDK worker handed its handler: false
// for a job of another run or one delivered before (not to be counted as
// completed).
func (r *runner) sdkStarted(st *stats, mu *sync.Mutex, j *corvo.JobContext) bool {
	var p struct {
		T int64  `json:"t"`
		R string `json:"r"`
		I int64  `json:"i"`
	}
	if json.Unmarshal(j.Payload, &p) != nil || p.R != r.runID {
		r.ctr.stale.Add(1)
		return false
	}
	if r.deliveredBefore(p.I) {
		r.ctr.dupes.Add(1)
		return false
	}
	now := time.Now()
	r.ctr.fetched.Add(1)
	mu.Lock()
	st.record(kindToStart, now.Sub(time.Unix(0, p.T)))
	mu.Unlock()
	return true
}
