package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// relayBatch bounds the outbox records one relay round delivers.
const relayBatch = 512

// relay delivers shard i's outbox while this node leads shard i: it
// proposes each record's op to its target shard, then acknowledges the
// delivered records on shard i. A crash or leader change between the two
// makes the next leader deliver again; the ops are idempotent, so the
// effect happens once.
func (h *Host) relay(i int) {
	defer h.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-h.closing:
			return
		case <-h.relayWake[i]:
		case <-t.C:
		}
		for !h.cfg.HoldOutbox && h.IsLeader(i) && h.signals.outbox[i].Load() > 0 {
			if !h.relayOnce(i) {
				break
			}
		}
	}
}

// relayOnce delivers one batch; false means nothing was delivered (empty,
// or a target failed: the next tick retries).
func (h *Host) relayOnce(i int) bool {
	v, err := h.Read(i, statemachine.OutboxQuery{Limit: relayBatch})
	if err != nil {
		return false
	}
	recs := v.([]statemachine.OutboxRecord)
	if len(recs) == 0 {
		return false
	}
	byTarget := map[int][]statemachine.OutboxRecord{}
	for _, r := range recs {
		byTarget[r.Target] = append(byTarget[r.Target], r)
	}
	var done []uint64
	for target, rs := range byTarget {
		ops := make([]statemachine.Op, len(rs))
		for k := range rs {
			ops[k] = rs[k].Op
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ProposalDeadline)
		_, err := h.proposeAnywhere(ctx, target, ops...)
		cancel()
		if err != nil {
			h.log.Warn().Err(err).Int("from", i).Int("to", target).Msg("outbox delivery failed; will retry")
			continue
		}
		for _, r := range rs {
			done = append(done, r.Seq)
		}
	}
	if len(done) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ProposalDeadline)
	defer cancel()
	if _, err := h.Propose(ctx, i, &statemachine.OutboxAckOp{Seqs: done}); err != nil {
		h.log.Warn().Err(err).Int("shard", i).Msg("outbox acknowledgement failed; will redeliver")
		return false
	}
	return true
}

// RemoteProposer proposes ops to a shard this node does not host, through
// a node that does (peer.Client.Propose; the shard layer knows no HTTP).
type RemoteProposer func(ctx context.Context, shard int, ops ...statemachine.Op) ([]statemachine.Result, error)

// proposeAnywhere proposes to shard i here when this node runs it, else
// through the remote proposer.
func (h *Host) proposeAnywhere(ctx context.Context, i int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if h.rep[i].Load() != 0 {
		return h.Propose(ctx, i, ops...)
	}
	if f := h.cfg.Remote; f != nil {
		return f(ctx, i, ops...)
	}
	return nil, fmt.Errorf("%w: shard %d is not hosted here", ErrUnavailable, i)
}
