package shard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/corvohq/corvo/auth"
)

// MetaShardID is the dragonboat shard ID of the meta group, the small Raft
// group every node joins that holds the cluster's node registry and its
// fixed settings. Data shards use IDs 1..Shards.
const MetaShardID uint64 = 1 << 20

// Node is one member of the cluster as the meta group records it.
type Node struct {
	ID       uint64 `json:"node_id"`
	Name     string `json:"name"`
	RaftAddr string `json:"raft_address"`
	HTTPAddr string `json:"http_address"`
	// Removed nodes stay in the registry so their IDs are never reused
	// (dragonboat refuses a removed replica ID).
	Removed bool `json:"removed,omitempty"`
}

// MetaState is the meta group's whole state.
type MetaState struct {
	Shards   int              `json:"shards"`
	Replicas int              `json:"replicas"`
	NextID   uint64           `json:"next_id"`
	Nodes    map[uint64]*Node `json:"nodes"`
	// Placement lists, by shard index, the replicas each shard should
	// have (nil on a cluster created before placement: every node hosts
	// every shard until the meta leader records it, see reconcileMeta).
	Placement []ShardPlacement `json:"placement,omitempty"`
	// PlacementVersion counts placement changes: a "place" command names
	// the version it was computed from, so two proposers cannot both
	// apply a stale plan.
	PlacementVersion uint64 `json:"placement_version,omitempty"`
	// NextGen numbers replica generations (see ReplicaIDFor).
	NextGen uint64 `json:"next_gen,omitempty"`
	// Auth is the API key table (never nil once the state machine has
	// it; an older snapshot without it reads as no keys).
	Auth *auth.State `json:"auth,omitempty"`
}

// Live lists the nodes that are not removed, by ID.
func (m MetaState) Live() []Node {
	out := make([]Node, 0, len(m.Nodes))
	for _, n := range m.Nodes {
		if !n.Removed {
			out = append(out, *n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// metaCmd is one meta-group proposal. The meta group sees a handful of
// proposals in a cluster's life, so JSON is plenty.
type metaCmd struct {
	Op       string `json:"op"` // init | register | remove | address | place | settled | auth
	Shards   int    `json:"shards,omitempty"`
	Replicas int    `json:"replicas,omitempty"`
	Node     Node   `json:"node,omitempty"`
	// place: the new placement, the version it was computed from and the
	// next free replica generation; settled: the shard and its version.
	Placement []ShardPlacement `json:"placement,omitempty"`
	Expect    uint64           `json:"expect,omitempty"`
	NextGen   uint64           `json:"next_gen,omitempty"`
	Shard     int              `json:"shard,omitempty"`
	Version   uint64           `json:"version,omitempty"`
	// auth: a change to the key table.
	Auth *auth.Cmd `json:"auth,omitempty"`
}

// Results of a register command (Result.Value is the node ID; Data says
// which existing ID the new one replaces, if any).
type registerResult struct {
	ID       uint64 `json:"id"`
	Replaces uint64 `json:"replaces,omitempty"`
}

// metaSM is the meta group's state machine: a regular dragonboat
// IStateMachine whose state is rebuilt from its snapshot and log on start.
// It is deterministic: every value it stores comes from the command.
type metaSM struct {
	mu sync.RWMutex
	st MetaState
	// keys publishes st.Auth to the host's readers (every request reads
	// it: no lock, no copy).
	keys *atomic.Pointer[auth.State]
}

// newMetaSM returns the meta state machine factory; keys receives its key
// table after every change.
func newMetaSM(keys *atomic.Pointer[auth.State]) func(uint64, uint64) sm.IStateMachine {
	return func(uint64, uint64) sm.IStateMachine {
		keys.Store(auth.Empty)
		return &metaSM{st: MetaState{NextID: 2, Nodes: map[uint64]*Node{}, Auth: auth.Empty}, keys: keys}
	}
}

func (m *metaSM) Update(e sm.Entry) (sm.Result, error) {
	var c metaCmd
	if err := json.Unmarshal(e.Cmd, &c); err != nil {
		return sm.Result{}, nil // a bad command changes nothing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch c.Op {
	case "init":
		// The bootstrap node's first proposal; idempotent.
		if m.st.Shards == 0 {
			m.st.Shards, m.st.Replicas = c.Shards, c.Replicas
			n := c.Node
			m.st.Nodes[n.ID] = &n
			if n.ID >= m.st.NextID {
				m.st.NextID = n.ID + 1
			}
			// The founder hosts every shard, with replica ID = node ID
			// (how it started them); it is already their only member.
			m.st.Placement = make([]ShardPlacement, c.Shards)
			for i := range m.st.Placement {
				m.st.Placement[i] = ShardPlacement{Replicas: []Replica{{Node: n.ID, ID: n.ID}}, Version: 1, Settled: 1}
			}
			m.st.PlacementVersion, m.st.NextGen = 1, 1
		}
		return sm.Result{Value: c.Node.ID}, nil
	case "register":
		// A node asking to join. The same Raft address joining again
		// is a fresh node replacing a wiped one (a node only joins
		// with an empty data dir): it gets a new ID, and the caller
		// removes the old replica from every shard.
		var r registerResult
		for _, id := range sortedIDs(m.st.Nodes) {
			n := m.st.Nodes[id]
			if !n.Removed && n.RaftAddr == c.Node.RaftAddr {
				n.Removed = true
				r.Replaces = n.ID
				m.st.unplace(n.ID)
			}
		}
		n := c.Node
		n.ID = m.st.NextID
		m.st.NextID++
		m.st.Nodes[n.ID] = &n
		r.ID = n.ID
		b, _ := json.Marshal(r)
		return sm.Result{Value: n.ID, Data: b}, nil
	case "remove":
		if n, ok := m.st.Nodes[c.Node.ID]; ok {
			n.Removed = true
			m.st.unplace(n.ID)
		}
		return sm.Result{Value: c.Node.ID}, nil
	case "place":
		// A new placement from the meta leader (reconcileMeta), applied
		// only over the version it was computed from.
		if c.Expect != m.st.PlacementVersion || (m.st.Shards != 0 && len(c.Placement) != m.st.Shards) {
			return sm.Result{}, nil
		}
		m.st.Placement = c.Placement
		m.st.PlacementVersion++
		m.st.NextGen = max(m.st.NextGen, c.NextGen)
		return sm.Result{Value: m.st.PlacementVersion}, nil
	case "settled":
		// A shard's leader found its membership equal to the placement.
		if c.Shard >= 0 && c.Shard < len(m.st.Placement) && m.st.Placement[c.Shard].Version == c.Version {
			m.st.Placement[c.Shard].Settled = c.Version
		}
		return sm.Result{Value: c.Version}, nil
	case "auth":
		// Value 1: the key table changed (0: a put over an existing ID,
		// a change to a missing key).
		if c.Auth == nil {
			return sm.Result{}, nil
		}
		next, changed := m.st.Auth.Apply(*c.Auth)
		if !changed {
			return sm.Result{}, nil
		}
		m.st.Auth = next
		m.keys.Store(next)
		return sm.Result{Value: 1}, nil
	case "address":
		// A node restarting with a new HTTP address.
		if n, ok := m.st.Nodes[c.Node.ID]; ok && !n.Removed {
			n.HTTPAddr = c.Node.HTTPAddr
		}
		return sm.Result{Value: c.Node.ID}, nil
	}
	return sm.Result{}, nil
}

func sortedIDs(nodes map[uint64]*Node) []uint64 {
	ids := make([]uint64, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// metaQuery asks the meta state machine for a copy of its state.
type metaQuery struct{}

func (m *metaSM) Lookup(q interface{}) (interface{}, error) {
	if _, ok := q.(metaQuery); !ok {
		return nil, errors.New("unknown meta query")
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := m.st
	out.Nodes = make(map[uint64]*Node, len(m.st.Nodes))
	for id, n := range m.st.Nodes {
		c := *n
		out.Nodes[id] = &c
	}
	out.Placement = clonePlacement(m.st.Placement)
	return out, nil
}

func (m *metaSM) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	m.mu.RLock()
	b, err := json.Marshal(m.st)
	m.mu.RUnlock()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func (m *metaSM) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var st MetaState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("meta snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[uint64]*Node{}
	}
	if st.Auth == nil {
		st.Auth = auth.Empty
	}
	m.mu.Lock()
	m.st = st
	m.keys.Store(st.Auth)
	m.mu.Unlock()
	return nil
}

func (m *metaSM) Close() error { return nil }
