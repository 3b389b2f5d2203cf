package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// meta is written at first start (for a joining node: once the cluster
// has added it) to <data-dir>/corvo.json; settings that can never change
// are checked against it on every start.
type meta struct {
	Shards    int    `json:"shards"`
	RaftAddr  string `json:"raft_address"`
	NodeID    string `json:"node_id"`
	ReplicaID uint64 `json:"replica_id,omitempty"` // 0 in data dirs from before clustering: 1
	Joined    bool   `json:"joined,omitempty"`
	// Learner: joined as a non-voting replica. It stays true: such a node
	// always starts its replicas non-voting (see shard.Config.Learner).
	Learner bool `json:"learner,omitempty"`
}

// MetaFile is the node's metadata file in its data dir.
const MetaFile = "corvo.json"

func metaPath(dir string) string { return filepath.Join(dir, MetaFile) }

// loadMeta reads corvo.json; ok is false when the data dir is new.
func loadMeta(dir string) (m meta, ok bool, err error) {
	b, err := os.ReadFile(metaPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, false, fmt.Errorf("%s is corrupt: %w", metaPath(dir), err)
	}
	if m.ReplicaID == 0 {
		m.ReplicaID = 1
	}
	return m, true, nil
}

func saveMeta(dir string, m meta) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	tmp := metaPath(dir) + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, metaPath(dir))
}

// check rejects settings that contradict what the data dir was made with.
func (m meta) check(c *Config) error {
	if c.Shards != 0 && c.Shards != m.Shards {
		return fmt.Errorf("--shards=%d but %s was created with %d shards; the shard count cannot change", c.Shards, c.DataDir, m.Shards)
	}
	if c.RaftAdvertise != m.RaftAddr {
		return fmt.Errorf("the Raft address %s (--raft-advertise, default --raft-bind) but %s belongs to Raft address %s", c.RaftAdvertise, c.DataDir, m.RaftAddr)
	}
	return nil
}
