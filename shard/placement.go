package shard

import (
	"slices"
	"sort"
)

// Placement: which nodes host a replica of each shard. The meta group
// records it (MetaState.Placement); the meta leader plans it one step at a
// time (planPlacement, proposed by reconcileMeta); each shard's leader makes
// the shard's Raft membership follow it (reconcileShard: add the new replica
// non-voting, and once every placed replica votes, delete the ones no
// longer placed); each node starts the replicas placed on it and stops
// those taken away from it (followPlacement). A move is therefore always
// add → catch up → promote → remove, and a shard never has fewer voters
// than its placement asks for while it moves.

// Replica is one placed replica of a shard: the node that runs it and its
// Raft replica ID in that shard's group.
type Replica struct {
	Node uint64 `json:"node"`
	ID   uint64 `json:"id"`
}

// ShardPlacement is where one shard's replicas go. Version grows with every
// change of Replicas; Settled is the version the shard's leader last found
// its membership equal to (a plan moves on only when every shard settled).
type ShardPlacement struct {
	Replicas []Replica `json:"replicas"`
	Version  uint64    `json:"version"`
	Settled  uint64    `json:"settled"`
}

// ReplicaIDFor is the Raft replica ID of node's replica of generation gen.
// dragonboat never lets a removed replica ID back into its group, so a node
// that hosts a shard again gets a new generation; the founder's first
// replicas (and every replica of a cluster created before placement) are
// generation 0, whose replica ID is the node ID.
func ReplicaIDFor(node, gen uint64) uint64 { return node | gen<<32 }

// NodeOf is the node that runs replica id.
func NodeOf(id uint64) uint64 { return id & (1<<32 - 1) }

func clonePlacement(p []ShardPlacement) []ShardPlacement {
	if p == nil {
		return nil
	}
	out := make([]ShardPlacement, len(p))
	for i := range p {
		out[i] = p[i]
		out[i].Replicas = slices.Clone(p[i].Replicas)
	}
	return out
}

// unplace drops node's replicas from the placement (it left the cluster).
func (m *MetaState) unplace(node uint64) {
	for i := range m.Placement {
		sp := &m.Placement[i]
		if k := sp.index(node); k >= 0 {
			sp.Replicas = slices.Delete(sp.Replicas, k, k+1)
			sp.Version++
		}
	}
}

// index is the position of node's replica, or -1.
func (sp *ShardPlacement) index(node uint64) int {
	for k, r := range sp.Replicas {
		if r.Node == node {
			return k
		}
	}
	return -1
}

// ReplicaOf is node's replica of shard i in the placement.
func (m MetaState) ReplicaOf(i int, node uint64) (Replica, bool) {
	if i < 0 || i >= len(m.Placement) {
		return Replica{}, false
	}
	if k := m.Placement[i].index(node); k >= 0 {
		return m.Placement[i].Replicas[k], true
	}
	return Replica{}, false
}

// NodesOf lists the nodes placed to host shard i (every live node on a
// cluster whose placement is not recorded yet).
func (m MetaState) NodesOf(i int) []uint64 {
	if m.Placement == nil {
		var out []uint64
		for _, n := range m.Live() {
			out = append(out, n.ID)
		}
		return out
	}
	if i < 0 || i >= len(m.Placement) {
		return nil
	}
	out := make([]uint64, 0, len(m.Placement[i].Replicas))
	for _, r := range m.Placement[i].Replicas {
		out = append(out, r.Node)
	}
	return out
}

// Settled reports whether every shard's membership matches its placement.
func (m MetaState) Settled() bool {
	if m.Placement == nil {
		return false
	}
	for _, sp := range m.Placement {
		if sp.Settled != sp.Version {
			return false
		}
	}
	return true
}

// planPlacement is the next step towards a placement where every shard has
// min(Replicas, live nodes) replicas on distinct live nodes and the nodes'
// replica counts differ by at most one. It returns nil when there is
// nothing to do, or while an earlier step has not settled. A step fills
// every under-replicated shard at once, or trims over-replicated ones, or
// moves one replica from the busiest node to the idlest. It is a pure
// function of st, so any meta leader plans the same step.
func planPlacement(st MetaState) ([]ShardPlacement, uint64) {
	live := st.Live()
	if len(live) == 0 || st.Shards == 0 {
		return nil, 0
	}
	gen := max(st.NextGen, 1)
	if st.Placement == nil {
		// A cluster created before placement: every live node hosts
		// every shard, under replica ID = node ID.
		p := make([]ShardPlacement, st.Shards)
		for i := range p {
			for _, n := range live {
				p[i].Replicas = append(p[i].Replicas, Replica{Node: n.ID, ID: n.ID})
			}
			p[i].Version = 1
		}
		return p, gen
	}
	if !st.Settled() {
		return nil, 0
	}
	want := min(max(st.Replicas, 1), len(live))
	p := clonePlacement(st.Placement)
	load := make(map[uint64]int, len(live))
	ids := make([]uint64, 0, len(live))
	for _, n := range live {
		load[n.ID] = 0
		ids = append(ids, n.ID)
	}
	for i := range p {
		for _, r := range p[i].Replicas {
			load[r.Node]++
		}
	}
	// byLoad orders nodes least loaded first (ties: lowest ID).
	byLoad := func() []uint64 {
		out := slices.Clone(ids)
		sort.SliceStable(out, func(a, b int) bool { return load[out[a]] < load[out[b]] })
		return out
	}
	add := func(i int, node uint64) {
		p[i].Replicas = append(p[i].Replicas, Replica{Node: node, ID: ReplicaIDFor(node, gen)})
		gen++
		load[node]++
	}
	changed := false
	for i := range p {
		grown := false
		for len(p[i].Replicas) < want {
			picked := false
			for _, n := range byLoad() {
				if p[i].index(n) < 0 {
					add(i, n)
					picked = true
					break
				}
			}
			if !picked {
				break
			}
			grown = true
		}
		if grown {
			p[i].Version++
			changed = true
		}
	}
	if changed {
		return p, gen
	}
	for i := range p {
		if len(p[i].Replicas) <= want {
			continue
		}
		for len(p[i].Replicas) > want {
			order := byLoad()
			for k := len(order) - 1; k >= 0; k-- {
				if j := p[i].index(order[k]); j >= 0 {
					p[i].Replicas = slices.Delete(p[i].Replicas, j, j+1)
					load[order[k]]--
					break
				}
			}
		}
		p[i].Version++
		changed = true
	}
	if changed {
		return p, gen
	}
	order := byLoad()
	lo, hi := order[0], order[len(order)-1]
	if load[hi]-load[lo] < 2 {
		return nil, 0
	}
	for i := range p {
		j := p[i].index(hi)
		if j < 0 || p[i].index(lo) >= 0 {
			continue
		}
		p[i].Replicas = slices.Delete(p[i].Replicas, j, j+1)
		load[hi]--
		add(i, lo)
		p[i].Version++
		return p, gen
	}
	return nil, 0
}
