package corvo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Handler processes one job. Return a result (any JSON value) to ack it,
// or an error to fail it (the server decides about retries). ctx is done
// when the server cancels the job or the worker's lease on it is lost.
type Handler func(ctx context.Context, job *JobContext) (result any, err error)

// WorkerOptions configures a Worker; zero values take the defaults.
type WorkerOptions struct {
	ID                string        // default: hostname-pid
	Hostname          string        // default: os.Hostname()
	Concurrency       int           // jobs at once (default 10)
	FetchTimeout      time.Duration // long-poll (default 30s)
	HeartbeatInterval time.Duration // default 15s; keep it well under the jobs' lease
	ShutdownGrace     time.Duration // how long a drain waits for handlers (default 30s)
	// ContinueOverBudget keeps a job's context alive when a heartbeat
	// says the job is past a per-job budget: the handler asks
	// JobContext.BudgetExceeded instead. Off: the context is cancelled
	// with the cause ErrBudgetExceeded.
	ContinueOverBudget bool
	// PrefetchUnder: a slot whose handler took at most this long holds its
	// next job while it runs one (its ack fetches one job more), so it
	// starts that job the moment the handler returns instead of after the
	// ack's round trip. After a longer handler the slot holds nothing: a
	// held job waits for the handler before it (its lease kept by the
	// heartbeats) for at most 4×PrefetchUnder: a handler that runs longer
	// has the slot give its held jobs back (unclaimed, their attempts not
	// counted) for other workers to run. Default 50ms; negative: never
	// hold.
	PrefetchUnder time.Duration
}

// Worker fetches jobs for its registered queues and runs their handlers.
type Worker struct {
	c        *Client
	opt      WorkerOptions
	handlers map[string]Handler

	mu       sync.Mutex
	inflight map[string]*JobContext
	slots    chan struct{}
	// hbRound is closed when the heartbeat in flight is answered (nil:
	// none in flight): a finished job's usage waits for it (usageLeft).
	hbRound chan struct{}

	// groups are Run's queues grouped by node, a poller each (groups.go);
	// draining is set when Run's context ends (acks then fetch nothing
	// more); plainAcks when the server took no fetch with an ack (an
	// older server), plainBatch when it took none with an ack batch. comp
	// batches the acks (completer.go).
	groups     atomic.Pointer[[]*fetchGroup]
	base       context.Context // every job's context derives from it (Run's)
	run        context.Context // Run's: done once the worker drains
	draining   atomic.Bool
	plainAcks  atomic.Bool
	plainBatch atomic.Bool
	comp       *completer
}

// NewWorker returns a worker using client c.
func NewWorker(c *Client, opt WorkerOptions) *Worker {
	if opt.Hostname == "" {
		opt.Hostname, _ = os.Hostname()
	}
	if opt.ID == "" {
		opt.ID = fmt.Sprintf("%s-%d", opt.Hostname, os.Getpid())
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = 10
	}
	if opt.FetchTimeout <= 0 {
		opt.FetchTimeout = 30 * time.Second
	}
	if opt.HeartbeatInterval <= 0 {
		opt.HeartbeatInterval = 15 * time.Second
	}
	if opt.ShutdownGrace <= 0 {
		opt.ShutdownGrace = 30 * time.Second
	}
	if opt.PrefetchUnder == 0 {
		opt.PrefetchUnder = 50 * time.Millisecond
	}
	return &Worker{c: c, opt: opt, handlers: map[string]Handler{}, inflight: map[string]*JobContext{}}
}

// Register sets the handler of a queue (before Run).
func (w *Worker) Register(queue string, h Handler) { w.handlers[queue] = h }

// ID is the worker's ID as the server sees it.
func (w *Worker) ID() string { return w.opt.ID }

// JobContext is a running job: its data plus ways to report progress and
// checkpoints.
type JobContext struct {
	FetchedJob
	w      *Worker
	g      *fetchGroup // the queues its ack fetches the slot's next job from
	ctx    context.Context
	cancel context.CancelCauseFunc
	// started: its handler was called (guarded by w.mu, as w.inflight):
	// at the end of the drain's grace a started job is failed, one held
	// and never started is given back.
	started bool

	mu         sync.Mutex
	progress   any
	checkpoint any
	exit       bool
	// usage is the attempt's usage so far (ReportUsage); hbUsage what a
	// heartbeat the server applied reported of it, hbSent what the one in
	// flight reports.
	usage, hbUsage, hbSent Usage
	reported               bool
	overBudget             atomic.Bool
}

// ErrBudgetExceeded is the cause of a job context cancelled because a
// heartbeat said the job's cost is past a per-job budget (unless
// WorkerOptions.ContinueOverBudget); a handler that returns the
// context's error fails the attempt with it.
var ErrBudgetExceeded = errors.New("corvo: job budget exceeded")

// BudgetExceeded reports whether a heartbeat has said the job's cost (all
// its attempts) is past a per-job budget covering it.
func (j *JobContext) BudgetExceeded() bool { return j.overBudget.Load() }

// ErrCancelled is the cause of a job context the server cancelled.
var ErrCancelled = errors.New("corvo: job cancelled")

// ErrLeaseLost is the cause of a job context whose lease another worker
// now holds.
var ErrLeaseLost = errors.New("corvo: job lease lost")

// Decode unmarshals the payload.
func (j *JobContext) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

// Progress records progress; it travels with the next heartbeat.
func (j *JobContext) Progress(v any) {
	j.mu.Lock()
	j.progress = v
	j.mu.Unlock()
}

// Checkpoint stores resumable state on the server now (it extends the lease
// too, and carries the progress recorded since the last heartbeat). A
// retried job gets it back as FetchedJob.Checkpoint.
func (j *JobContext) Checkpoint(ctx context.Context, v any) error {
	j.mu.Lock()
	j.checkpoint = v
	progress := j.progress
	j.mu.Unlock()
	st, err := j.w.c.heartbeat(ctx, j.w.opt.ID, map[string]HeartbeatJob{j.JobID: {Checkpoint: v, Progress: progress, Attempt: j.Attempt}})
	if err != nil {
		return err
	}
	j.w.apply(st)
	return nil
}

// ReportUsage adds what an LLM call of the job used to the attempt's
// usage: heartbeats carry the running total (the server keeps the
// attempt's latest), and the job's ack or fail carries what no applied
// heartbeat has reported yet, so the server's totals come out exact.
func (j *JobContext) ReportUsage(u Usage) {
	j.mu.Lock()
	j.usage.Add(u)
	j.reported = true
	j.mu.Unlock()
}

// Usage is the attempt's usage reported so far.
func (j *JobContext) Usage() Usage {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.usage
}

// usageLeft is what the job's ack or fail must report: the usage no
// applied heartbeat reported (nil: none). It first waits for a heartbeat
// in flight (round), so that what it reported is known.
func (j *JobContext) usageLeft(ctx context.Context, round chan struct{}) *Usage {
	if round != nil {
		select {
		case <-round:
		case <-ctx.Done():
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.reported {
		return nil
	}
	u := j.usage
	u.InputTokens -= j.hbUsage.InputTokens
	u.OutputTokens -= j.hbUsage.OutputTokens
	u.CacheCreationTokens -= j.hbUsage.CacheCreationTokens
	u.CacheReadTokens -= j.hbUsage.CacheReadTokens
	u.CostUSD -= j.hbUsage.CostUSD
	u.LatencyMs -= j.hbUsage.LatencyMs
	if u.CostUSD < 0 { // float rounding of a difference that is zero
		u.CostUSD = 0
	}
	if u == (Usage{Model: u.Model, Provider: u.Provider}) && j.hbUsage != (Usage{}) {
		return nil // the heartbeats reported it all
	}
	return &u
}

// ExitChain makes the ack of a chain step skip the remaining steps.
func (j *JobContext) ExitChain() {
	j.mu.Lock()
	j.exit = true
	j.mu.Unlock()
}

// SignalContext returns a context cancelled by SIGTERM or SIGINT: pass it
// to Run so that Kubernetes' SIGTERM drains the worker.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
}

// Run fetches and processes jobs until ctx is done, then drains: it stops
// fetching, lets running handlers finish for up to ShutdownGrace, and fails
// the rest with "worker_shutdown" and their last checkpoint, so the server
// retries them from there (a job a slot held and never started is given
// back instead, its attempt not counted).
func (w *Worker) Run(ctx context.Context) error {
	if len(w.handlers) == 0 {
		return errors.New("corvo: no handler registered")
	}
	queues := make([]string, 0, len(w.handlers))
	for q := range w.handlers {
		queues = append(queues, q)
	}
	w.run = ctx
	stopWatch := context.AfterFunc(ctx, func() { w.draining.Store(true) })
	defer stopWatch()
	w.slots = make(chan struct{}, w.opt.Concurrency)
	w.comp = newCompleter(w)
	base, cancelAll := context.WithCancelCause(context.Background())
	defer cancelAll(nil)
	w.base = base

	hbDone := make(chan struct{})
	hbCtx, stopHB := context.WithCancel(context.Background())
	go func() { defer close(hbDone); w.heartbeatLoop(hbCtx) }()

	var wg sync.WaitGroup // the slots running jobs
	w.placementWait(ctx)
	groups := w.c.groupQueues(queues, w.opt.Concurrency)
	for ctx.Err() == nil {
		current := groups // the completer reads it (Worker.keep)
		w.groups.Store(&current)
		done := make(chan struct{}) // closed when the grouping changes
		var pollers sync.WaitGroup
		for _, g := range current {
			pollers.Go(func() { w.poll(ctx, done, g, len(current) > 1, &wg) })
		}
		groups = w.regroup(ctx, queues, current)
		close(done)
		pollers.Wait()
	}
	// Drain.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.opt.ShutdownGrace):
		w.failRemaining()
		cancelAll(errors.New("corvo: worker shutting down"))
		<-done
	}
	w.comp.stop() // every slot has had its ack answered
	stopHB()
	<-hbDone
	return nil
}

// startAll registers jobs of group g as running (heartbeats carry them
// from now on) and returns their contexts.
func (w *Worker) startAll(jobs []FetchedJob, g *fetchGroup) []*JobContext {
	if len(jobs) == 0 {
		return nil
	}
	jcs := make([]*JobContext, len(jobs))
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, j := range jobs {
		ctx, cancel := context.WithCancelCause(w.base)
		jcs[i] = &JobContext{FetchedJob: j, w: w, g: g, ctx: ctx, cancel: cancel}
		w.inflight[j.JobID] = jcs[i]
	}
	return jcs
}

// begin marks a job as started, unless the drain took it out of the
// running set already (then it must not run).
func (w *Worker) begin(jc *JobContext) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight[jc.JobID] != jc {
		return false
	}
	jc.started = true
	return true
}

// finish takes a job out of the running set (no heartbeat started from
// now on carries it) and returns the heartbeat in flight, which may.
func (w *Worker) finish(jc *JobContext) (bool, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.inflight[jc.JobID]
	delete(w.inflight, jc.JobID)
	return ok, w.hbRound
}

// runSlot runs a slot's jobs: jc, then the ones its acks bring. Each ack
// (batched with the acks of other slots that finish at about the same
// time: completer.go) fetches the slot's next job, and, after a handler
// that took at most PrefetchUnder, one more that the slot holds while it
// runs the next: the slot then starts it as soon as that handler returns,
// while its ack is in flight. A slot has at most one ack in flight; it
// ends when it has no job left to run (its poller fetches for it again).
func (w *Worker) runSlot(jc *JobContext) {
	var ready []*JobContext         // claimed for the slot, not started
	var answer <-chan []*JobContext // the slot's ack in flight
	for {
		if jc != nil {
			var a *Ack
			var took time.Duration
			if len(ready) > 0 || answer != nil {
				var gaveBack bool
				if a, took, gaveBack = w.handleHolding(jc, ready, answer); gaveBack {
					ready, answer = nil, nil
				}
			} else {
				a, took = w.handle(jc)
			}
			if a != nil {
				if answer != nil {
					ready, answer = append(ready, <-answer...), nil
				}
				want := 0
				if len(ready) == 0 {
					want++ // the next job
				}
				if len(ready) <= 1 && w.opt.PrefetchUnder >= 0 && took <= w.opt.PrefetchUnder {
					want++ // and one to hold
				}
				ch := w.comp.ack(*a, jc.g, want)
				if len(ready) == 0 {
					ready = <-ch
				} else {
					answer = ch
				}
			}
		}
		jc = nil
		for jc == nil && len(ready) > 0 {
			next := ready[0]
			ready = ready[1:]
			if w.startable(next) {
				jc = next
			}
		}
		if jc == nil {
			if answer == nil {
				return
			}
			ready, answer = <-answer, nil
		}
	}
}

// handleHolding runs jc while its slot holds jobs (ready, and those its ack
// in flight brings): when the handler runs past 4×PrefetchUnder (a job
// slower than the ones that made the slot hold) the held jobs are given
// back (unclaimed, their attempts not counted) for other workers to run,
// instead of waiting for it; it reports whether they were.
func (w *Worker) handleHolding(jc *JobContext, ready []*JobContext, answer <-chan []*JobContext) (*Ack, time.Duration, bool) {
	var mu sync.Mutex
	returned, taken := false, false
	back := make(chan struct{}) // closed once they are given back
	t := time.AfterFunc(4*w.opt.PrefetchUnder, func() {
		mu.Lock()
		if returned {
			mu.Unlock()
			return
		}
		taken = true
		mu.Unlock()
		defer close(back)
		held := ready
		if answer != nil {
			held = append(held, <-answer...)
		}
		w.giveBack(held)
	})
	a, took := w.handle(jc)
	mu.Lock()
	returned = true
	gave := taken
	mu.Unlock()
	t.Stop()
	if gave {
		<-back
	}
	return a, took, gave
}

// giveBack takes jobs claimed for a slot out of the running set and hands
// them back to the server unstarted, but for those it moved on from
// (cancelled, lease lost) and those the drain failed already.
func (w *Worker) giveBack(jcs []*JobContext) {
	var back []FetchedJob
	for _, jc := range jcs {
		cause := context.Cause(jc.ctx)
		moved := errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrLeaseLost)
		if ok, _ := w.finish(jc); ok && !moved {
			back = append(back, jc.FetchedJob)
		}
	}
	if len(back) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.handBack(ctx, back)
}

// startable reports whether a job claimed for a slot may start; one that
// may not is taken out of the running set: dropped when the server moved
// on from it (cancelled, lease lost), given back when the worker drains.
// A held job's lease is kept by the heartbeats like a running one's, so
// it waits at most for the handler before it; one a heartbeat found over
// its budget starts with its context done, as a running one would see it.
func (w *Worker) startable(jc *JobContext) bool {
	cause := context.Cause(jc.ctx)
	moved := errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrLeaseLost)
	// Run's context, not only draining (set by a goroutine once it is
	// done): a job held when the drain begins never starts.
	if w.run.Err() == nil && !w.draining.Load() && !moved {
		return true
	}
	w.giveBack([]*JobContext{jc})
	return false
}

// handle runs a job and reports its outcome: a failure at once, an ack
// returned for the slot to send (nil: nothing to ack), with how long the
// handler took.
func (w *Worker) handle(jc *JobContext) (*Ack, time.Duration) {
	if !w.begin(jc) {
		return nil, 0 // failed or given back by the drain already
	}
	h := w.handlers[jc.Queue]
	start := time.Now()
	result, err := w.safeCall(h, jc)
	took := time.Since(start)
	ok, round := w.finish(jc)
	if !ok {
		return nil, took // failed by the drain already
	}
	if cause := context.Cause(jc.ctx); errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrLeaseLost) {
		return nil, took // the server has moved on: nothing to report
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	usage := jc.usageLeft(ctx, round)
	if err != nil && errors.Is(err, context.Canceled) && errors.Is(context.Cause(jc.ctx), ErrBudgetExceeded) {
		err = ErrBudgetExceeded // the failure says why
	}
	if err != nil {
		jc.mu.Lock()
		cp := jc.checkpoint
		jc.mu.Unlock()
		var pe *providerError
		_, _ = w.c.Fail(ctx, jc.JobID, Failure{Error: err.Error(), Checkpoint: cp, WorkerID: w.opt.ID, Attempt: jc.Attempt, Usage: usage,
			ProviderError: errors.As(err, &pe)})
		return nil, took
	}
	a := Ack{JobID: jc.JobID, WorkerID: w.opt.ID, Attempt: jc.Attempt, Usage: usage}
	if result != nil {
		// Encoded here, so that a result that cannot be is this job's
		// failure to ack (as a lone ack's would be), never its batch's.
		raw, err := json.Marshal(result)
		if err != nil {
			return nil, took
		}
		a.Result = json.RawMessage(raw)
	}
	jc.mu.Lock()
	if jc.exit {
		a.StepStatus = "exit"
	}
	jc.mu.Unlock()
	return &a, took
}

// running is how many jobs the worker runs: handlers running, and jobs
// claimed for a slot that has yet to start them (their acks are to come).
func (w *Worker) running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inflight)
}

// safeCall runs a handler, turning a panic into a failure with its stack.
func (w *Worker) safeCall(h Handler, jc *JobContext) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return h(jc.ctx, jc)
}

// heartbeatLoop sends one heartbeat for every running job each interval.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.opt.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		jobs, ctxs, round := w.heartbeatBody()
		if len(jobs) == 0 {
			continue
		}
		st, err := w.c.heartbeat(ctx, w.opt.ID, jobs)
		if err == nil {
			for id, s := range st {
				if jc := ctxs[id]; jc != nil && s.Status == "ok" {
					jc.mu.Lock()
					jc.hbUsage = jc.hbSent
					jc.mu.Unlock()
				}
			}
			w.apply(st)
		}
		w.mu.Lock()
		w.hbRound = nil
		w.mu.Unlock()
		close(round)
	}
}

// heartbeatBody is the next heartbeat: every running job, with its
// progress, checkpoint and usage so far; it opens a round (closed once
// the heartbeat is answered).
func (w *Worker) heartbeatBody() (map[string]HeartbeatJob, map[string]*JobContext, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	jobs := make(map[string]HeartbeatJob, len(w.inflight))
	ctxs := make(map[string]*JobContext, len(w.inflight))
	for id, jc := range w.inflight {
		jc.mu.Lock()
		hj := HeartbeatJob{Progress: jc.progress, Checkpoint: jc.checkpoint, Attempt: jc.Attempt}
		if jc.reported {
			u := jc.usage
			hj.Usage, jc.hbSent = &u, u
		}
		jc.mu.Unlock()
		jobs[id], ctxs[id] = hj, jc
	}
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	w.hbRound = make(chan struct{})
	return jobs, ctxs, w.hbRound
}

// apply acts on heartbeat answers: cancelled or lost jobs get their
// context cancelled, and so do jobs past a per-job budget (unless
// ContinueOverBudget), which BudgetExceeded reports from then on.
func (w *Worker) apply(st map[string]StatusAnswer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, s := range st {
		jc, ok := w.inflight[id]
		if !ok {
			continue
		}
		if s.BudgetExceeded {
			jc.overBudget.Store(true)
			if !w.opt.ContinueOverBudget {
				jc.cancel(ErrBudgetExceeded)
			}
		}
		switch s.Status {
		case "cancel":
			jc.cancel(ErrCancelled)
		case "lost", "not_found":
			jc.cancel(ErrLeaseLost)
		}
	}
}

// failRemaining fails the jobs still running at the end of the grace
// period, keeping their checkpoints, and gives back the ones slots held
// and never started (their attempts not counted, as at the drain's start).
func (w *Worker) failRemaining() {
	w.mu.Lock()
	left := make([]*JobContext, 0, len(w.inflight))
	var unstarted []FetchedJob
	for id, jc := range w.inflight {
		if jc.started {
			left = append(left, jc)
		} else {
			unstarted = append(unstarted, jc.FetchedJob)
		}
		delete(w.inflight, id)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.handBack(ctx, unstarted)
	for _, jc := range left {
		jc.mu.Lock()
		cp := jc.checkpoint
		jc.mu.Unlock()
		_, _ = w.c.Fail(ctx, jc.JobID, Failure{Error: "worker_shutdown", Checkpoint: cp, WorkerID: w.opt.ID, Attempt: jc.Attempt, Usage: jc.usageLeft(ctx, nil)})
	}
}
