package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lni/dragonboat/v4"
)

// The replicas this node runs, started and stopped as the placement says.

// localReplica is one replica this node runs, as recorded on disk so a
// restart starts exactly the same ones.
type localReplica struct {
	ID uint64 `json:"id"`
	// NonVoting: it was added as a non-voting replica, so it must always
	// start as one (dragonboat replays its add-non-voting entry, which
	// panics in a replica started as a voter; it votes again as soon as
	// its membership says so).
	NonVoting bool `json:"non_voting,omitempty"`
	// Founder: its group's initial member (dragonboat wants it started
	// the same way every time: not in join mode, with the same members).
	Founder bool `json:"founder,omitempty"`
}

// replicasFile records the replicas this node runs, by shard index.
const replicasFile = "replicas.json"

func (h *Host) replicasPath() string { return filepath.Join(h.cfg.DataDir, "shards", replicasFile) }

// loadReplicas reads the record; a data dir from before placement has none:
// its founder ran every shard as a voter under replica ID = node ID, and a
// joined node every shard it has a directory for, non-voting at start.
func (h *Host) loadReplicas() (map[int]localReplica, error) {
	b, err := os.ReadFile(h.replicasPath())
	if err == nil {
		var byName map[string]localReplica
		if err := json.Unmarshal(b, &byName); err != nil {
			return nil, fmt.Errorf("%s: %w", h.replicasPath(), err)
		}
		out := make(map[int]localReplica, len(byName))
		for k, r := range byName {
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= h.cfg.Shards {
				return nil, fmt.Errorf("%s: bad shard %q", h.replicasPath(), k)
			}
			out[i] = r
		}
		return out, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	out := map[int]localReplica{}
	for i := 0; i < h.cfg.Shards; i++ {
		_, statErr := os.Stat(h.shardDir(i))
		switch {
		case !h.cfg.Join:
			out[i] = localReplica{ID: h.cfg.NodeID, Founder: true}
		case statErr == nil:
			out[i] = localReplica{ID: h.cfg.NodeID, NonVoting: true}
		}
	}
	return out, h.saveReplicas(out)
}

// saveReplicas writes the record atomically.
func (h *Host) saveReplicas(rs map[int]localReplica) error {
	byName := make(map[string]localReplica, len(rs))
	for i, r := range rs {
		byName[strconv.Itoa(i)] = r
	}
	b, err := json.Marshal(byName)
	if err != nil {
		return err
	}
	tmp := h.replicasPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, h.replicasPath())
}

// setLocal records (r != nil) or forgets shard i's replica.
func (h *Host) setLocal(i int, r *localReplica) error {
	h.localMu.Lock()
	defer h.localMu.Unlock()
	if r == nil {
		delete(h.local, i)
	} else {
		h.local[i] = *r
	}
	return h.saveReplicas(h.local)
}

func (h *Host) shardDir(i int) string {
	return filepath.Join(h.cfg.DataDir, "shards", strconv.Itoa(i))
}

// startReplica starts this node's replica r of shard i: as its group's
// founder, or in join mode (a replica the placement added: its leader
// streams it the state).
func (h *Host) startReplica(i int, r localReplica) error {
	rc := h.raftConfig(ShardID(i), r.ID, r.NonVoting)
	var members map[uint64]dragonboat.Target
	join := !r.Founder
	if r.Founder {
		members = map[uint64]dragonboat.Target{r.ID: h.cfg.RaftAddress}
	}
	if err := h.nh.StartOnDiskReplica(members, join, h.newStateMachine(i), rc); err != nil {
		return fmt.Errorf("start shard %d: %w", i, err)
	}
	h.rep[i].Store(r.ID)
	return nil
}

// waitShard waits until shard i has a leader and this replica has applied
// what the leader had committed, then seeds its signals and marks it
// hosted.
func (h *Host) waitShard(ctx context.Context, i int) error {
	for {
		if _, _, ok, _ := h.nh.GetLeaderID(ShardID(i)); ok {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			// A linearizable read: the replica has applied what the
			// leader committed before it seeds the signals.
			_, err := h.nh.SyncRead(rctx, ShardID(i), appliedQuery)
			cancel()
			if err == nil {
				h.reseed(i)
				h.ready[i].Store(true)
				return nil
			}
			if !dragonboat.IsTempError(err) && !errors.Is(err, dragonboat.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("shard %d: %w", i, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d has no leader: %w", i, ctx.Err())
		case <-h.closing:
			return ErrClosed
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// joinShard starts the replica the placement put on this node, waits until
// it has caught up and promotes it to a voter.
func (h *Host) joinShard(i int, id uint64) {
	defer h.wg.Done()
	defer h.starting[i].Store(false)
	r := localReplica{ID: id, NonVoting: true}
	if err := h.setLocal(i, &r); err != nil {
		h.log.Error().Err(err).Int("shard", i).Msg("recording a new replica failed")
		return
	}
	if err := h.startReplica(i, r); err != nil {
		h.log.Error().Err(err).Int("shard", i).Msg("starting a placed replica failed")
		return
	}
	h.log.Info().Int("shard", i).Uint64("replica", id).Msg("placed here: catching up")
	ctx, cancel := h.untilClosing()
	defer cancel()
	if err := h.waitShard(ctx, i); err != nil {
		if !errors.Is(err, ErrClosed) && ctx.Err() == nil {
			h.log.Warn().Err(err).Int("shard", i).Msg("placed replica did not catch up")
		}
		return
	}
	if err := h.addReplica(ctx, ShardID(i), id, h.cfg.RaftAddress); err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Int("shard", i).Msg("promoting a placed replica failed (retried on the next start)")
		}
		return
	}
	h.log.Info().Int("shard", i).Uint64("replica", id).Msg("placed replica caught up: now a voter")
}

// stopShard stops this node's replica of shard i and deletes its data: the
// shard's leader has taken it out of the group (or it was replaced by a
// newer replica of this node).
func (h *Host) stopShard(i int) {
	id := h.rep[i].Load()
	if id == 0 {
		return
	}
	h.ready[i].Store(false)
	h.leaderNode[i].Store(0)
	if err := h.setLocal(i, nil); err != nil {
		h.log.Error().Err(err).Int("shard", i).Msg("recording a removed replica failed")
		return
	}
	if err := h.nh.StopReplica(ShardID(i), id); err != nil && !errors.Is(err, dragonboat.ErrShardNotFound) {
		h.log.Warn().Err(err).Int("shard", i).Msg("stopping a replica failed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := h.nh.SyncRemoveData(ctx, ShardID(i), id)
	cancel()
	if err != nil {
		h.log.Warn().Err(err).Int("shard", i).Msg("removing a replica's Raft data failed")
	}
	h.sms[i].Store(nil)
	if err := os.RemoveAll(h.shardDir(i)); err != nil {
		h.log.Warn().Err(err).Int("shard", i).Msg("removing a replica's state failed")
	}
	h.rep[i].Store(0)
	h.signals.forget(i)
	if h.cfg.OnShardRemoved != nil {
		h.cfg.OnShardRemoved(i)
	}
	h.log.Info().Int("shard", i).Uint64("replica", id).Msg("replica moved away: stopped and deleted")
}

// placementInterval is how often a node looks at the placement.
const placementInterval = 300 * time.Millisecond

// placementLoop makes this node follow the placement: it starts and stops
// its replicas, reconciles the membership of the shards it leads, and, on
// the meta leader, plans the next placement step.
func (h *Host) placementLoop() {
	defer h.wg.Done()
	t := time.NewTicker(placementInterval)
	defer t.Stop()
	round := 0
	for {
		select {
		case <-h.closing:
			return
		case <-t.C:
		}
		round++
		st, err := h.Meta()
		if err != nil || st.Shards == 0 {
			continue
		}
		if st.Placement != nil {
			h.followPlacement(st)
			for i := 0; i < st.Shards; i++ {
				if h.IsLeader(i) {
					h.reconcileShard(st, i, round)
				}
			}
		}
		h.reconcileMeta(st)
	}
}

// followPlacement starts the replicas placed on this node and stops those
// the placement took away once their shard settled without them.
func (h *Host) followPlacement(st MetaState) {
	for i := 0; i < st.Shards && i < len(st.Placement); i++ {
		if h.starting[i].Load() {
			continue
		}
		mine, placed := st.ReplicaOf(i, h.cfg.NodeID)
		running := h.rep[i].Load()
		sp := st.Placement[i]
		switch {
		case running == 0 && placed:
			h.starting[i].Store(true)
			h.wg.Add(1)
			go h.joinShard(i, mine.ID)
		case running != 0 && placed && mine.ID != running:
			// Placed again under a new replica ID while this node
			// was away: the old one has left the group.
			h.stopShard(i)
		case running != 0 && !placed && sp.Settled == sp.Version:
			// The shard's leader deleted this replica.
			h.stopShard(i)
		}
	}
}

// reconcileShard, on shard i's leader, makes the group's membership follow
// the placement, one configuration change per round: add a placed replica
// that is missing (non-voting: it catches up, then its node promotes it);
// when every placed replica votes, delete the members no longer placed
// (handing the leadership over first when this replica is one); when
// nothing is left to do, record the shard as settled.
func (h *Host) reconcileShard(st MetaState, i int, round int) {
	sp := st.Placement[i]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := h.nh.SyncGetShardMembership(ctx, ShardID(i))
	if err != nil {
		return
	}
	placed := make(map[uint64]bool, len(sp.Replicas))
	allVoting := true
	for _, r := range sp.Replicas {
		placed[r.ID] = true
		_, voter := m.Nodes[r.ID]
		_, learner := m.NonVotings[r.ID]
		if voter {
			continue
		}
		allVoting = false
		if learner {
			continue
		}
		n := st.Nodes[r.Node]
		if _, gone := m.Removed[r.ID]; gone || n == nil {
			continue
		}
		if err := h.nh.SyncRequestAddNonVoting(ctx, ShardID(i), r.ID, n.RaftAddr, m.ConfigChangeID); err != nil {
			h.log.Debug().Err(err).Int("shard", i).Uint64("replica", r.ID).Msg("adding a placed replica failed; retrying")
		} else {
			h.log.Info().Int("shard", i).Uint64("node", r.Node).Uint64("replica", r.ID).Msg("placed replica added (non-voting until it catches up)")
		}
		return
	}
	if !allVoting {
		return
	}
	for _, members := range []map[uint64]string{m.Nodes, m.NonVotings} {
		for _, id := range sortedReplicaIDs(members) {
			if placed[id] {
				continue
			}
			if id == h.rep[i].Load() {
				// This replica leaves: hand the leadership to a placed
				// voter (another one next round if it did not take it).
				to := sp.Replicas[round%len(sp.Replicas)].ID
				if err := h.nh.RequestLeaderTransfer(ShardID(i), to); err == nil {
					h.log.Info().Int("shard", i).Uint64("to", to).Msg("leaving this shard: handing over its leadership")
				}
				return
			}
			if err := h.nh.SyncRequestDeleteReplica(ctx, ShardID(i), id, m.ConfigChangeID); err != nil {
				h.log.Debug().Err(err).Int("shard", i).Uint64("replica", id).Msg("deleting a replica no longer placed failed; retrying")
			} else {
				h.log.Info().Int("shard", i).Uint64("node", NodeOf(id)).Uint64("replica", id).Msg("replica no longer placed: deleted")
			}
			return
		}
	}
	if sp.Settled != sp.Version {
		if _, err := h.proposeMetaOnce(ctx, metaCmd{Op: "settled", Shard: i, Version: sp.Version}); err != nil {
			h.log.Debug().Err(err).Int("shard", i).Msg("recording a settled shard failed; retrying")
		}
	}
}

// reconcileMeta, on the meta group's leader, proposes the next placement
// step when there is one.
func (h *Host) reconcileMeta(st MetaState) {
	if leader, _, ok, _ := h.nh.GetLeaderID(MetaShardID); !ok || leader != h.cfg.NodeID {
		return
	}
	p, gen := planPlacement(st)
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := h.proposeMetaOnce(ctx, metaCmd{Op: "place", Placement: p, Expect: st.PlacementVersion, NextGen: gen}); err != nil {
		h.log.Debug().Err(err).Msg("proposing a placement step failed; retrying")
		return
	}
	h.log.Info().Uint64("version", st.PlacementVersion+1).Msg("placement step proposed")
}
