package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// drainGrace is how long e2e workers may keep draining after the
	// deadline of a duration-bound run.
	drainGrace = 5 * time.Second
	// stallTimeout stops the workers once producers are done and no job
	// has completed for this long although some were never fetched (e.g.
	// jobs lost by the server or leased by a failed fetch).
	stallTimeout = 5 * time.Second
	// maxConsecutiveErrors aborts the run when this many requests in a row
	// (across all goroutines) failed.
	maxConsecutiveErrors = 100
	// errBackoff is the pause after a failed request, so that a failing
	// server is not hammered in a tight loop.
	errBackoff = 10 * time.Millisecond
)

// API paths.
const (
	pathEnqueue      = "/api/v1/enqueue"
	pathEnqueueBatch = "/api/v1/enqueue/batch"
	pathFetch        = "/api/v1/fetch"
	pathAck          = "/api/v1/ack/"
	pathAckBatch     = "/api/v1/ack/batch"
)

// Run executes the benchmark described by cfg (after applying defaults) and
// returns its report.
//
// Cancelling ctx stops the run early; Run then returns the partial report
// with Interrupted set and a nil error. If the run is aborted because the
// server keeps failing, or no job could be enqueued at all, Run returns the
// partial report together with an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mode == ModeFixedRate && cfg.Jobs == 0 {
		// The schedule is fixed: a duration is a number of jobs.
		cfg.Jobs = max(1, int(math.Round(float64(cfg.Rate)*cfg.Duration.Seconds())))
	}
	r, err := newRunner(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	var cpu0 float64
	cpuOK := !cfg.SkipServerCPU
	if cpuOK {
		cpu0, cpuOK = r.serverCPU()
	}
	tl, st := r.execute()
	rep := r.buildReport(tl, st, ctx.Err() != nil)
	if cpuOK {
		if cpu1, ok := r.serverCPU(); ok {
			rep.setServerCPU(cpu1 - cpu0)
		}
	}
	return rep, r.finalError(rep)
}

// runner holds the state shared by all goroutines of one run.
type runner struct {
	cfg        Config
	clients    []*httpClient // one per server in cfg.URL (Placement: per node of the cluster)
	place      *placement    // nil unless cfg.Placement
	nextServer atomic.Int64
	ctr        counters
	runID      string
	runIDJSON  []byte
	queuesJSON [][]byte
	pad        []byte
	hostname   string
	out        *syncWriter // nil when cfg.Out is nil

	remaining     atomic.Int64    // jobs left to claim when cfg.Jobs > 0
	delivered     []atomic.Uint64 // bit i: job i was delivered (cfg.Jobs > 0)
	seq           atomic.Int64    // index of the next job
	producersDone atomic.Bool     // all producers have returned

	ctx        context.Context // cancelled on abort or by the caller
	cancel     context.CancelFunc
	workCtx    context.Context // cancelled when workers must stop draining
	workCancel context.CancelFunc

	abortOnce sync.Once
	abortErr  error
}

// timeline records the phase boundaries of a run.
type timeline struct {
	start     time.Time // producers started
	prodEnd   time.Time // all producers returned
	workStart time.Time // workers started (zero in enqueue mode)
}

func newRunner(ctx context.Context, cfg Config) (*runner, error) {
	conns := cfg.Producers + 4
	if cfg.Mode == ModeFixedRate {
		conns = cfg.Senders + 4
	}
	if cfg.Mode != ModeEnqueue {
		conns += cfg.Workers
		if cfg.AckBatch > 1 {
			conns += cfg.Workers // one acker per worker
		}
	}
	urls := cfg.urls()
	var shardHost []int
	if cfg.Placement {
		first, err := newHTTPClient(urls[0], 1, cfg.APIKey, cfg.TLSConfig)
		if err != nil {
			return nil, err
		}
		urls, shardHost, err = readPlacement(first)
		first.close()
		if err != nil {
			return nil, err
		}
	}
	var clients []*httpClient
	for _, u := range urls {
		client, err := newHTTPClient(u, conns, cfg.APIKey, cfg.TLSConfig)
		if err != nil {
			return nil, err
		}
		clients = append(clients, client)
	}
	id, err := newRunID()
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, clients: clients, runID: id}
	if shardHost != nil {
		r.place = newPlacement(shardHost, cfg.queueNames())
	}
	r.runIDJSON, _ = json.Marshal(id)
	for _, q := range cfg.queueNames() {
		b, _ := json.Marshal(q) // cannot fail for strings
		r.queuesJSON = append(r.queuesJSON, b)
	}
	r.pad = bytes.Repeat([]byte{'x'}, max(cfg.PayloadSize-payloadOverhead, 0))
	r.hostname, err = os.Hostname()
	if err != nil || r.hostname == "" {
		r.hostname = "corvo-bench"
	}
	if cfg.Out != nil {
		r.out = &syncWriter{w: cfg.Out}
	}
	r.remaining.Store(int64(cfg.Jobs))
	r.delivered = make([]atomic.Uint64, (cfg.Jobs+63)/64)
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.workCtx, r.workCancel = context.WithCancel(r.ctx)
	return r, nil
}

func newRunID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("bench: generate run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (r *runner) close() {
	r.workCancel()
	r.cancel()
	for _, c := range r.clients {
		c.close()
	}
}

// nextClient spreads producers and workers over the servers round-robin.
func (r *runner) nextClient() *httpClient {
	return r.clients[int(r.nextServer.Add(1)-1)%len(r.clients)]
}

// execute runs the phases of the configured mode.
func (r *runner) execute() (timeline, *stats) {
	var tl timeline
	all := &stats{}
	tl.start = time.Now()
	stopMonitor := r.startMonitor(tl.start)
	defer stopMonitor()
	switch r.cfg.Mode {
	case ModeEnqueue:
		all.merge(r.runProducers(tl.start))
		tl.prodEnd = time.Now()
	case ModeLifecycle:
		r.progressf("phase 1: enqueue\n")
		all.merge(r.runProducers(tl.start))
		tl.prodEnd = time.Now()
		tl.workStart = tl.prodEnd
		r.progressf("phase 2: process %d jobs\n", r.ctr.enqueued.Load())
		all.merge(r.runWorkers(tl.workStart))
	case ModeE2E:
		tl.workStart = tl.start
		if r.cfg.Client == ClientSDK {
			all.merge(r.runSDK(tl.start))
			tl.prodEnd = time.Now()
			break
		}
		workers := make(chan *stats, 1)
		go func() { workers <- r.runWorkers(tl.workStart) }()
		all.merge(r.runProducers(tl.start))
		tl.prodEnd = time.Now()
		all.merge(<-workers)
	case ModeFixedRate:
		// The workers start polling first; the schedule, and the run's
		// clock, start once the senders are connected.
		workers := make(chan *stats, 1)
		go func() { workers <- r.runWorkers(tl.start) }()
		start, st := r.runSenders()
		tl.start, tl.workStart = start, start
		all.merge(st)
		tl.prodEnd = time.Now()
		all.merge(<-workers)
	}
	return tl, all
}

// runProducers runs all producers until the job count or the deadline is
// reached and returns their merged stats.
func (r *runner) runProducers(start time.Time) *stats {
	ctx, cancel := r.producerContext(start)
	var (
		p         *pacer
		pacerDone <-chan struct{}
	)
	if r.cfg.Rate > 0 {
		// One token per request: Rate jobs/s in requests of EnqueueBatch.
		perSecond := float64(r.cfg.Rate) / float64(r.cfg.EnqueueBatch)
		p, pacerDone = startPacer(ctx, perSecond, r.cfg.Producers)
	}
	results := make([]*stats, r.cfg.Producers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = r.producer(ctx, p) })
	}
	wg.Wait()
	r.producersDone.Store(true)
	cancel()
	if p != nil {
		<-pacerDone
	}
	return mergeStats(results)
}

// runWorkers runs all workers until every enqueued job has been fetched and
// acked, the drain deadline passes, or the monitor detects a stall.
func (r *runner) runWorkers(start time.Time) *stats {
	ctx, cancel := r.workerContext(start)
	defer cancel()
	results := make([]*stats, r.cfg.Workers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = r.worker(ctx, i) })
	}
	wg.Wait()
	return mergeStats(results)
}

// producerContext bounds producers by the deadline of a duration run.
func (r *runner) producerContext(start time.Time) (context.Context, context.CancelFunc) {
	if r.cfg.Jobs == 0 {
		return context.WithDeadline(r.ctx, start.Add(r.cfg.Duration))
	}
	return context.WithCancel(r.ctx)
}

// workerContext bounds e2e workers of a duration run by the deadline plus
// the drain grace. Otherwise workers stop once all jobs are done, or when
// the monitor cancels workCtx after a stall.
func (r *runner) workerContext(start time.Time) (context.Context, context.CancelFunc) {
	if r.cfg.Mode == ModeE2E && r.cfg.Jobs == 0 {
		return context.WithDeadline(r.workCtx, start.Add(r.cfg.Duration+drainGrace))
	}
	return context.WithCancel(r.workCtx)
}

func mergeStats(list []*stats) *stats {
	all := &stats{}
	for _, s := range list {
		all.merge(s)
	}
	return all
}

// claim reserves the next enqueue request's jobs and returns the index of
// the first one and their number; n == 0 means the job budget is spent.
func (r *runner) claim() (first int64, n int) {
	n = r.cfg.EnqueueBatch
	if r.cfg.Jobs > 0 {
		left := r.remaining.Add(-int64(n))
		if left < 0 {
			n += int(left)
		}
		if n <= 0 {
			return 0, 0
		}
	}
	return r.seq.Add(int64(n)) - int64(n), n
}

// fetchingDone reports whether workers should stop fetching: ctx ended, or
// producers are done and every enqueued job has been fetched.
func (r *runner) fetchingDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	return r.producersDone.Load() && r.ctr.fetched.Load() >= r.ctr.enqueued.Load()
}

// ErrRefused is the error of a run the server refused (HTTP 401 or 403):
// no API key, a wrong one, or one without the permissions the mode needs.
var ErrRefused = errors.New("bench: the server refused the API key")

// fail counts a failed request and aborts the run after too many failures
// in a row, or at once when the server refuses the key.
func (r *runner) fail(st *stats, err error) {
	r.ctr.errors.Add(1)
	st.lastErr = err
	var se *statusError
	if errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden) {
		// The key is missing, wrong or too weak: no later request can do
		// better.
		r.abort(fmt.Errorf("%w: %w", ErrRefused, err))
		return
	}
	if n := r.ctr.consec.Add(1); n >= maxConsecutiveErrors {
		r.abort(fmt.Errorf("bench: aborting after %d consecutive failed requests: %w", n, err))
	}
}

// succeed resets the consecutive failure count.
func (r *runner) succeed() {
	if r.ctr.consec.Load() != 0 {
		r.ctr.consec.Store(0)
	}
}

func (r *runner) abort(err error) {
	r.abortOnce.Do(func() {
		r.abortErr = err
		r.cancel()
	})
}

// isCancel reports whether err stems from a cancelled or expired context.
func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// finalError decides whether the run as a whole failed.
func (r *runner) finalError(rep *Report) error {
	// All goroutines that may abort have returned, so abortErr is stable.
	if r.abortErr != nil {
		return r.abortErr
	}
	if rep.Enqueued == 0 && rep.Errors > 0 && !rep.Interrupted {
		return fmt.Errorf("bench: no job could be enqueued (%d errors, last: %s)", rep.Errors, rep.LastError)
	}
	return nil
}

// progressf writes a progress line if an output is configured.
func (r *runner) progressf(format string, args ...any) {
	if r.out != nil {
		r.out.printf(format, args...)
	}
}
