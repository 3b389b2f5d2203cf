package shard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/corvohq/corvo/statemachine"
)

// Parked is a long-poll fetch waiting at a shard's proposer. When the
// proposer next commits an entry that enqueues jobs into one of its queues,
// it appends the fetch to that same entry, so the job is claimed in the
// Raft round that created it: enqueue-to-start costs one round, not two.
//
// A fetch over queues on several shards parks a part at each (its queues
// there), all in one ParkGroup: the first proposer to serve a part takes
// the group, and the other parts are dropped, so one fetch is never
// claimed for twice.
type Parked struct {
	op    *statemachine.FetchOp
	done  chan Response
	taken bool // guarded by parking.mu: it rides in an entry now
	group *ParkGroup
}

// ParkGroup ties the parts of one fetch parked at several shards.
type ParkGroup struct{ taken atomic.Bool }

// Result waits for the fetch's result once the proposer took it.
func (pk *Parked) Result() <-chan Response { return pk.done }

// Jobs unwraps a parked fetch's response.
func (r Response) Jobs() ([]statemachine.JobView, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	if len(r.Results) == 0 {
		return nil, nil
	}
	return r.Results[0].Jobs, nil
}

// parking is a proposer's list of parked fetches.
type parking struct {
	mu   sync.Mutex
	list []*Parked
}

func (pg *parking) park(op *statemachine.FetchOp, g *ParkGroup) *Parked {
	pk := &Parked{op: op, done: make(chan Response, 1), group: g}
	pg.mu.Lock()
	pg.list = append(pg.list, pk)
	pg.mu.Unlock()
	return pk
}

// unpark removes pk; false means the proposer already took it and its
// result will arrive on Result().
func (pg *parking) unpark(pk *Parked) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pk.taken {
		return false
	}
	for i, x := range pg.list {
		if x == pk {
			pg.list = append(pg.list[:i], pg.list[i+1:]...)
			break
		}
	}
	return true
}

// take removes the parked fetches that the batch's enqueues can serve —
// per queue, as many jobs as the batch makes pending — and returns them as
// requests to append to the entry.
func (pg *parking) take(batch []*request, now int64, room int) []*request {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if len(pg.list) == 0 {
		return nil
	}
	var budget map[string]int
	for _, r := range batch {
		for _, op := range r.ops {
			if e, ok := op.(*statemachine.EnqueueOp); ok && e.Job.ScheduledAt <= now {
				if budget == nil {
					budget = make(map[string]int)
				}
				budget[e.Job.Queue]++
			}
		}
	}
	if budget == nil {
		return nil
	}
	var out []*request
	kept := pg.list[:0]
	for _, pk := range pg.list {
		if len(out) >= room {
			kept = append(kept, pk)
			continue
		}
		use := ""
		for _, q := range pk.op.Queues {
			if budget[q] > 0 {
				use = q
				break
			}
		}
		if use == "" {
			if pk.group == nil || !pk.group.taken.Load() {
				kept = append(kept, pk)
			} // else: another shard serves this fetch; drop the part
			continue
		}
		if pk.group != nil && !pk.group.taken.CompareAndSwap(false, true) {
			continue // another shard serves this fetch; drop the part
		}
		budget[use] -= int(max(pk.op.Count, 1))
		pk.taken = true
		// No size: a parked fetch took nothing from the proposals' budget
		// (answer gives back a request's size).
		out = append(out, &request{ctx: context.Background(), ops: []statemachine.Op{pk.op}, done: pk.done})
	}
	for i := len(kept); i < len(pg.list); i++ {
		pg.list[i] = nil
	}
	pg.list = kept
	return out
}

// failAll answers every parked fetch at shutdown.
func (pg *parking) failAll(err error) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for _, pk := range pg.list {
		pk.taken = true
		pk.done <- Response{Err: err}
	}
	pg.list = nil
}

// Park parks a fetch at shard i (its queues must all live there). g, when
// not nil, groups it with the parts of the same fetch parked at other
// shards: only one of them is ever served.
func (h *Host) Park(i int, op *statemachine.FetchOp, g *ParkGroup) *Parked {
	return h.proposers[i].parked.park(op, g)
}

// Unpark withdraws a parked fetch; false means it is already in an entry
// and its result will arrive.
func (h *Host) Unpark(i int, pk *Parked) bool { return h.proposers[i].parked.unpark(pk) }
