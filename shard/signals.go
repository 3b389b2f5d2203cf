package shard

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// providerThrottled counts, per queue and provider, the updates of this
// node's replicas after which the queue's pending jobs wait for its
// provider's window (statemachine/provider.go). Queue and provider names
// need no escaping: both are validated.
func providerThrottled(queue, provider string) *metrics.Counter {
	l := `{queue="` + queue + `"`
	if ns, q := router.SplitQueue(queue); ns != router.DefaultNamespace {
		l = `{namespace="` + ns + `",queue="` + q + `"`
	}
	return metrics.GetOrCreateCounter(`corvo_provider_throttled_total` + l + `,provider="` + provider + `"}`)
}

// signals tracks, per queue, how many jobs are pending on this node's
// replica and wakes long-polls when a queue gains fetchable jobs.
type signals struct {
	mu     sync.Mutex
	queues map[string]*queueSignal
	// Per shard index: active and scheduled+retrying totals, outbox size.
	active, due, outbox, nextCron []atomic.Int64
	// relayWake[i] nudges shard i's outbox relay.
	relayWake []chan struct{}
}

type queueSignal struct {
	pending atomic.Int64
	// claiming: the pending jobs that claims proposed through this node
	// reserved and that have not answered yet (signals.reserve).
	claiming atomic.Int64
	paused   atomic.Bool
	blocked  atomic.Int64           // QueueSignal.BlockedUntil
	head     statemachine.QueueHead // guarded by signals.mu
	seen     bool                   // set by an Applied (newer than any seed); guarded by signals.mu
	shard    int                    // the queue's shard index; guarded by signals.mu
	ready    chan struct{}          // closed and replaced when the queue gains jobs; guarded by signals.mu
}

func newSignals(shards int) *signals {
	s := &signals{queues: make(map[string]*queueSignal), active: make([]atomic.Int64, shards), due: make([]atomic.Int64, shards),
		outbox: make([]atomic.Int64, shards), nextCron: make([]atomic.Int64, shards), relayWake: make([]chan struct{}, shards)}
	for i := range s.relayWake {
		s.relayWake[i] = make(chan struct{}, 1)
	}
	return s
}

// head is the queue's first pending job as of the last Update.
func (s *signals) headOf(q string) statemachine.QueueHead {
	s.mu.Lock()
	defer s.mu.Unlock()
	if qs, ok := s.queues[q]; ok && qs.pending.Load() > 0 {
		return qs.head
	}
	return statemachine.QueueHead{Queue: q}
}

// getLocked returns the queue's signal, creating it. s.mu must be held.
func (s *signals) getLocked(q string) *queueSignal {
	qs, ok := s.queues[q]
	if !ok {
		qs = &queueSignal{ready: make(chan struct{})}
		s.queues[q] = qs
	}
	return qs
}

// watch returns a channel closed the next time the queue gains fetchable
// jobs. Take it before checking Fetchable, so no wake-up is lost.
func (s *signals) watch(q string) <-chan struct{} {
	s.mu.Lock()
	ch := s.getLocked(q).ready
	s.mu.Unlock()
	return ch
}

// fetchable: the queue has pending jobs that no claim in flight from
// this node reserved, and it is neither paused nor blocked by a limit.
func (s *signals) fetchable(q string, now int64) bool {
	s.mu.Lock()
	qs, ok := s.queues[q]
	s.mu.Unlock()
	return ok && qs.free(now) > 0
}

// free is how many of the queue's pending jobs a claim may take at now:
// those no claim in flight reserved, none while it is paused or a limit
// blocks it.
func (qs *queueSignal) free(now int64) int64 {
	if qs.paused.Load() || qs.blocked.Load() > now {
		return 0
	}
	return qs.pending.Load() - qs.claiming.Load()
}

// Reservation is what a claim about to be proposed reserved of its
// queues' pending jobs (Host.Reserve): N jobs, which is the claim's
// count. Claims proposed at once through one node then ask, between
// them, for no more jobs than are pending: without it every long-poll
// that saw a queue with one pending job proposed a claim, one won and
// the rest went through Raft for nothing (up to one empty claim per job
// delivered, under load on a cluster).
type Reservation struct {
	N    int
	qs   []*queueSignal
	took []int64
}

// reserve takes up to n of the queues' pending jobs not reserved yet, in
// the queues' order.
func (s *signals) reserve(queues []string, n int, now int64) Reservation {
	var r Reservation
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range queues {
		if r.N >= n {
			break
		}
		qs, ok := s.queues[q]
		if !ok {
			continue
		}
		free := qs.free(now)
		if free <= 0 {
			continue
		}
		take := min(free, int64(n-r.N))
		qs.claiming.Add(take)
		r.qs, r.took = append(r.qs, qs), append(r.took, take)
		r.N += int(take)
	}
	return r
}

// release returns a reservation once its claim answered. wake says
// whether the long-polls of its queues should look again if jobs are left
// that no claim reserved (they may have parked because this claim had
// them): a claim that failed or that got jobs wakes them. One that applied
// and got nothing does not: a queue whose pending jobs cannot be claimed
// is retried on a timer by the poll that saw it, never spun on.
func (s *signals) release(r Reservation, wake bool, now int64) {
	if len(r.qs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, qs := range r.qs {
		qs.claiming.Add(-r.took[i])
		if wake && qs.free(now) > 0 {
			close(qs.ready)
			qs.ready = make(chan struct{})
		}
	}
}

// blockedUntil is when a throttled queue with pending jobs may hand them
// out again (0: not blocked by a throttle).
func (s *signals) blockedUntil(q string) int64 {
	s.mu.Lock()
	qs, ok := s.queues[q]
	s.mu.Unlock()
	if !ok || qs.pending.Load() == 0 || qs.paused.Load() {
		return 0
	}
	if b := qs.blocked.Load(); b != math.MaxInt64 {
		return b
	}
	return 0
}

func (s *signals) pending(q string) int64 {
	s.mu.Lock()
	qs, ok := s.queues[q]
	s.mu.Unlock()
	if !ok {
		return 0
	}
	return qs.pending.Load()
}

// applied takes a state machine's report of a committed Update.
func (s *signals) applied(info *statemachine.AppliedInfo) {
	if i := int(info.ShardID) - 1; i >= 0 && i < len(s.active) {
		s.active[i].Store(info.Active)
		s.due[i].Store(info.Due)
		s.outbox[i].Store(info.Outbox)
		s.nextCron[i].Store(info.NextCron)
		if info.Outbox > 0 {
			select {
			case s.relayWake[i] <- struct{}{}:
			default:
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range info.Queues {
		sig := &info.Queues[i]
		qs := s.getLocked(sig.Queue)
		qs.seen = true
		qs.shard = int(info.ShardID) - 1
		qs.pending.Store(sig.Pending)
		qs.paused.Store(sig.Paused)
		qs.blocked.Store(sig.BlockedUntil)
		if sig.Provider != "" {
			providerThrottled(sig.Queue, sig.Provider).Inc()
		}
		qs.head = sig.Head
		if sig.Ready && sig.Pending > 0 && !sig.Paused && sig.BlockedUntil != math.MaxInt64 {
			close(qs.ready)
			qs.ready = make(chan struct{})
		}
	}
}

// seed loads counts read at start-up for queues no Update has reported yet.
func (s *signals) seed(shard int, infos []statemachine.QueueInfo, heads []statemachine.QueueHead) {
	var active, due int64
	for i := range infos {
		c := &infos[i].Stats.Counts
		active += c[statemachine.StateActive]
		due += c[statemachine.StateScheduled] + c[statemachine.StateRetrying]
	}
	s.active[shard].CompareAndSwap(0, active)
	s.due[shard].CompareAndSwap(0, due)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range infos {
		qs := s.getLocked(infos[i].Name)
		qs.shard = shard
		if qs.seen {
			continue
		}
		qs.pending.Store(infos[i].Stats.Counts[statemachine.StatePending])
		qs.paused.Store(infos[i].Config.Paused)
		qs.head = heads[i]
		if qs.pending.Load() > 0 {
			close(qs.ready)
			qs.ready = make(chan struct{})
		}
	}
}

// forget drops what shard's replica reported (this node stopped hosting
// it): its queues read as empty until a replica here reports again.
func (s *signals) forget(shard int) {
	s.active[shard].Store(0)
	s.due[shard].Store(0)
	s.outbox[shard].Store(0)
	s.nextCron[shard].Store(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, qs := range s.queues {
		if qs.shard == shard {
			qs.seen = false
			qs.pending.Store(0)
			qs.blocked.Store(0)
			qs.head = statemachine.QueueHead{}
		}
	}
}
