// Package history keeps, per node and in memory, what the dashboards plot
// over time: every queue's rates and counts in 10-second buckets for the
// last 24 hours, and its wait and run times over the last 5 minutes (p50,
// p95, p99). It is fed by what the node already sees: the queue counters
// of the shards it hosts, sampled every bucket (Sample, from the gateway),
// and the job changes of every committed Update (Applied, from the shard
// host). Nothing of it is replicated or persisted: each node hosting a
// shard records that shard's history itself, a node asked about a shard
// it does not host asks one that does (the gateway merges the parts), and
// a restarted node starts an empty history.
//
// Memory: a queue costs one 36-byte point per bucket in which its numbers
// changed (a steady or idle queue costs nothing more), at most 8,640 a day;
// MaxQueues bounds how many queues are recorded per shard. Latency keeps,
// per queue, one sketch of each kind per bucket of the window.
package history

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// Defaults of Config.
const (
	// Step is the width of a bucket; it is fixed.
	Step = 10 * time.Second
	// KeepDefault is how long points are kept.
	KeepDefault = 24 * time.Hour
	// WindowDefault is the span the latency quantiles are taken over.
	WindowDefault = 5 * time.Minute
	// MaxQueuesDefault bounds the queues recorded per shard (a busy queue
	// costs up to 8,640 points, about 300 KiB, a day).
	MaxQueuesDefault = 500
)

// Config configures a Recorder.
type Config struct {
	Shards    int           // the cluster's shard count
	Keep      time.Duration // default KeepDefault; a multiple of Step
	Window    time.Duration // default WindowDefault; a multiple of Step
	MaxQueues int           // default MaxQueuesDefault
	// Now is the clock the latency window ends at and the bucket a sample
	// goes to when not given; nil: time.Now.
	Now func() time.Time
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Keep == 0 {
		c.Keep = KeepDefault
	}
	if c.Window == 0 {
		c.Window = WindowDefault
	}
	if c.MaxQueues == 0 {
		c.MaxQueues = MaxQueuesDefault
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks a defaulted config.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1:
		return fmt.Errorf("history: shards must be positive, got %d", c.Shards)
	case c.Keep < Step || c.Keep%Step != 0:
		return fmt.Errorf("history: keep must be a positive multiple of %s, got %s", Step, c.Keep)
	case c.Window < Step || c.Window%Step != 0 || c.Window > c.Keep:
		return fmt.Errorf("history: window must be a multiple of %s within keep, got %s", Step, c.Window)
	case c.MaxQueues < 1:
		return fmt.Errorf("history: max queues must be positive, got %d", c.MaxQueues)
	}
	return nil
}

// Recorder is one node's history. Its methods are safe for concurrent use.
type Recorder struct {
	cfg    Config
	keep   int64 // buckets
	window int64 // buckets
	shards []*shardHistory

	// Applied hands Updates to a goroutine of the recorder's own, so
	// reading their changes costs the apply path one channel send an
	// Update; when it falls behind by queueSize Updates, Updates are
	// dropped (counted in Dropped), never waited for.
	in      chan item
	done    chan struct{}
	dropped atomic.Int64
	close   sync.Once
}

// queueSize is how many Updates may wait for the recorder's goroutine.
const queueSize = 4096

// item is an Update for the goroutine, or a Sync (synced set).
type item struct {
	info   *statemachine.AppliedInfo
	synced chan struct{}
}

// shardHistory is what the node recorded of one shard.
type shardHistory struct {
	mu      sync.Mutex
	queues  map[string]*series
	sampled []int64 // ring: sampled[b % len] == b when bucket b was sampled
	last    int64   // the last bucket sampled (0: none)
	// seen is the latest start or finish time (Unix ns) taken from the
	// shard's changes so far: an Update's job whose start is later was
	// started in that Update (entry times never go backwards).
	seen int64
}

// series is one queue of one shard.
type series struct {
	points []point // by bucket; a bucket without one repeats the one before
	totals [3]int64
	at     int64 // the bucket of totals (0: never sampled)
	gone   bool  // missing from the last sample (the queue was deleted)
	lat    []latSlot
}

// point is a queue's numbers in one bucket: the jobs enqueued, completed
// and failed in it, and its counts when it was sampled.
type point struct {
	b                        int64
	noRates                  bool // the bucket before was not sampled: no rates
	enq, done, fail          uint32
	pending, active, waiting uint32
	oldest                   uint32 // seconds the next job to fetch had waited
}

func (p point) same(o point) bool { p.b = o.b; return p == o }

type latSlot struct {
	b         int64
	wait, run sketch
}

// New makes a Recorder.
func New(cfg Config) (*Recorder, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Recorder{cfg: cfg, keep: int64(cfg.Keep / Step), window: int64(cfg.Window / Step), shards: make([]*shardHistory, cfg.Shards),
		in: make(chan item, queueSize), done: make(chan struct{})}
	start := cfg.Now().UnixNano()
	for i := range r.shards {
		// Starts and finishes replayed from the log when the node starts
		// are older than now: they are not counted (this node's history
		// starts now).
		r.shards[i] = &shardHistory{queues: map[string]*series{}, sampled: make([]int64, r.keep+1), seen: start}
	}
	go r.run()
	return r, nil
}

func (r *Recorder) run() {
	defer close(r.done)
	for it := range r.in {
		if it.synced != nil {
			close(it.synced)
			continue
		}
		r.apply(it.info)
	}
}

// Sync waits until every Update handed to Applied before it is recorded.
func (r *Recorder) Sync() {
	synced := make(chan struct{})
	r.in <- item{synced: synced}
	<-synced
}

// Close stops the recorder's goroutine; Applied must not be called after.
func (r *Recorder) Close() {
	r.close.Do(func() { close(r.in) })
	<-r.done
}

// Dropped is how many Updates the recorder dropped, behind.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Now is the recorder's clock.
func (r *Recorder) Now() time.Time { return r.cfg.Now() }

// Window is the span latency quantiles are taken over.
func (r *Recorder) Window() time.Duration { return r.cfg.Window }

// BucketOf is the bucket holding t.
func BucketOf(t time.Time) int64 { return floorDiv(t.UnixNano(), int64(Step)) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// QueueSample is one queue's numbers when sampled.
type QueueSample struct {
	Name string
	// Running totals (statemachine.QueueStats).
	Enqueued, Completed, Failed int64
	Pending, Active, Waiting    int64 // waiting: scheduled + retrying
	// HeadCreated is when the queue's next job to fetch was created (Unix
	// ns; 0: nothing pending).
	HeadCreated int64
}

// SampleFrom turns a shard's queue list into samples (head gives each
// queue's next job to fetch; nil: none).
func SampleFrom(infos []statemachine.QueueInfo, head func(queue string) statemachine.QueueHead) []QueueSample {
	out := make([]QueueSample, 0, len(infos))
	for i := range infos {
		q := &infos[i]
		c := &q.Stats.Counts
		s := QueueSample{Name: q.Name, Enqueued: q.Stats.Enqueued, Completed: q.Stats.Completed, Failed: q.Stats.Failed,
			Pending: c[statemachine.StatePending], Active: c[statemachine.StateActive],
			Waiting: c[statemachine.StateScheduled] + c[statemachine.StateRetrying]}
		if head != nil && s.Pending > 0 {
			if h := head(q.Name); h.OK {
				s.HeadCreated = h.CreatedAt
			}
		}
		out = append(out, s)
	}
	return out
}

// Sample records shard sh's queues as they were at time at (the bucket
// holding it). The jobs a queue gained, completed and failed since the
// sample of the bucket before are that bucket's; a queue missing from qs
// has no jobs. Sampling a bucket again adds what moved since.
func (r *Recorder) Sample(sh int, at time.Time, qs []QueueSample) {
	if sh < 0 || sh >= len(r.shards) {
		return
	}
	b := BucketOf(at)
	h := r.shards[sh]
	h.mu.Lock()
	defer h.mu.Unlock()
	if b < h.last {
		return // the clock went back: keep the history in order
	}
	prevSampled := h.isSampled(b - 1)
	h.sampled[b%int64(len(h.sampled))] = b
	h.last = b
	seen := make(map[string]bool, len(qs))
	for i := range qs {
		q := &qs[i]
		seen[q.Name] = true
		s := h.queues[q.Name]
		if s == nil {
			if len(h.queues) >= r.cfg.MaxQueues {
				continue
			}
			s = &series{}
			h.queues[q.Name] = s
		}
		tot := [3]int64{q.Enqueued, q.Completed, q.Failed}
		p := point{b: b, pending: clamp(q.Pending), active: clamp(q.Active), waiting: clamp(q.Waiting)}
		if q.HeadCreated > 0 {
			p.oldest = clamp(max(0, at.UnixNano()-q.HeadCreated) / int64(time.Second))
		}
		var from [3]int64
		switch {
		case s.at == b || s.at == b-1 && prevSampled:
			from = s.totals
		case s.at == 0 && prevSampled:
			// Born since the last sample: it counts from zero.
		default:
			p.noRates = true
		}
		if s.at == b {
			// Sampled again within the bucket: add to its point.
			if n := len(s.points); n > 0 && s.points[n-1].b == b {
				old := s.points[n-1]
				p.noRates = old.noRates
				p.enq, p.done, p.fail = old.enq, old.done, old.fail
				s.points = s.points[:n-1]
			}
		}
		if !p.noRates {
			p.enq += clamp(tot[0] - from[0])
			p.done += clamp(tot[1] - from[1])
			p.fail += clamp(tot[2] - from[2])
		}
		s.totals, s.at, s.gone = tot, b, false
		s.put(p)
	}
	for name, s := range h.queues {
		if !seen[name] && s.at != 0 {
			s.totals, s.at, s.gone = [3]int64{}, b, true
			s.put(point{b: b})
		}
	}
	h.prune(b-r.keep, r.window)
}

func clamp(v int64) uint32 {
	if v < 0 {
		return 0
	}
	return uint32(min(v, math.MaxUint32))
}

// put appends p unless it repeats the last point.
func (s *series) put(p point) {
	if n := len(s.points); n > 0 && s.points[n-1].same(p) {
		return
	}
	if n := len(s.points); n == 0 && p.same(point{}) {
		return // an empty queue's first point: nothing to say
	}
	s.points = append(s.points, p)
}

func (h *shardHistory) isSampled(b int64) bool {
	return b > 0 && h.sampled[b%int64(len(h.sampled))] == b
}

// prune drops points before bucket cut (keeping the last of them, which
// still holds for the buckets after it) and deleted queues with nothing
// left to say.
func (h *shardHistory) prune(cut, window int64) {
	for name, s := range h.queues {
		i := 0
		for i+1 < len(s.points) && s.points[i+1].b <= cut {
			i++
		}
		if i > 0 {
			s.points = append(s.points[:0], s.points[i:]...)
		}
		idle := len(s.points) == 0 || len(s.points) == 1 && s.points[0].same(point{}) && s.points[0].b <= cut
		if s.gone && idle && !s.hasLatency(h.last-window) {
			delete(h.queues, name)
		}
	}
}

func (s *series) hasLatency(after int64) bool {
	for i := range s.lat {
		if s.lat[i].b > after && (s.lat[i].wait.n > 0 || s.lat[i].run.n > 0) {
			return true
		}
	}
	return false
}

// Applied takes the wait and run times of the jobs an Update started and
// finished from its changes (statemachine.AppliedInfo.Changes):
//
//   - wait: from the moment the attempt could run — its creation, or its
//     scheduled_at, or for a retry the moment its backoff ended (failed_at
//     plus the delay) — to its start. A job held on dependencies or for
//     approval counts from its creation: it is enqueue → start.
//   - run: from an attempt's start to its completion or failure (a lease
//     that expired fails at its reclaim).
//
// A start or finish is taken in the Update that made it: one later than
// any the shard's changes showed before (entry times never go back; a
// clock standing still to the nanosecond would hide one).
//
// Applied only queues the Update for the recorder's goroutine.
func (r *Recorder) Applied(info *statemachine.AppliedInfo) {
	if info.Reset || len(info.Changes) == 0 {
		return
	}
	select {
	case r.in <- item{info: info}:
	default:
		r.dropped.Add(1)
	}
}

func (r *Recorder) apply(info *statemachine.AppliedInfo) {
	sh := int(info.ShardID) - 1
	if sh < 0 || sh >= len(r.shards) || info.Reset || len(info.Changes) == 0 {
		return
	}
	h := r.shards[sh]
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := h.seen
	newest := seen
	for i := range info.Changes {
		c := &info.Changes[i]
		if c.Job == nil {
			continue
		}
		j, st := c.Job, &c.State
		var s *series // looked up once a job, when it has a sample
		if st.StartedAt > seen {
			newest = max(newest, st.StartedAt)
			if from, ok := runnableAt(j, st, c.NewErrors); ok {
				s = r.addLatency(h, s, j.Queue, st.StartedAt, st.StartedAt-from, true)
			}
		}
		for k := range c.NewErrors {
			e := &c.NewErrors[k]
			if e.At > seen && e.StartedAt > 0 {
				newest = max(newest, e.At)
				s = r.addLatency(h, s, j.Queue, e.At, e.At-e.StartedAt, false)
			}
		}
		if st.State == statemachine.StateCompleted && st.CompletedAt > seen && st.StartedAt > 0 {
			newest = max(newest, st.CompletedAt)
			r.addLatency(h, s, j.Queue, st.CompletedAt, st.CompletedAt-st.StartedAt, false)
		}
	}
	h.seen = newest
}

// runnableAt is when the attempt that started last could first run; ok is
// false when the Update hides it (the attempt before failed in the same
// Update, so its failure time is gone).
func runnableAt(j *statemachine.Job, st *statemachine.JobState, newErrors []statemachine.JobError) (int64, bool) {
	from := j.CreatedAt
	if j.ScheduledAt > from {
		from = j.ScheduledAt
	}
	if st.Attempt <= 1 {
		return from, true
	}
	failedAt := st.FailedAt
	for k := range newErrors {
		if newErrors[k].Attempt == st.Attempt {
			// This attempt failed too: FailedAt is its failure, not the
			// one its retry waited on.
			prev := -1
			for m := range newErrors {
				if newErrors[m].Attempt == st.Attempt-1 {
					prev = m
				}
			}
			if prev < 0 {
				return 0, false
			}
			return max(from, newErrors[prev].RetryAt), true
		}
	}
	if failedAt == 0 {
		return from, true
	}
	due := failedAt + statemachine.BackoffDelayMs(j.Backoff, j.BaseDelayMs, j.MaxDelayMs, st.Attempt-1)*int64(time.Millisecond)
	return max(from, min(due, st.StartedAt)), true
}

// addLatency records a sample of queue (its series s when known) and
// returns its series (nil: not recorded, past MaxQueues).
func (r *Recorder) addLatency(h *shardHistory, s *series, queue string, at, d int64, wait bool) *series {
	if s == nil {
		if s = h.queues[queue]; s == nil {
			if len(h.queues) >= r.cfg.MaxQueues {
				return nil
			}
			s = &series{}
			h.queues[queue] = s
		}
	}
	b := floorDiv(at, int64(Step))
	if s.lat == nil {
		s.lat = make([]latSlot, r.window)
	}
	slot := &s.lat[b%r.window]
	if slot.b != b {
		if slot.b > b {
			return s // older than the window
		}
		slot.b = b
		slot.wait.reset()
		slot.run.reset()
	}
	us := d / int64(time.Microsecond)
	if wait {
		slot.wait.add(us)
	} else {
		slot.run.add(us)
	}
	return s
}

// Quantiles are p50, p95 and p99 in milliseconds.
type Quantiles struct {
	P50, P95, P99 float64
	N             uint64 // the samples they were taken from
}

// Latency is a queue's wait and run quantiles over the window; nil when
// there was no sample of that kind.
type Latency struct {
	Wait, Run *Quantiles
}

// Latency gives the latency over the window ending now of every queue of
// the given shards that has any (only the queues keep selects; nil: all).
func (r *Recorder) Latency(shards []int, keep func(queue string) bool) map[string]Latency {
	now := BucketOf(r.cfg.Now())
	out := map[string]Latency{}
	for _, sh := range shards {
		if sh < 0 || sh >= len(r.shards) {
			continue
		}
		h := r.shards[sh]
		h.mu.Lock()
		for name, s := range h.queues {
			if s.lat == nil || keep != nil && !keep(name) {
				continue
			}
			var wait, run sketch
			for i := range s.lat {
				if sl := &s.lat[i]; sl.b > now-r.window && sl.b <= now {
					wait.merge(&sl.wait)
					run.merge(&sl.run)
				}
			}
			if wait.n+run.n > 0 {
				out[name] = Latency{Wait: wait.quantiles(), Run: run.quantiles()}
			}
		}
		h.mu.Unlock()
	}
	return out
}

func (s *sketch) quantiles() *Quantiles {
	if s.n == 0 {
		return nil
	}
	ms := func(q float64) float64 { return float64(s.quantile(q)) / 1e3 }
	return &Quantiles{P50: ms(0.50), P95: ms(0.95), P99: ms(0.99), N: s.n}
}

// Point is one bucket of a queue's history (rates per second; nil when
// unknown: the bucket was not sampled, or the one before it was not).
type Point struct {
	Enqueued, Completed, Failed *float64
	Pending, Active, Waiting    *int64
	OldestPendingS              *int64
}

// Range is a stretch of buckets: From to To (inclusive), Step buckets a
// point.
type Range struct {
	From, To int64 // bucket numbers
	Step     int64 // buckets per point, ≥ 1
}

// Points is the number of points r spans.
func (r Range) Points() int { return int((r.To-r.From)/r.Step + 1) }

// History gives the queues of the given shards that keep selects (nil:
// all), each with one Point per step of rg: rates averaged over the
// step's sampled buckets, counts as of its last sampled bucket. sampled
// tells, per point, whether any of the shards was sampled in it (a queue
// missing from the answer had no jobs then).
func (r *Recorder) History(shards []int, keep func(queue string) bool, rg Range) (queues map[string][]Point, sampled []bool) {
	n := rg.Points()
	queues = map[string][]Point{}
	sampled = make([]bool, n)
	for _, sh := range shards {
		if sh < 0 || sh >= len(r.shards) {
			continue
		}
		h := r.shards[sh]
		h.mu.Lock()
		for i := 0; i < n; i++ {
			for b := rg.From + int64(i)*rg.Step; b < rg.From+int64(i+1)*rg.Step && b <= rg.To; b++ {
				if h.isSampled(b) {
					sampled[i] = true
					break
				}
			}
		}
		for name, s := range h.queues {
			if keep != nil && !keep(name) || len(s.points) == 0 {
				continue
			}
			pts := make([]Point, n)
			any := false
			k := 0 // s.points[k-1] is the last point at or before b
			for i := range pts {
				lo := rg.From + int64(i)*rg.Step
				hi := min(lo+rg.Step-1, rg.To)
				var sum [3]float64
				var cur point // zeros before the first point
				rated, here := 0, false
				for b := lo; b <= hi; b++ {
					for k < len(s.points) && s.points[k].b <= b {
						k++
					}
					if !h.isSampled(b) {
						continue
					}
					here, cur = true, point{}
					if k > 0 {
						cur = s.points[k-1]
					}
					// A bucket without a point of its own repeats the
					// last one, its rates included (equal points
					// coalesce).
					if cur.noRates || !h.isSampled(b-1) {
						continue
					}
					sum[0], sum[1], sum[2] = sum[0]+float64(cur.enq), sum[1]+float64(cur.done), sum[2]+float64(cur.fail)
					rated++
				}
				if !here {
					continue
				}
				pt := &pts[i]
				if rated > 0 {
					secs := float64(rated) * Step.Seconds()
					pt.Enqueued, pt.Completed, pt.Failed = ptr(sum[0]/secs), ptr(sum[1]/secs), ptr(sum[2]/secs)
				}
				pt.Pending, pt.Active, pt.Waiting = ptr(int64(cur.pending)), ptr(int64(cur.active)), ptr(int64(cur.waiting))
				pt.OldestPendingS = ptr(int64(cur.oldest))
				any = true
			}
			if any {
				if prev, ok := queues[name]; ok {
					mergePoints(prev, pts)
				} else {
					queues[name] = pts
				}
			}
		}
		h.mu.Unlock()
	}
	return queues, sampled
}

func ptr[T any](v T) *T { return &v }

// mergePoints adds b into a (the same queue seen on two shards: only while
// a queue moves, which the router never does; kept total anyway).
func mergePoints(a, b []Point) {
	for i := range a {
		a[i] = Sum(a[i], b[i])
	}
}

// Sum adds two points: rates and counts add, the oldest wait is the
// larger; a field unknown in both stays unknown.
func Sum(a, b Point) Point {
	add := func(x, y *float64) *float64 {
		switch {
		case x == nil:
			return y
		case y == nil:
			return x
		}
		return ptr(*x + *y)
	}
	addi := func(x, y *int64) *int64 {
		switch {
		case x == nil:
			return y
		case y == nil:
			return x
		}
		return ptr(*x + *y)
	}
	maxi := func(x, y *int64) *int64 {
		switch {
		case x == nil:
			return y
		case y == nil:
			return x
		}
		return ptr(max(*x, *y))
	}
	return Point{Enqueued: add(a.Enqueued, b.Enqueued), Completed: add(a.Completed, b.Completed), Failed: add(a.Failed, b.Failed),
		Pending: addi(a.Pending, b.Pending), Active: addi(a.Active, b.Active), Waiting: addi(a.Waiting, b.Waiting),
		OldestPendingS: maxi(a.OldestPendingS, b.OldestPendingS)}
}

// Names lists a history's queues in order.
func Names(queues map[string][]Point) []string {
	names := make([]string, 0, len(queues))
	for n := range queues {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
