package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/corvohq/corvo/statemachine"
)

// Errors callers map to HTTP statuses.
var (
	// ErrBusy: the shard's proposal queue is full or Raft is overloaded;
	// retry after a short pause (429).
	ErrBusy = errors.New("shard is busy")
	// ErrUnavailable: no leader could commit the proposal before its
	// deadline (503). The ops may still have been applied.
	ErrUnavailable = errors.New("shard is unavailable")
	// ErrClosed: the host is shutting down (503).
	ErrClosed = errors.New("shard host is closed")
	// ErrRejected: the state machine could not decode the entry (a bug).
	ErrRejected = errors.New("entry rejected by the state machine")
)

// request is one caller's ops; they travel in one entry, in order. The
// caller gives up at ctx's end, or at deadline (zero: none) when it came
// through submitWithin.
type request struct {
	ctx      context.Context
	deadline time.Time // read on the monotonic clock, as a context's is
	ops      []statemachine.Op
	size     int
	done     chan Response
}

// gaveUp is why the caller no longer waits for r (nil: it does).
func (r *request) gaveUp(now time.Time) error {
	if !r.deadline.IsZero() && !now.Before(r.deadline) {
		return context.DeadlineExceeded
	}
	return r.ctx.Err()
}

// Response is what a proposal's caller gets back: one result per op, or the
// error that kept the entry from committing.
type Response struct {
	Results []statemachine.Result
	Err     error
}

// proposer coalesces concurrent requests to one shard into multi-op Raft
// entries, one entry in flight at a time (ARCHITECTURE.md: more in flight
// measured worse), and hands each caller its own results.
type proposer struct {
	h       *Host
	shardID uint64
	session *client.Session
	handoff *statemachine.Handoff // the results of its entries
	in      chan *request
	carry   *request // a request that did not fit in the last entry
	parked  parking
	rnd     *rand.Rand

	latency *metrics.Histogram
	recent  latencyRing // for cluster status quantiles
	entries *metrics.Counter
	ops     *metrics.Counter
}

func newProposer(h *Host, shardID uint64) *proposer {
	label := fmt.Sprintf(`{shard="%d"}`, shardID)
	return &proposer{
		h:       h,
		shardID: shardID,
		session: h.nh.GetNoOPSession(shardID),
		handoff: h.handoffs[shardID-1],
		in:      make(chan *request, h.cfg.MaxQueuedRequests),
		rnd:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), shardID)),
		latency: metrics.GetOrCreateHistogram(`corvo_proposal_duration_seconds` + label),
		entries: metrics.GetOrCreateCounter(`corvo_proposal_entries_total` + label),
		ops:     metrics.GetOrCreateCounter(`corvo_proposal_ops_total` + label),
	}
}

func opsSize(ops []statemachine.Op) int {
	// A cheap estimate; exact sizes only matter to stay well under Raft's
	// entry limit.
	n := 0
	for _, op := range ops {
		switch o := op.(type) {
		case *statemachine.EnqueueOp:
			n += 96 + len(o.Job.Payload) + len(o.Job.Tags)
		case *statemachine.AckOp:
			n += 64 + len(o.Result)
		default:
			n += 64
		}
	}
	return n
}

// submit queues ops for the shard and waits for their results, or for
// ctx's end.
func (p *proposer) submit(ctx context.Context, ops []statemachine.Op) ([]statemachine.Result, error) {
	r := newRequest()
	r.ctx, r.ops = ctx, ops
	if err := p.enqueue(r); err != nil {
		freeRequest(r)
		return nil, err
	}
	select {
	case resp := <-r.done:
		freeRequest(r)
		return resp.Results, resp.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// submitWithin is submit bounded by a timeout instead of a context: the
// wait takes a pooled timer, where a context.WithTimeout made a context,
// a timer and a channel for every proposal (~5 allocations).
func (p *proposer) submitWithin(timeout time.Duration, ops []statemachine.Op) ([]statemachine.Result, error) {
	r := newRequest()
	r.ctx, r.deadline, r.ops = context.Background(), time.Now().Add(timeout), ops
	if err := p.enqueue(r); err != nil {
		freeRequest(r)
		return nil, err
	}
	t := getTimer(timeout)
	defer putTimer(t)
	select {
	case resp := <-r.done:
		freeRequest(r)
		return resp.Results, resp.Err
	case <-t.C:
		return nil, context.DeadlineExceeded
	}
}

// enqueue hands r to the proposer's loop (not waiting for room).
func (p *proposer) enqueue(r *request) error {
	if len(r.ops) > statemachine.MaxOpsPerEntry {
		return fmt.Errorf("%d ops exceed one entry (%d)", len(r.ops), statemachine.MaxOpsPerEntry)
	}
	r.size = opsSize(r.ops)
	select {
	case <-p.h.closing:
		return ErrClosed
	default:
	}
	if !p.h.cfg.Proposals.TryAcquire(int64(r.size)) {
		return ErrBusy
	}
	select {
	case p.in <- r:
	default:
		p.h.cfg.Proposals.Release(int64(r.size))
		return ErrBusy
	}
	return nil
}

// requests keeps requests, each with its channel, from one proposal to
// the next (two allocations a proposal). A request goes back only once
// its caller took the answer, or it was never queued: one whose caller
// gave up is still answered later, and is left to the collector.
var requests = sync.Pool{New: func() any { return &request{done: make(chan Response, 1)} }}

func newRequest() *request { return requests.Get().(*request) }

func freeRequest(r *request) {
	*r = request{done: r.done}
	requests.Put(r)
}

// timers are stopped timers kept for submitWithin's waits (since Go 1.23
// a stopped or reset timer never delivers a stale tick).
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

func (p *proposer) run() {
	defer p.h.wg.Done()
	for {
		var first *request
		if p.carry != nil {
			first, p.carry = p.carry, nil
		} else {
			select {
			case first = <-p.in:
			case <-p.h.stopProposers:
				p.drain()
				p.parked.failAll(ErrClosed)
				return
			}
		}
		batch := []*request{first}
		nops, size := len(first.ops), first.size
	collect:
		for nops < p.h.cfg.MaxOpsPerEntry && size < p.h.cfg.MaxEntryBytes {
			select {
			case r := <-p.in:
				if nops+len(r.ops) > statemachine.MaxOpsPerEntry || size+r.size > 2*p.h.cfg.MaxEntryBytes {
					p.carry = r
					break collect
				}
				batch = append(batch, r)
				nops += len(r.ops)
				size += r.size
			default:
				break collect
			}
		}
		if extra := p.parked.take(batch, p.h.clock.Now().UnixNano(), statemachine.MaxOpsPerEntry-nops); extra != nil {
			batch = append(batch, extra...)
			nops += len(extra)
		}
		p.flush(batch, nops)
	}
}

// drain fails requests still queued at shutdown.
func (p *proposer) drain() {
	if p.carry != nil {
		p.answer(p.carry, Response{Err: ErrClosed})
	}
	for {
		select {
		case r := <-p.in:
			p.answer(r, Response{Err: ErrClosed})
		default:
			return
		}
	}
}

// answer hands a request its response and gives its bytes back to the
// memory budget. The request is then its caller's again: nothing here
// reads it after.
func (p *proposer) answer(r *request, resp Response) {
	p.h.cfg.Proposals.Release(int64(r.size))
	r.done <- resp
}

func (p *proposer) flush(batch []*request, nops int) {
	live := batch[:0]
	mono := time.Now()
	for _, r := range batch {
		if err := r.gaveUp(mono); err != nil {
			p.answer(r, Response{Err: err})
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ops := make([]statemachine.Op, 0, nops)
	for _, r := range live {
		ops = append(ops, r.ops...)
	}
	now := p.h.clock.Now().UnixNano()
	e := statemachine.Entry{ID: statemachine.NewEntryID(now, p.rnd.Uint64()), Now: now, Ops: ops}
	// A fresh buffer per entry: dragonboat keeps the slice in its in-memory
	// log (and sends it to followers) after SyncPropose returns.
	cmd := e.Encode(make([]byte, 0, 64+len(ops)*96))
	start := time.Now()
	p.handoff.Expect(e.ID)
	results, err := p.propose(cmd, e.ID)
	p.handoff.Forget(e.ID) // taken already, unless the entry failed
	p.latency.UpdateDuration(start)
	p.recent.add(time.Since(start))
	p.entries.Inc()
	p.ops.Add(len(ops))
	if err == nil && len(results) != len(ops) {
		err = fmt.Errorf("state machine returned %d results for %d ops", len(results), len(ops))
	}
	at := 0
	for _, r := range live {
		if err != nil {
			p.answer(r, Response{Err: err})
			continue
		}
		n := len(r.ops) // r is its caller's (and may be reused) once answered
		p.answer(r, Response{Results: results[at : at+n : at+n]})
		at += n
	}
}

// proposeOnce is one attempt: dragonboat's SyncPropose without its
// context, so an entry costs no timer, context or goroutine of its own. The
// attempt ends with dragonboat's answer (its own timeout included), or
// early on a leader change: a proposal forwarded to a replica that just
// lost leadership would otherwise wait out the whole timeout before its
// retry.
func (p *proposer) proposeOnce(cmd []byte, timeout time.Duration) (sm.Result, error) {
	changed := p.h.leaderChanged(int(p.shardID) - 1)
	rs, err := p.h.nh.Propose(p.session, cmd, timeout)
	if err != nil {
		return sm.Result{}, err
	}
	select {
	case r := <-rs.AppliedC():
		switch {
		case r.Completed():
			rs.Release()
			return r.GetResult(), nil
		case r.Rejected():
			return sm.Result{}, dragonboat.ErrRejected
		case r.Timeout():
			return sm.Result{}, dragonboat.ErrTimeout
		case r.Terminated():
			return sm.Result{}, dragonboat.ErrShardClosed
		case r.Dropped():
			return sm.Result{}, dragonboat.ErrShardNotReady
		default: // aborted
			return sm.Result{}, dragonboat.ErrAborted
		}
	case <-changed:
		return sm.Result{}, dragonboat.ErrCanceled
	}
}

// propose commits one entry, retrying the same bytes (same entry ID, so the
// state machine applies it once) while Raft times out or has no leader.
func (p *proposer) propose(cmd []byte, id statemachine.EntryID) ([]statemachine.Result, error) {
	deadline := time.Now().Add(p.h.cfg.ProposalDeadline)
	backoff := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt == 1 {
			// Same bytes but the retry flag, in a new slice (the first
			// attempt's may still be in flight): the state machine then
			// checks for a duplicate.
			cmd = append([]byte(nil), cmd...)
			cmd[statemachine.RetryFlagOffset] = 1
		}
		timeout := time.Until(deadline)
		if timeout > p.h.cfg.ProposalTimeout {
			timeout = p.h.cfg.ProposalTimeout
		}
		if timeout < 50*time.Millisecond {
			return nil, ErrUnavailable
		}
		res, err := p.proposeOnce(cmd, timeout)
		switch {
		case err == nil:
			if res.Value != statemachine.ResultApplied {
				return nil, ErrRejected
			}
			if rs, ok := p.handoff.Take(id); ok {
				return rs, nil
			}
			return nil, fmt.Errorf("shard %d applied entry %x without handing over its results", p.shardID, id[:])
		case errors.Is(err, dragonboat.ErrSystemBusy):
			return nil, ErrBusy
		case errors.Is(err, dragonboat.ErrClosed), errors.Is(err, dragonboat.ErrShardClosed):
			return nil, ErrClosed
		case errors.Is(err, dragonboat.ErrShardNotFound):
			// This node no longer hosts the shard (it was removed from
			// the cluster): the client must go to another node. An
			// earlier attempt may still commit.
			return nil, fmt.Errorf("%w: this node no longer hosts shard %d", ErrUnavailable, p.shardID)
		case errors.Is(err, dragonboat.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
			errors.Is(err, dragonboat.ErrShardNotReady), errors.Is(err, dragonboat.ErrAborted),
			errors.Is(err, dragonboat.ErrCanceled), errors.Is(err, context.Canceled):
			p.h.log.Debug().Err(err).Uint64("shard", p.shardID).Msg("retrying proposal")
		default:
			return nil, fmt.Errorf("propose to shard %d: %w", p.shardID, err)
		}
		select {
		case <-time.After(backoff):
		case <-p.h.closing:
			return nil, ErrClosed
		}
		if backoff < 200*time.Millisecond {
			backoff *= 2
		}
	}
}
