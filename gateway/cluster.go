package gateway

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/shard"
)

// Cluster is what the gateway's cluster routes need from the shard layer:
// membership changes and this node's view of its shards. (Probing the
// other nodes and spreading leaderships is the peer layer's.)
type Cluster interface {
	NodeID() uint64
	Meta() (shard.MetaState, error)
	AddNode(ctx context.Context, name, raftAddr, httpAddr string) (shard.JoinInfo, error)
	RemoveNode(ctx context.Context, id uint64) error
	LocalStatus() []shard.ShardStatus
}

func (s *Server) handleJoin(ctx *fasthttp.RequestCtx) {
	var req corvo.JoinRequest
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	if req.RaftAddress == "" {
		writeError(ctx, invalid("raft_address is required"))
		return
	}
	if _, _, err := net.SplitHostPort(req.RaftAddress); err != nil {
		writeError(ctx, invalid("raft_address: %v", err))
		return
	}
	if req.HTTPAddress != "" {
		if _, _, err := net.SplitHostPort(req.HTTPAddress); err != nil {
			writeError(ctx, invalid("http_address: %v", err))
			return
		}
	}
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := s.cluster.AddNode(c, req.Name, req.RaftAddress, req.HTTPAddress)
	if err != nil {
		code := 500
		if errors.Is(err, shard.ErrNotInitialised) || errors.Is(err, context.DeadlineExceeded) {
			code = 503
		}
		writeError(ctx, codeJoinFailed.err(err.Error()).withStatus(code))
		return
	}
	b, _ := json.Marshal(info)
	writeJSON(ctx, 200, b)
}

func (s *Server) handleRemoveNode(ctx *fasthttp.RequestCtx) {
	id, err := strconv.ParseUint(ctx.UserValue("id").(string), 10, 64)
	if err != nil || id == 0 {
		writeError(ctx, invalid("node id must be a positive integer"))
		return
	}
	var addr string
	if st, err := s.cluster.Meta(); err == nil && st.Nodes[id] != nil {
		addr = st.Nodes[id].HTTPAddr
	}
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.cluster.RemoveNode(c, id); err != nil {
		writeError(ctx, codeRemoveFailed.err(err.Error()))
		return
	}
	// Tell the removed node, so it stops serving from replicas that no
	// longer receive anything (best effort: it may be down already).
	if addr != "" {
		body := []byte(`{"node_id":` + strconv.FormatUint(id, 10) + `}`)
		if _, _, err := s.peer.Call("POST", addr, "/api/v1/cluster/removed", body, 2*time.Second); err != nil {
			s.log.Info().Err(err).Uint64("node", id).Msg("could not tell the removed node; stop it by hand")
		}
	}
	writeJSON(ctx, 200, []byte(`{"removed":`+strconv.FormatUint(id, 10)+`}`))
}

// handleRemoved is how a member tells this node it was removed from the
// cluster: the node then shuts down (Config.OnRemoved).
func (s *Server) handleRemoved(ctx *fasthttp.RequestCtx) {
	var req corvo.RemovedNotice
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	if req.NodeID != s.cluster.NodeID() {
		writeError(ctx, codeWrongNode.err("this is node "+strconv.FormatUint(s.cluster.NodeID(), 10)))
		return
	}
	s.log.Warn().Msg("this node was removed from the cluster: shutting down")
	if s.cfg.OnRemoved != nil {
		go s.cfg.OnRemoved()
	}
	writeJSON(ctx, 200, []byte(`{"status":"shutting_down"}`))
}

// localStatus is one node's own view, which /cluster/status gathers from
// every node.
type localStatus struct {
	NodeID    uint64              `json:"node_id"`
	Shards    []shard.ShardStatus `json:"shards"`
	MirrorLag *int64              `json:"mirror_lag_entries,omitempty"`
	LeaderOf  []uint64            `json:"leader_of"`
}

func (s *Server) local() localStatus {
	ls := localStatus{NodeID: s.cluster.NodeID(), Shards: s.cluster.LocalStatus(), LeaderOf: []uint64{}}
	for _, sh := range ls.Shards {
		if !sh.Meta && sh.LeaderID == ls.NodeID {
			ls.LeaderOf = append(ls.LeaderOf, sh.ShardID)
		}
	}
	if s.cfg.Mirror != nil {
		var sum int64
		for _, l := range s.cfg.Mirror.Lag() {
			sum += l
		}
		ls.MirrorLag = &sum
	}
	return ls
}

type statusNode struct {
	NodeID      uint64   `json:"node_id"`
	Name        string   `json:"name"`
	HTTPAddress string   `json:"http_address"`
	RaftAddress string   `json:"raft_address"`
	Status      string   `json:"status"` // up | down
	LeaderOf    []uint64 `json:"leader_of"`
	MirrorLag   *int64   `json:"mirror_lag_entries,omitempty"`
}

type statusReplica struct {
	NodeID  uint64  `json:"node_id"`
	Role    string  `json:"role"` // leader | follower | learner (non-voting, catching up)
	Applied *uint64 `json:"applied_index,omitempty"`
	Lag     *uint64 `json:"lag,omitempty"`
}

type statusShard struct {
	ShardID    uint64          `json:"shard_id"`
	LeaderNode uint64          `json:"leader_node"`
	Term       uint64          `json:"term"`
	Replicas   []statusReplica `json:"replicas"`
	// Placed lists the nodes the placement puts the shard on; Settled
	// says whether its membership matches that yet (false while a
	// replica moves).
	Placed          []uint64         `json:"placed_nodes,omitempty"`
	Settled         *bool            `json:"settled,omitempty"`
	ProposalLatency *shard.Quantiles `json:"proposal_latency_ms,omitempty"`
}

// groupViews picks, for every group some node reported, one view of it:
// its leader's own when that node answered (the freshest membership and
// the leader's proposal latencies), else this node's, else any; in group
// order, the meta group first.
func groupViews(self localStatus, views map[uint64]localStatus) []shard.ShardStatus {
	best := map[uint64]shard.ShardStatus{}
	score := map[uint64]int{}
	for _, id := range slices.Sorted(maps.Keys(views)) {
		for _, sh := range views[id].Shards {
			sc := 1
			if id == self.NodeID {
				sc = 2
			}
			if sh.LeaderID == id {
				sc = 3
			}
			if sc > score[sh.ShardID] {
				best[sh.ShardID], score[sh.ShardID] = sh, sc
			}
		}
	}
	out := make([]shard.ShardStatus, 0, len(best))
	if m, ok := best[shard.MetaShardID]; ok {
		out = append(out, m)
	}
	for _, g := range slices.Sorted(maps.Keys(best)) {
		if g != shard.MetaShardID {
			out = append(out, best[g])
		}
	}
	return out
}

type clusterStatus struct {
	NodeID   uint64        `json:"node_id"`
	Shards   int           `json:"shard_count"`
	Replicas int           `json:"replicas"`
	Nodes    []statusNode  `json:"nodes"`
	Groups   []statusShard `json:"shards"`
	Meta     *statusShard  `json:"meta"`
	Mirror   struct {
		LagEntries *int64 `json:"lag_entries,omitempty"`
	} `json:"mirror"`
}

// handleClusterStatus answers this node's view (?local=true) or the whole
// cluster's, gathered from every live node in parallel.
func (s *Server) handleClusterStatus(ctx *fasthttp.RequestCtx) {
	self := s.local()
	if string(ctx.QueryArgs().Peek("local")) == "true" {
		b, _ := json.Marshal(self)
		writeJSON(ctx, 200, b)
		return
	}
	st, err := s.cluster.Meta()
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	views := map[uint64]localStatus{self.NodeID: self}
	for _, r := range s.peer.AskOthers("/api/v1/cluster/status?local=true", time.Second) {
		var ls localStatus
		if json.Unmarshal(r.Body, &ls) == nil {
			views[r.ID] = ls
		}
	}

	out := clusterStatus{NodeID: self.NodeID, Shards: st.Shards, Replicas: st.Replicas, Nodes: []statusNode{}, Groups: []statusShard{}}
	out.Mirror.LagEntries = self.MirrorLag
	for _, n := range st.Live() {
		sn := statusNode{NodeID: n.ID, Name: n.Name, HTTPAddress: n.HTTPAddr, RaftAddress: n.RaftAddr, Status: "down", LeaderOf: []uint64{}}
		if v, ok := views[n.ID]; ok {
			sn.Status, sn.MirrorLag = "up", v.MirrorLag
			for _, id := range v.LeaderOf {
				sn.LeaderOf = append(sn.LeaderOf, id-1) // numbered as in job IDs
			}
		}
		out.Nodes = append(out.Nodes, sn)
	}
	applied := func(node, group uint64) (uint64, bool) {
		v, ok := views[node]
		if !ok {
			return 0, false
		}
		for _, sh := range v.Shards {
			if sh.ShardID == group {
				return sh.Applied, !sh.Meta
			}
		}
		return 0, false
	}
	for _, sh := range groupViews(self, views) {
		g := statusShard{ShardID: sh.ShardID, LeaderNode: sh.LeaderID, Term: sh.Term, Replicas: []statusReplica{}, ProposalLatency: sh.ProposalLatency}
		if i := int(sh.ShardID) - 1; !sh.Meta && i >= 0 && i < len(st.Placement) {
			g.Placed = st.NodesOf(i)
			settled := st.Placement[i].Settled == st.Placement[i].Version
			g.Settled = &settled
		}
		leaderApplied, leaderKnown := applied(sh.LeaderID, sh.ShardID)
		members := map[uint64]string{}
		maps.Copy(members, sh.Members)
		for id, addr := range sh.Learners {
			members[id] = addr
		}
		for _, id := range slices.Sorted(maps.Keys(members)) {
			r := statusReplica{NodeID: id, Role: "follower"}
			if id == sh.LeaderID {
				r.Role = "leader"
			} else if _, ok := sh.Learners[id]; ok {
				r.Role = "learner"
			}
			if a, ok := applied(id, sh.ShardID); ok {
				r.Applied = &a
				if leaderKnown {
					lag := uint64(0)
					if leaderApplied > a {
						lag = leaderApplied - a
					}
					r.Lag = &lag
				}
			}
			g.Replicas = append(g.Replicas, r)
		}
		if sh.Meta {
			m := g
			out.Meta = &m
			continue
		}
		// Shards are numbered from 0 to clients, as in job IDs
		// (job_<shard>_…) and ?shards=; their Raft groups from 1.
		g.ShardID--
		out.Groups = append(out.Groups, g)
	}
	b, _ := json.Marshal(out)
	writeJSON(ctx, 200, b)
}
