package statemachine

import (
	"errors"
	"fmt"
	"slices"
)

// Rebalancing a provider's shares by demand (the gateway runs it on one
// node, gateway/providershare.go): PlanShares says what each member of a
// pool should have, HandOver moves the shares there without letting the
// members together exceed a limit.
//
// The invariant: for each limit L, Σ over members of max(share, held) ≤
// L at every moment, where held is what the member's window holds — a
// member may hand out at most share − held more, and what it holds stays
// in its window however its share changes. Between ops that raise a
// share, no member's max(share, held) grows: a lowered share takes back
// nothing, and held grows only up to the share.

// limits returns a share's three limits in a fixed order.
func (s ProviderShare) limits() [3]int64 { return [3]int64{s.RPM, s.InputTPM, s.OutputTPM} }

func shareOf(v [3]int64) ProviderShare {
	return ProviderShare{RPM: v[0], InputTPM: v[1], OutputTPM: v[2]}
}

// ShareMember is one member of a provider's pool as the rebalancer read
// it: its shard, its share, what its windows hold and how many jobs wait
// in its linked queues.
type ShareMember struct {
	Shard   uint32
	Share   ProviderShare
	Held    ProviderShare
	Pending int64
}

// ShareFloorDiv: an idle member keeps at least 1/ShareFloorDiv of its
// equal split (and at least 1), so a job that arrives there is fetched
// and the member asks for more at the next rebalance.
const ShareFloorDiv = 20

// busy reports whether the member's demand is more than its share gives:
// more jobs wait than its request window has room for (with no request
// limit, any job waiting). A job arriving at an idle member that its
// floor covers leaves it idle, and the busy members their shares.
func (m ShareMember) busy() bool {
	if m.Pending <= 0 {
		return false
	}
	if m.Share.RPM >= 0 {
		return m.Pending > max(m.Share.RPM-m.Held.RPM, 0)
	}
	return true
}

// PlanShares is what each member (in the order given) should have of the
// provider's limits. A member with more jobs waiting than its request
// window has room for is busy; an idle one is
// planned what its window holds plus a quarter (its recent use, with
// room to grow), at least the floor; the busy ones split the rest
// equally. With no busy member, or all busy, or too little to go round,
// the plan is the equal split (the shares without rebalancing).
func PlanShares(p Provider, members []ShareMember) []ProviderShare {
	n := int64(len(members))
	out := make([][3]int64, n)
	lim := [3]int64{p.RPM, p.InputTPM, p.OutputTPM}
	busy := int64(0)
	for _, m := range members {
		if m.busy() {
			busy++
		}
	}
	for k, l := range lim {
		if l == 0 {
			for i := range out {
				out[i][k] = -1
			}
			continue
		}
		equal := func() {
			for i := range out {
				out[i][k] = l / n
				if int64(i) < l%n {
					out[i][k]++
				}
			}
		}
		floor := max(l/n/ShareFloorDiv, 1)
		if busy == 0 || busy == n || l < 2*n {
			equal()
			continue
		}
		var idle int64
		for i, m := range members {
			if !m.busy() {
				h := m.Held.limits()[k]
				out[i][k] = min(max(floor, h+h/4), l)
				idle += out[i][k]
			}
		}
		rest := l - idle
		if rest < busy*floor {
			equal()
			continue
		}
		j := int64(0)
		for i, m := range members {
			if m.busy() {
				out[i][k] = rest / busy
				if j < rest%busy {
					out[i][k]++
				}
				j++
			}
		}
	}
	shares := make([]ProviderShare, n)
	for i := range out {
		shares[i] = shareOf(out[i])
	}
	return shares
}

// SharesDiffer reports whether the plan moves some member's share by more
// than a fiftieth of its limit (any change, for limits under 50): less
// is not worth Raft traffic.
func SharesDiffer(p Provider, members []ShareMember, plan []ProviderShare) bool {
	lim := [3]int64{p.RPM, p.InputTPM, p.OutputTPM}
	for i, m := range members {
		cur, want := m.Share.limits(), plan[i].limits()
		for k, l := range lim {
			d := cur[k] - want[k]
			if l > 0 && max(d, -d) > l/50 {
				return true
			}
		}
	}
	return false
}

// ShareMoves reports whether a hand-over to plan would move anything, as
// far as the members' view tells: some member is planned less than it
// has, or one is planned more and the limit has room beyond what the
// members have or hold. (A hand-over that could do neither would only
// renew the generations.)
func ShareMoves(p Provider, members []ShareMember, plan []ProviderShare) bool {
	lim := [3]int64{p.RPM, p.InputTPM, p.OutputTPM}
	free := lim
	grows := [3]bool{}
	for i, m := range members {
		cur, held, want := m.Share.limits(), m.Held.limits(), plan[i].limits()
		for k, l := range lim {
			if l == 0 {
				continue
			}
			if want[k] < cur[k] {
				return true
			}
			grows[k] = grows[k] || want[k] > max(cur[k], held[k])
			free[k] -= max(cur[k], held[k])
		}
	}
	for k := range lim {
		if grows[k] && free[k] > 0 {
			return true
		}
	}
	return false
}

// ShareProposer commits op to shard sh and returns its result.
type ShareProposer func(sh uint32, op *ProviderShareOp) (Result, error)

// ErrShareConflict: a member refused the hand-over's first stage (its
// members differ from the plan's, or another hand-over moved its share
// since); nothing was raised, the next rebalance reads again.
var ErrShareConflict = errors.New("a member refused the share hand-over")

// HandOver moves the pool's shares toward plan (one per member, members
// sorted by shard) under generation gen, newer than any used before, in
// two stages:
//
//  1. Every member is lowered to its plan (each limit to the smaller of
//     its share and the plan: a growing member keeps its share). Its
//     answer, from its apply, gives its share s and what its window held
//     h; from then on max(share, held) there stays at most max(s, h)
//     until a raise under gen.
//  2. Each member planned more than s is raised, in shard order, by at
//     most what L − Σ max(s, h) leaves, only if its share's generation is
//     still gen (no other hand-over lowered it since, and thus none
//     computed its room without this raise).
//
// It returns each member's share afterwards.
func HandOver(p Provider, gen uint64, members []uint32, plan []ProviderShare, propose ShareProposer) ([]ProviderShare, error) {
	if len(plan) != len(members) || !slices.IsSorted(members) {
		return nil, errors.New("a share plan needs one share per member, members sorted")
	}
	lim := [3]int64{p.RPM, p.InputTPM, p.OutputTPM}
	got := make([]ProviderShareState, len(members))
	for i, sh := range members {
		r, err := propose(sh, &ProviderShareOp{Namespace: p.Namespace, Name: p.Name, Gen: gen, Members: members, Share: plan[i]})
		if err != nil {
			return nil, err
		}
		if r.Status != StatusOK || r.Share == nil {
			return nil, fmt.Errorf("%w: shard %d: %s", ErrShareConflict, sh, r.Message)
		}
		got[i] = *r.Share
	}
	after := make([][3]int64, len(members))
	free := lim
	for i := range got {
		after[i] = got[i].Share.limits()
		held := got[i].Held.limits()
		for k := range lim {
			free[k] -= max(after[i][k], held[k])
		}
	}
	for i, sh := range members {
		want, held := plan[i].limits(), got[i].Held.limits()
		next, raise := after[i], false
		for k, l := range lim {
			if l == 0 || free[k] <= 0 {
				continue
			}
			base := max(after[i][k], held[k])
			if add := min(want[k]-base, free[k]); add > 0 {
				next[k] = base + add
				free[k] -= add
				raise = true
			}
		}
		if !raise {
			continue
		}
		r, err := propose(sh, &ProviderShareOp{Namespace: p.Namespace, Name: p.Name, Gen: gen, Members: members, Share: shareOf(next), Raise: true})
		if err != nil {
			return nil, err
		}
		if r.Status != StatusOK || r.Share == nil {
			// Another hand-over lowered it since: that one counts it at
			// the share it read, so this one must not raise it.
			continue
		}
		after[i] = r.Share.Share.limits()
	}
	out := make([]ProviderShare, len(members))
	for i := range after {
		out[i] = shareOf(after[i])
	}
	return out, nil
}
