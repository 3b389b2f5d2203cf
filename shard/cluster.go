package shard

import (
	"github.com/corvohq/corvo/auth"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// Cluster membership, leadership spreading and status. Every node hosts a
// replica of the meta group; data shards are placed on Replicas nodes each
// (placement.go, replicas.go); dragonboat does the replication, elections
// and snapshot streaming.

// JoinInfo is what a node learns when the cluster adds it.
type JoinInfo struct {
	NodeID   uint64 `json:"node_id"`
	Shards   int    `json:"shards"`
	Replicas int    `json:"replicas"`
	// Learner: the node was added as a non-voting replica and must
	// promote itself once caught up (shard.Config.Learner).
	Learner bool `json:"learner"`
}

// ErrNotInitialised: the meta group has not recorded the cluster's settings
// yet (the bootstrap node is still starting); retry.
var ErrNotInitialised = errors.New("the cluster is still starting")

// groups lists every Raft group this node runs a replica of: the meta
// group first.
func (h *Host) groups() []uint64 {
	ids := []uint64{MetaShardID}
	for i := 0; i < h.cfg.Shards; i++ {
		if h.rep[i].Load() != 0 {
			ids = append(ids, ShardID(i))
		}
	}
	return ids
}

// replicaIn is this node's replica ID in group g (0: none).
func (h *Host) replicaIn(g uint64) uint64 {
	if g == MetaShardID {
		return h.cfg.NodeID
	}
	if i := int(g) - 1; i >= 0 && i < h.cfg.Shards {
		return h.rep[i].Load()
	}
	return 0
}

// NodeID is this node's replica ID in every group.
func (h *Host) NodeID() uint64 { return h.cfg.NodeID }

// Meta returns the meta group's state as this node's replica has it.
func (h *Host) Meta() (MetaState, error) {
	v, err := h.nh.StaleRead(MetaShardID, metaQuery{})
	if err != nil {
		return MetaState{}, err
	}
	return v.(MetaState), nil
}

// retryTemp runs f until it succeeds, fails for good, or ctx ends. Raft
// operations fail temporarily while a group has no leader.
func retryTemp(ctx context.Context, closing <-chan struct{}, f func(ctx context.Context) error) error {
	backoff := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if !dragonboat.IsTempError(err) && !errors.Is(err, dragonboat.ErrTimeout) &&
			!errors.Is(err, dragonboat.ErrRejected) && !errors.Is(err, dragonboat.ErrAborted) &&
			!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dragonboat.ErrShardNotReady) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-closing:
			return ErrClosed
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

func (h *Host) proposeMeta(ctx context.Context, c metaCmd) (sm.Result, error) {
	b, _ := json.Marshal(c)
	var res sm.Result
	err := retryTemp(ctx, h.closing, func(ctx context.Context) error {
		var err error
		res, err = h.nh.SyncPropose(ctx, h.nh.GetNoOPSession(MetaShardID), b)
		return err
	})
	return res, err
}

// Keys is the cluster's API key table as this node's meta replica applied
// it: a lock-free read for every request (auth.State is immutable).
func (h *Host) Keys() *auth.State {
	if st := h.keys.Load(); st != nil {
		return st
	}
	return auth.Empty
}

// ProposeKeys commits a change to the key table through the meta group;
// changed is false when it changed nothing (a put over an existing ID, a
// change to a missing key). When it returns, Keys on this node shows it.
func (h *Host) ProposeKeys(ctx context.Context, c auth.Cmd) (changed bool, err error) {
	res, err := h.proposeMeta(ctx, metaCmd{Op: "auth", Auth: &c})
	return res.Value == 1, err
}

// proposeMetaOnce makes one meta proposal attempt (the placement loop
// retries on its next round).
func (h *Host) proposeMetaOnce(ctx context.Context, c metaCmd) (sm.Result, error) {
	b, _ := json.Marshal(c)
	return h.nh.SyncPropose(ctx, h.nh.GetNoOPSession(MetaShardID), b)
}

// AddNode registers a node in the meta group and adds it as a non-voting
// replica of the meta group. The new node starts it in join mode, catches
// up and promotes itself to a voter (promoteSelf): until then it is in no
// quorum, so adding a node never pauses writes. The meta leader then places
// shard replicas on it (planPlacement), which it starts as they come. A
// node that joins again from the same Raft address (it was wiped) replaces
// its old replicas.
func (h *Host) AddNode(ctx context.Context, name, raftAddr, httpAddr string) (JoinInfo, error) {
	st, err := h.Meta()
	if err != nil {
		return JoinInfo{}, err
	}
	if st.Shards == 0 {
		return JoinInfo{}, ErrNotInitialised
	}
	res, err := h.proposeMeta(ctx, metaCmd{Op: "register", Node: Node{Name: name, RaftAddr: raftAddr, HTTPAddr: httpAddr}})
	if err != nil {
		return JoinInfo{}, fmt.Errorf("register node: %w", err)
	}
	var rr registerResult
	if err := json.Unmarshal(res.Data, &rr); err != nil || rr.ID == 0 {
		return JoinInfo{}, fmt.Errorf("register node: bad meta result")
	}
	if rr.Replaces != 0 {
		// Its data shards' replicas leave through the placement.
		if err := h.deleteReplica(ctx, MetaShardID, rr.Replaces); err != nil {
			return JoinInfo{}, fmt.Errorf("remove the replica %d it replaces from the meta group: %w", rr.Replaces, err)
		}
	}
	if err := h.addNonVoting(ctx, MetaShardID, rr.ID, raftAddr); err != nil {
		return JoinInfo{}, fmt.Errorf("add node %d to the meta group: %w", rr.ID, err)
	}
	h.log.Info().Uint64("node", rr.ID).Str("name", name).Str("raft", raftAddr).Uint64("replaces", rr.Replaces).Msg("node added to the cluster (non-voting until it has caught up)")
	return JoinInfo{NodeID: rr.ID, Shards: st.Shards, Replicas: st.Replicas, Learner: true}, nil
}

// promoteSelf turns this node's non-voting replicas into voters. Data
// shards go first and the meta group last; a group where it already votes
// is skipped, so it is cheap on every start, and a node that crashed
// halfway promotes the rest on its next start.
func (h *Host) promoteSelf(ctx context.Context) error {
	h.localMu.Lock()
	var gs []uint64
	for i, r := range h.local {
		if r.NonVoting {
			gs = append(gs, ShardID(i))
		}
	}
	h.localMu.Unlock()
	if h.cfg.Learner {
		gs = append(gs, MetaShardID)
	}
	for _, g := range gs {
		if err := h.addReplica(ctx, g, h.replicaIn(g), h.cfg.RaftAddress); err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
	}
	return nil
}

// RemoveNode marks a node removed in the registry (its ID is never
// reused). The placement drops its replicas in the same command: each
// shard's leader deletes them, and the meta leader then places
// replacements elsewhere. Once no shard has the node in its group any more
// it leaves the meta group too (or RemoveNode fails when ctx ends first).
// The node itself should be stopped.
func (h *Host) RemoveNode(ctx context.Context, id uint64) error {
	if id == h.cfg.NodeID {
		return errors.New("a node cannot remove itself; ask another member")
	}
	st, err := h.Meta()
	if err != nil {
		return err
	}
	n, ok := st.Nodes[id]
	if !ok || n.Removed {
		return fmt.Errorf("no node %d in the cluster", id)
	}
	if len(st.Live()) <= 1 {
		return errors.New("cannot remove the last node")
	}
	if _, err := h.proposeMeta(ctx, metaCmd{Op: "remove", Node: Node{ID: id}}); err != nil {
		return err
	}
	// Data shards first, the meta group last: a removed node that leads a
	// shard learns from the meta group that it must hand that leadership
	// over before its replica can be deleted.
	for {
		if st, err := h.Meta(); err == nil && st.Settled() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d is removed, but its replicas are still being moved: %w", id, ctx.Err())
		case <-h.closing:
			return ErrClosed
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := h.deleteReplica(ctx, MetaShardID, id); err != nil {
		return fmt.Errorf("remove node %d from the meta group: %w", id, err)
	}
	return nil
}

// addReplica makes id a voting member of group: it adds it, or promotes
// it when it is a non-voting one. Done already: nothing to do.
func (h *Host) addReplica(ctx context.Context, group, id uint64, addr string) error {
	return h.addMember(ctx, group, id, addr, false)
}

// addNonVoting adds id to group as a non-voting member (nothing to do when
// it is a member of either kind).
func (h *Host) addNonVoting(ctx context.Context, group, id uint64, addr string) error {
	return h.addMember(ctx, group, id, addr, true)
}

func (h *Host) addMember(ctx context.Context, group, id uint64, addr string, nonVoting bool) error {
	return retryTemp(ctx, h.closing, func(ctx context.Context) error {
		m, err := h.nh.SyncGetShardMembership(ctx, group)
		if err != nil {
			return err
		}
		_, voter := m.Nodes[id]
		_, learner := m.NonVotings[id]
		if voter || (nonVoting && learner) {
			return nil
		}
		if _, ok := m.Removed[id]; ok {
			return fmt.Errorf("replica %d was removed from group %d and cannot come back", id, group)
		}
		if nonVoting {
			return h.nh.SyncRequestAddNonVoting(ctx, group, id, addr, m.ConfigChangeID)
		}
		return h.nh.SyncRequestAddReplica(ctx, group, id, addr, m.ConfigChangeID)
	})
}

func (h *Host) deleteReplica(ctx context.Context, group, id uint64) error {
	return retryTemp(ctx, h.closing, func(ctx context.Context) error {
		m, err := h.nh.SyncGetShardMembership(ctx, group)
		if err != nil {
			return err
		}
		_, voting := m.Nodes[id]
		_, nonVoting := m.NonVotings[id]
		if !voting && !nonVoting {
			return nil
		}
		return h.nh.SyncRequestDeleteReplica(ctx, group, id, m.ConfigChangeID)
	})
}

// untilClosing is a context that ends when the host starts closing (or
// cancel is called).
func (h *Host) untilClosing() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-h.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// registerSelf records this node's settings in the meta group: the
// bootstrap node initialises the cluster, and a node whose HTTP address
// changed updates it. It retries in the background until the meta group
// has a quorum.
func (h *Host) registerSelf() {
	defer h.wg.Done()
	ctx, cancel := h.untilClosing()
	defer cancel()
	self := Node{ID: h.cfg.NodeID, Name: h.cfg.NodeName, RaftAddr: h.cfg.RaftAddress, HTTPAddr: h.cfg.HTTPAddress}
	for ctx.Err() == nil {
		if st, err := h.Meta(); err == nil {
			var c *metaCmd
			n := st.Nodes[self.ID]
			switch {
			case st.Shards == 0 && !h.cfg.Join:
				c = &metaCmd{Op: "init", Shards: h.cfg.Shards, Replicas: h.cfg.Replicas, Node: self}
			case st.Shards == 0:
				// A joined node waits for its meta replica to catch up.
			case n != nil && !n.Removed && n.HTTPAddr != self.HTTPAddr:
				c = &metaCmd{Op: "address", Node: self}
			default:
				return
			}
			if c != nil {
				if _, err := h.proposeMeta(ctx, *c); err == nil {
					continue
				}
			}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// shardInfos is every group's state as this node's replicas see it.
func (h *Host) shardInfos() map[uint64]dragonboat.ShardInfo {
	info := h.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
	out := make(map[uint64]dragonboat.ShardInfo, len(info.ShardInfoList))
	for _, si := range info.ShardInfoList {
		out[si.ShardID] = si
	}
	return out
}

// Peers is what spreading leaders knows of the other nodes, from their
// last probes (peer.Client).
type Peers interface {
	// Alive says whether node answers: a transfer to a dead node would
	// stall the shard for an election timeout.
	Alive(node uint64) bool
	// Leads is how many data shards node leads, as that node last
	// reported (ok false: not known). With placement a node sees the
	// leaders only of the shards it hosts, so counting from its own view
	// alone can ping-pong a leadership between two nodes that each see
	// the other lead nothing.
	Leads(node uint64) (int, bool)
	// Replica is what node's replica of data shard i said at its last
	// probe: the node it hears as the shard's leader (0: none, or the
	// shard not hosted there) and its applied index; known is false when
	// the node did not say (an older version). A replica that does not
	// hear the leader (a node just back from a partition answers HTTP
	// before its Raft links are up) or is still catching up cannot take
	// the leadership at once: the leader drops proposals while it waits,
	// up to an election timeout, and the next round would try again.
	Replica(node uint64, i int) (leader, applied uint64, known bool)
}

// transferCooldown is how long BalanceLeaders leaves a shard alone after
// asking to move its leadership, so that a transfer that does not happen
// (the target fell behind) stalls the shard's writes at most once per
// cooldown.
const transferCooldown = 10 * time.Second

// balanceRecent is how long BalanceLeaders's previous applied indexes
// stand for "a round ago" (rounds are a probe interval apart; with fewer
// than two live nodes there are none).
const balanceRecent = 3 * time.Second

// BalanceLeaders moves at most one leadership from this node to a live
// voter that leads at least two fewer data shards, so leaders spread
// evenly over the nodes. The voter must be ready: hearing this node as the
// shard's leader, and applied (at the probe that just ran) as far as this
// node had at the previous call, a probe interval ago. A shard asked to
// move less than transferCooldown ago is left alone. It reports whether it
// asked for a transfer.
func (h *Host) BalanceLeaders(p Peers) bool {
	infos := h.shardInfos()
	me := h.cfg.NodeID
	now := h.clock.Now().UnixNano()
	// was[i]: this node's applied index of shard i at the previous call
	// (+1; 0: no previous call, or too long ago to show a replica is
	// caught up now).
	was := make([]uint64, h.cfg.Shards)
	recent := now-h.balancedAt.Swap(now) < int64(balanceRecent)
	for i := range was {
		if recent {
			was[i] = h.balanceApplied[i].Load()
		}
		var applied uint64
		if s := h.sms[i].Load(); s != nil {
			applied = s.Applied()
		}
		h.balanceApplied[i].Store(applied + 1)
	}
	seen := map[uint64]int{} // leaderships by node, over the shards this node runs
	var mine []leadership
	led := 0
	for i := 0; i < h.cfg.Shards; i++ {
		si, ok := infos[ShardID(i)]
		if !ok || si.LeaderID == 0 {
			continue
		}
		seen[NodeOf(si.LeaderID)]++
		if si.LeaderID != h.rep[i].Load() {
			continue
		}
		led++
		if now-h.transferred[i].Load() < int64(transferCooldown) {
			continue
		}
		mine = append(mine, leadership{shard: i, replicas: sortedReplicaIDs(si.Replicas)})
	}
	count := func(n uint64) int {
		if n == me {
			return led
		}
		if c, ok := p.Leads(n); ok {
			return c
		}
		return seen[n]
	}
	ready := func(shard int, n uint64) bool {
		if !p.Alive(n) {
			return false
		}
		leader, applied, known := p.Replica(n, shard)
		return !known || leader == me && was[shard] != 0 && applied+1 >= was[shard]
	}
	sh, to := pickLeaderMove(me, mine, count, ready)
	if to == 0 {
		return false
	}
	h.transferred[sh].Store(now)
	if err := h.nh.RequestLeaderTransfer(ShardID(sh), to); err != nil {
		return false
	}
	h.log.Info().Int("shard", sh).Uint64("to", to).Msg("moving leadership to spread leaders")
	return true
}

// leadership is a data shard this node leads, with its replica IDs.
type leadership struct {
	shard    int
	replicas []uint64
}

// pickLeaderMove chooses one of this node's leaderships to hand to the
// ready replica (alive, and following this node) whose node leads the
// fewest shards, if that node leads at least two fewer than this one (so a
// move never just swaps the imbalance). It returns the replica ID 0 when
// no move helps.
func pickLeaderMove(me uint64, mine []leadership, count func(uint64) int, ready func(shard int, node uint64) bool) (shard int, to uint64) {
	for _, l := range mine {
		var best uint64
		for _, id := range l.replicas {
			n := NodeOf(id)
			if n == me || !ready(l.shard, n) {
				continue
			}
			if count(me)-count(n) >= 2 && (best == 0 || count(n) < count(NodeOf(best))) {
				best = id
			}
		}
		if best != 0 {
			return l.shard, best
		}
	}
	return 0, 0
}

// HandOff transfers every leadership this node holds to a live voter
// (one that follows this node when there is one) and waits (until ctx
// ends) for the transfers to finish, so a node that is about to stop does
// not take its shards' availability with it.
func (h *Host) HandOff(ctx context.Context, p Peers) int {
	me := h.cfg.NodeID
	moved := 0
	for ctx.Err() == nil {
		infos := h.shardInfos()
		counts := map[uint64]int{}
		for _, si := range infos {
			if si.LeaderID != 0 {
				counts[NodeOf(si.LeaderID)]++
			}
		}
		pending := 0
		for _, g := range h.groups() {
			si, ok := infos[g]
			if !ok || si.LeaderID == 0 || si.LeaderID != h.replicaIn(g) {
				continue
			}
			var best uint64
			bestFollows := false
			for _, id := range sortedReplicaIDs(si.Replicas) {
				n := NodeOf(id)
				if n == me || !p.Alive(n) {
					continue
				}
				follows := true // the meta group: nothing reported
				if g != MetaShardID {
					leader, _, known := p.Replica(n, int(g)-1)
					follows = !known || leader == me
				}
				if best == 0 || follows && !bestFollows || follows == bestFollows && counts[n] < counts[NodeOf(best)] {
					best, bestFollows = id, follows
				}
			}
			if best == 0 {
				continue // nobody to hand it to
			}
			pending++
			if h.nh.RequestLeaderTransfer(g, best) == nil {
				counts[NodeOf(best)]++
				moved++
			}
		}
		if pending == 0 {
			return moved
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return moved
}

// byNode re-keys a group's replicas (replica ID → address) by node ID.
func byNode(replicas map[uint64]string) map[uint64]string {
	out := make(map[uint64]string, len(replicas))
	for id, addr := range replicas {
		out[NodeOf(id)] = addr
	}
	return out
}

func sortedReplicaIDs(m map[uint64]string) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Quantiles are proposal latencies in milliseconds over the last proposals.
type Quantiles struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Count int     `json:"samples"`
}

// ShardStatus is one group as this node's replica sees it.
type ShardStatus struct {
	ShardID  uint64            `json:"shard_id"`
	Meta     bool              `json:"meta,omitempty"`
	LeaderID uint64            `json:"leader_node"`
	Term     uint64            `json:"term"`
	Members  map[uint64]string `json:"members"`
	// Learners are the group's non-voting replicas: nodes that joined and
	// are still catching up.
	Learners map[uint64]string `json:"learners,omitempty"`
	Applied  uint64            `json:"applied_index"`
	// ProposalLatency covers the proposals made from this node.
	ProposalLatency *Quantiles `json:"proposal_latency_ms,omitempty"`
}

// LocalStatus is this node's view of every group it hosts.
func (h *Host) LocalStatus() []ShardStatus {
	infos := h.shardInfos()
	out := make([]ShardStatus, 0, len(infos))
	for _, g := range h.groups() {
		si, ok := infos[g]
		if !ok {
			continue
		}
		st := ShardStatus{ShardID: g, Meta: g == MetaShardID, LeaderID: NodeOf(si.LeaderID), Term: si.Term, Members: byNode(si.Replicas)}
		if g != MetaShardID {
			i := int(g) - 1
			if s := h.sms[i].Load(); s != nil {
				st.Applied = s.Applied()
			}
			q := h.proposers[i].recent.quantiles()
			st.ProposalLatency = &q
		}
		out = append(out, st)
	}
	// dragonboat's ShardInfo lists voters only; the membership (a read
	// through each leader, all groups at once, 300 ms at most) has the
	// non-voting replicas too.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for k := range out {
		wg.Add(1)
		go func(st *ShardStatus) {
			defer wg.Done()
			if m, err := h.nh.SyncGetShardMembership(ctx, st.ShardID); err == nil && len(m.NonVotings) > 0 {
				st.Learners = byNode(m.NonVotings)
			}
		}(&out[k])
	}
	wg.Wait()
	return out
}

// latencyRing keeps the latest proposal latencies of one shard.
type latencyRing struct {
	mu  sync.Mutex
	buf [1024]time.Duration
	n   int // total added
}

func (r *latencyRing) add(d time.Duration) {
	r.mu.Lock()
	r.buf[r.n%len(r.buf)] = d
	r.n++
	r.mu.Unlock()
}

func (r *latencyRing) quantiles() Quantiles {
	r.mu.Lock()
	n := r.n
	if n > len(r.buf) {
		n = len(r.buf)
	}
	s := append([]time.Duration(nil), r.buf[:n]...)
	r.mu.Unlock()
	if n == 0 {
		return Quantiles{}
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 {
		return float64(s[int(q*float64(n-1))]) / float64(time.Millisecond)
	}
	return Quantiles{P50: at(0.5), P90: at(0.9), P99: at(0.99), Count: n}
}
