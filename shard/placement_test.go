package shard

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/corvohq/corvo/auth"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/stretchr/testify/require"
)

// metaApply runs one command through a meta state machine.
func metaApply(t *testing.T, m sm.IStateMachine, c metaCmd) sm.Result {
	t.Helper()
	b, err := json.Marshal(c)
	require.NoError(t, err)
	res, err := m.Update(sm.Entry{Cmd: b})
	require.NoError(t, err)
	return res
}

func metaState(t *testing.T, m sm.IStateMachine) MetaState {
	t.Helper()
	v, err := m.Lookup(metaQuery{})
	require.NoError(t, err)
	return v.(MetaState)
}

// settle plans and applies placement steps, settling each (as the shards'
// leaders would), until nothing is left; it returns how many steps it took
// and every replica ID ever placed per shard.
func settle(t *testing.T, m sm.IStateMachine, seen map[int]map[uint64]bool) int {
	t.Helper()
	steps := 0
	for {
		st := metaState(t, m)
		for i, sp := range st.Placement {
			if sp.Settled != sp.Version {
				metaApply(t, m, metaCmd{Op: "settled", Shard: i, Version: sp.Version})
			}
		}
		st = metaState(t, m)
		p, gen := planPlacement(st)
		if p == nil {
			return steps
		}
		steps++
		require.Less(t, steps, 50, "placement does not converge")
		// A stale plan (wrong version) is ignored.
		metaApply(t, m, metaCmd{Op: "place", Placement: p, Expect: st.PlacementVersion + 7, NextGen: gen})
		require.Equal(t, st.PlacementVersion, metaState(t, m).PlacementVersion)
		metaApply(t, m, metaCmd{Op: "place", Placement: p, Expect: st.PlacementVersion, NextGen: gen})
		for i, sp := range metaState(t, m).Placement {
			for _, r := range sp.Replicas {
				if seen[i] == nil {
					seen[i] = map[uint64]bool{}
				}
				seen[i][r.ID] = true
			}
		}
	}
}

// checkBalanced: every shard has min(R, N) replicas on distinct live nodes,
// and the nodes' replica counts differ by at most one.
func checkBalanced(t *testing.T, st MetaState) map[uint64]int {
	t.Helper()
	live := st.Live()
	want := min(st.Replicas, len(live))
	load := map[uint64]int{}
	for _, n := range live {
		load[n.ID] = 0
	}
	for i, sp := range st.Placement {
		require.Len(t, sp.Replicas, want, "shard %d", i)
		nodes := map[uint64]bool{}
		for _, r := range sp.Replicas {
			require.False(t, nodes[r.Node], "shard %d has two replicas on node %d", i, r.Node)
			nodes[r.Node] = true
			_, ok := load[r.Node]
			require.True(t, ok, "shard %d placed on node %d, which is not live", i, r.Node)
			load[r.Node]++
			require.Equal(t, r.Node, NodeOf(r.ID))
		}
	}
	lo, hi := 1<<30, 0
	for _, c := range load {
		lo, hi = min(lo, c), max(hi, c)
	}
	require.LessOrEqual(t, hi-lo, 1, "loads %v", load)
	return load
}

// TestPlacementGrowsBalancesAndShrinks: one node, then three, then five
// (shards spread so every node hosts 2–3 of 8×3 replicas), then two nodes
// removed: every step keeps each shard on min(R, N) distinct live nodes, and
// a replica ID placed once is never placed again after it left.
func TestPlacementGrowsBalancesAndShrinks(t *testing.T) {
	t.Parallel()
	var keys atomic.Pointer[auth.State]
	m := newMetaSM(&keys)(MetaShardID, 1)
	metaApply(t, m, metaCmd{Op: "init", Shards: 8, Replicas: 3, Node: Node{ID: 1, RaftAddr: "a1"}})
	st := metaState(t, m)
	require.True(t, st.Settled())
	p, _ := planPlacement(st)
	require.Nil(t, p, "a single founder is placed already")
	checkBalanced(t, st)

	seen := map[int]map[uint64]bool{}
	for _, addr := range []string{"a2", "a3"} {
		metaApply(t, m, metaCmd{Op: "register", Node: Node{RaftAddr: addr}})
	}
	settle(t, m, seen)
	load := checkBalanced(t, metaState(t, m))
	require.Equal(t, map[uint64]int{1: 8, 2: 8, 3: 8}, load)

	for _, addr := range []string{"a4", "a5"} {
		metaApply(t, m, metaCmd{Op: "register", Node: Node{RaftAddr: addr}})
	}
	steps := settle(t, m, seen)
	require.Greater(t, steps, 1, "moves go one at a time")
	load = checkBalanced(t, metaState(t, m))
	require.Positive(t, load[4])
	require.Positive(t, load[5])

	before := metaState(t, m).Placement
	metaApply(t, m, metaCmd{Op: "remove", Node: Node{ID: 2}})
	st = metaState(t, m)
	for i, sp := range st.Placement {
		require.Equal(t, -1, sp.index(2), "shard %d still lists the removed node", i)
		if (&before[i]).index(2) >= 0 {
			require.NotEqual(t, sp.Settled, sp.Version, "shard %d lost a replica: it must be reconciled", i)
		}
	}
	// A wiped node rejoining from the same address replaces node 3.
	metaApply(t, m, metaCmd{Op: "register", Node: Node{RaftAddr: "a3"}})
	settle(t, m, seen)
	st = metaState(t, m)
	checkBalanced(t, st)
	require.Len(t, st.Live(), 4)
	for i, sp := range st.Placement {
		for _, r := range sp.Replicas {
			require.NotContains(t, []uint64{2, 3}, r.Node, "shard %d", i)
		}
	}
	// IDs are unique per shard across its whole history.
	total := 0
	for _, ids := range seen {
		total += len(ids)
	}
	require.Greater(t, total, 8*3)
}

// TestPlacementAdoptsAClusterFromBeforePlacement: a meta state without a
// placement (every node hosted every shard) gets one listing every live
// node under replica ID = node ID, to be settled by the shards' leaders.
func TestPlacementAdoptsAClusterFromBeforePlacement(t *testing.T) {
	t.Parallel()
	st := MetaState{Shards: 2, Replicas: 3, NextID: 3, Nodes: map[uint64]*Node{1: {ID: 1}, 2: {ID: 2}}}
	p, gen := planPlacement(st)
	require.Len(t, p, 2)
	for _, sp := range p {
		require.Equal(t, []Replica{{Node: 1, ID: 1}, {Node: 2, ID: 2}}, sp.Replicas)
		require.Equal(t, uint64(1), sp.Version)
		require.Zero(t, sp.Settled)
	}
	require.Equal(t, uint64(1), gen)
	require.Equal(t, []uint64{1, 2}, st.NodesOf(0))
}

// Leader spreading counts other nodes' leaderships as they report them:
// two nodes that each see only some shards never hand a leadership back
// and forth.
func TestPickLeaderMoveUsesReportedCounts(t *testing.T) {
	alive := func(int, uint64) bool { return true }
	r := func(nodes ...uint64) []uint64 {
		out := make([]uint64, len(nodes))
		for i, n := range nodes {
			out[i] = ReplicaIDFor(n, 0)
		}
		return out
	}
	// 4 shards × 3 over 4 nodes. Node 1 leads shards 0 and 1 and hosts
	// 0,1,2; node 2 leads shard 3 (which node 1 does not host) and shard
	// 2. From its own view node 1 would count node 2 at 1 and move one.
	mine := []leadership{{shard: 0, replicas: r(1, 2, 3)}, {shard: 1, replicas: r(1, 2, 4)}}
	reported := map[uint64]int{1: 2, 2: 2, 3: 0, 4: 0}
	count := func(n uint64) int { return reported[n] }
	sh, to := pickLeaderMove(1, mine, count, alive)
	require.NotZero(t, to)
	require.Contains(t, []uint64{3, 4}, NodeOf(to), "to a node leading none")
	require.Contains(t, []int{0, 1}, sh)

	// Balanced by the reported counts: no move, although node 1's own
	// view (it sees no leader on node 4) would suggest one.
	reported = map[uint64]int{1: 1, 2: 1, 3: 1, 4: 1}
	_, to = pickLeaderMove(1, mine[:1], count, alive)
	require.Zero(t, to)

	// The ping-pong the local view caused: node 1 leads shard 0, node 2
	// leads shards 1 and 3; each sees the other lead nothing of the
	// shards it hosts. With the reported counts (1 vs 2) neither moves.
	reported = map[uint64]int{1: 1, 2: 2, 3: 0, 4: 1}
	_, to = pickLeaderMove(2, []leadership{{shard: 1, replicas: r(1, 2, 4)}, {shard: 3, replicas: r(2, 1, 4)}}, count, alive)
	require.Zero(t, to)

	// A dead node is never picked, and a one-shard difference is no reason.
	reported = map[uint64]int{1: 3, 2: 0, 3: 2}
	_, to = pickLeaderMove(1, []leadership{{shard: 0, replicas: r(1, 2, 3)}}, count, func(_ int, n uint64) bool { return n != 2 })
	require.Zero(t, to)
}

// TestPickLeaderMoveOnlyToAFollower: a leadership goes only to a replica
// that hears this node as the shard's leader. A node just back from a
// partition answers its probes before its Raft links are up; a transfer
// to it stalled the shard's writes for an election timeout, again every
// second, for as long as the links took (a 16 s write in CI's partition
// test).
func TestPickLeaderMoveOnlyToAFollower(t *testing.T) {
	r := func(nodes ...uint64) []uint64 {
		out := make([]uint64, len(nodes))
		for i, n := range nodes {
			out[i] = ReplicaIDFor(n, 0)
		}
		return out
	}
	reported := map[uint64]int{1: 3, 2: 0, 3: 2} // only node 2 leads two fewer
	count := func(n uint64) int { return reported[n] }
	mine := []leadership{{shard: 0, replicas: r(1, 2, 3)}, {shard: 1, replicas: r(1, 2, 3)}, {shard: 3, replicas: r(1, 2, 3)}}

	// Node 2 follows node 1 in no shard yet: no move.
	follows := map[int]bool{}
	ready := func(sh int, n uint64) bool { return n != 2 || follows[sh] }
	_, to := pickLeaderMove(1, mine, count, ready)
	require.Zero(t, to)

	// It hears node 1 in shard 3 only: shard 3 goes to it.
	follows[3] = true
	sh, to := pickLeaderMove(1, mine, count, ready)
	require.Equal(t, 3, sh)
	require.Equal(t, uint64(2), NodeOf(to))
}

func TestMetaSnapshotKeepsKeys(t *testing.T) {
	var keys atomic.Pointer[auth.State]
	m := newMetaSM(&keys)(MetaShardID, 1)
	_, id, hash := auth.NewKey()
	b, _ := json.Marshal(metaCmd{Op: "auth", Auth: &auth.Cmd{Op: "put", Key: &auth.Key{ID: id, Hash: hash, Name: "a", Role: auth.RoleAdmin, Enabled: true}}})
	res, err := m.Update(sm.Entry{Cmd: b})
	require.NoError(t, err)
	require.Equal(t, uint64(1), res.Value)
	require.Equal(t, 1, keys.Load().Len())
	var buf bytes.Buffer
	require.NoError(t, m.SaveSnapshot(&buf, nil, nil))

	var keys2 atomic.Pointer[auth.State]
	m2 := newMetaSM(&keys2)(MetaShardID, 2)
	require.Equal(t, 0, keys2.Load().Len())
	require.NoError(t, m2.RecoverFromSnapshot(&buf, nil, nil))
	k, ok := keys2.Load().Key(id)
	require.True(t, ok, "the snapshot lost the key table")
	require.Equal(t, hash, k.Hash)
}
