package shard

import (
	"context"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// tick runs shard i's leader-only maintenance: promote due jobs, reclaim
// expired leases, prune old dedup records. Each tick first reads when work
// is due, so idle shards propose nothing. The ops are safe from a stale
// leader: they commit through Raft and the state machine re-checks every
// time against the entry's own time.
func (h *Host) tick(i int) {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	lastPrune := h.clock.Now()
	for {
		select {
		case <-h.closing:
			return
		case <-t.C:
		}
		if !h.IsLeader(i) {
			continue
		}
		h.maintain(i, &lastPrune)
	}
}

func (h *Host) maintain(i int, lastPrune *time.Time) {
	v, err := h.Read(i, statemachine.NextDueQuery{})
	if err != nil {
		return
	}
	due := v.(statemachine.DueTimes)
	now := h.clock.Now()
	var ops []statemachine.Op
	if due.NextDue != 0 && due.NextDue <= now.UnixNano() {
		ops = append(ops, &statemachine.PromoteOp{Limit: 5000})
	}
	if due.NextLease != 0 && due.NextLease <= now.UnixNano() {
		ops = append(ops, &statemachine.ReclaimOp{Limit: 5000})
	}
	if now.Sub(*lastPrune) >= h.cfg.DedupRetention/5 {
		ops = append(ops, &statemachine.PruneDedupOp{Before: now.Add(-h.cfg.DedupRetention).UnixNano()})
		*lastPrune = now
	}
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ProposalDeadline)
	defer cancel()
	if _, err := h.Propose(ctx, i, ops...); err != nil {
		h.log.Warn().Err(err).Int("shard", i).Msg("maintenance proposal failed")
	}
}
