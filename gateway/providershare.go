package gateway

import (
	"errors"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// Rebalancing providers' shares by demand (issue 20). Without it each
// member of a provider's pool has the equal split of each limit, and one
// busy queue gets L/n while the others idle. One node — the one leading
// shard 0 — reads every shard's view of every provider each interval and,
// for each pool of two or more members whose shards agree on its members
// and limits, plans the shares by demand (statemachine.PlanShares: the
// members with more jobs waiting than their share has room for split
// what the idle ones leave; an idle one
// keeps its recent use, at least a floor so a job arriving there is
// fetched and asks for more next time). When the plan moves a share
// noticeably, statemachine.HandOver moves it in two stages that never
// let the members together exceed a limit: lower every member first,
// then raise into what their answers leave. Nothing is proposed when the
// shares would not change.

// ProviderRebalanceDefault is how often the shares are rebalanced by
// default.
const ProviderRebalanceDefault = 5 * time.Second

// shareGen is the last generation this node used for a hand-over.
var shareGen atomic.Uint64

// nextShareGen is a generation newer than seen, this node's last and the
// clock's (Unix ns): a node that takes the rebalancing over goes on above
// the generations the shards hold.
func nextShareGen(seen uint64, now time.Time) uint64 {
	for {
		last := shareGen.Load()
		g := max(last+1, seen+1, uint64(now.UnixNano()))
		if shareGen.CompareAndSwap(last, g) {
			return g
		}
	}
}

// providerRebalanceLoop rebalances every interval while this node leads
// shard 0, until the server closes.
func (s *Server) providerRebalanceLoop() {
	t := time.NewTicker(s.cfg.ProviderRebalance)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		if !s.eng.IsLeader(0) {
			continue
		}
		if err := s.rebalanceProviders(nil); err != nil {
			s.log.Debug().Err(err).Msg("rebalancing provider shares (tried again next interval)")
		}
	}
}

// rebalanceProviders runs one rebalance of every provider (only: those
// it accepts; nil: all). It returns the first error; the other
// providers are still tried.
func (s *Server) rebalanceProviders(only func(p *statemachine.Provider) bool) error {
	now := s.clock.Now()
	parts, err := s.readEach(func(int) any { return statemachine.ProvidersQuery{Now: now.UnixNano()} })
	if err != nil {
		return err
	}
	// Each provider's view from every shard, by shard.
	views := map[string][]*statemachine.ProviderInfo{}
	for sh, part := range parts {
		list, _ := part.([]statemachine.ProviderInfo)
		for i := range list {
			pi := &list[i]
			if only != nil && !only(&pi.Provider) {
				continue
			}
			id := pi.ID()
			if views[id] == nil {
				views[id] = make([]*statemachine.ProviderInfo, len(parts))
			}
			views[id][sh] = pi
		}
	}
	ids := make([]string, 0, len(views))
	for id := range views {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var first error
	for _, id := range ids {
		if err := s.rebalanceProvider(views[id], now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// inMembers lists the shards a view counts in the pool.
func inMembers(pi *statemachine.ProviderInfo) []uint32 {
	var out []uint32
	for _, m := range pi.Members {
		if m.In {
			out = append(out, m.Shard)
		}
	}
	return out
}

// rebalanceProvider plans one provider's shares from every shard's view
// and hands them over when they would move. A provider some shard does
// not hold yet, or whose members or limits the shards do not agree on
// (a link or a limit change still on its way), waits for the next round.
func (s *Server) rebalanceProvider(view []*statemachine.ProviderInfo, now time.Time) error {
	var p statemachine.Provider
	var members []uint32
	var seen uint64
	for sh, pi := range view {
		if pi == nil {
			return nil
		}
		m := inMembers(pi)
		if sh == 0 {
			p, members = pi.Provider, m
		} else if pi.Provider != p || !slices.Equal(m, members) {
			return nil
		}
		seen = max(seen, pi.ShareGen)
	}
	if len(members) < 2 {
		return nil
	}
	pool := make([]statemachine.ShareMember, len(members))
	for i, sh := range members {
		if int(sh) >= len(view) {
			return nil
		}
		pi := view[sh]
		pool[i] = statemachine.ShareMember{Shard: sh, Share: pi.Share, Pending: pi.Pending,
			Held: statemachine.ProviderShare{RPM: pi.Requests, InputTPM: pi.InputTokens, OutputTPM: pi.OutputTokens}}
	}
	plan := statemachine.PlanShares(p, pool)
	if !statemachine.SharesDiffer(p, pool, plan) || !statemachine.ShareMoves(p, pool, plan) {
		return nil
	}
	_, err := statemachine.HandOver(p, nextShareGen(seen, now), members, plan, func(sh uint32, op *statemachine.ProviderShareOp) (statemachine.Result, error) {
		rs, aerr := s.propose(int(sh), op)
		if aerr != nil {
			return statemachine.Result{}, aerr
		}
		return rs[0], nil
	})
	if errors.Is(err, statemachine.ErrShareConflict) {
		return nil // members or shares moved meanwhile: read again next round
	}
	return err
}
