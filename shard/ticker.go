package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/corvohq/corvo/statemachine"
)

// reclaimInterval is how often a leader with active jobs looks for expired
// leases (spec: at least every second).
const reclaimInterval = time.Second

// tick runs shard i's leader-only maintenance: promote due scheduled and
// retrying jobs (every tick while there are any), reclaim expired leases
// (every second while jobs are active), sweep expired jobs, unique locks
// and jobs past retention and audit records past theirs (every
// SweepInterval), prune old dedup records. The ops are safe from a stale leader: they commit
// through Raft and the state machine re-checks everything against the
// entry's own time.
func (h *Host) tick(i int) {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	now := h.clock.Now()
	lastPrune, lastReclaim, lastSweep := now, now, now
	for {
		select {
		case <-h.closing:
			return
		case <-t.C:
		}
		if !h.IsLeader(i) {
			continue
		}
		now := h.clock.Now()
		var ops []statemachine.Op
		if h.signals.due[i].Load() > 0 {
			ops = append(ops, &statemachine.PromoteOp{Limit: 5000})
		}
		if next := h.signals.nextCron[i].Load(); next != 0 && next <= now.UnixNano() {
			ops = append(ops, &statemachine.CronTickOp{Limit: 1000})
		}
		if h.signals.active[i].Load() > 0 && now.Sub(lastReclaim) >= reclaimInterval-h.cfg.TickInterval/2 {
			ops = append(ops, &statemachine.ReclaimOp{Limit: 5000})
			lastReclaim = now
		}
		if now.Sub(lastSweep) >= h.cfg.SweepInterval {
			sw := &statemachine.SweepOp{Limit: 5000}
			if h.cfg.Retention > 0 {
				sw.PurgeBefore = now.Add(-h.cfg.Retention).UnixNano()
			}
			ops = append(ops, sw)
			if h.cfg.AuditRetention > 0 {
				ops = append(ops, &statemachine.PruneAuditOp{Before: now.Add(-h.cfg.AuditRetention).UnixNano(), Limit: 5000})
			}
			lastSweep = now
		}
		if now.Sub(lastPrune) >= h.cfg.DedupRetention/5 {
			ops = append(ops, &statemachine.PruneDedupOp{Before: now.Add(-h.cfg.DedupRetention).UnixNano()})
			lastPrune = now
		}
		if len(ops) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ProposalDeadline)
		if _, err := h.Propose(ctx, i, ops...); err != nil {
			h.maintenanceFailed(i, err)
		}
		cancel()
	}
}

// maintenanceFailed reports a maintenance proposal that failed. A shard
// whose queue is full (ErrBusy) is saturated by its clients' writes, which
// come first: the tick runs again, and corvo_maintenance_busy_total{shard}
// counts the skips (a warning each time filled the log under a bulk load).
// Anything else is a warning.
func (h *Host) maintenanceFailed(i int, err error) {
	if errors.Is(err, ErrBusy) {
		metrics.GetOrCreateCounter(fmt.Sprintf(`corvo_maintenance_busy_total{shard="%d"}`, ShardID(i))).Inc()
		h.log.Debug().Err(err).Int("shard", i).Msg("maintenance proposal skipped: the shard is busy")
		return
	}
	h.log.Warn().Err(err).Int("shard", i).Msg("maintenance proposal failed")
}
