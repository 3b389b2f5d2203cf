package shard

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lni/dragonboat/v4"
)

// Snapshots by size. dragonboat snapshots a shard every SnapshotEntries
// entries, whatever they weigh: with large payloads the Raft log held
// every byte the state machine holds too (a second copy of each payload
// until 100,000 entries had gone by). So each replica also counts the
// bytes of the entries it applies and, once SnapshotBytes have gone by
// since its last snapshot of that kind, asks for one (a metadata-only
// snapshot for an on-disk state machine: Sync, then a small file) that
// compacts the log up to the newest entry at least SnapshotBytes/4 behind,
// so the log keeps between a quarter and a half of SnapshotBytes for
// replicas that trail a little (one further behind catches up from a
// snapshot streamed from Pebble, as with the entry count).

// logSize is one shard's count, owned by its apply goroutine (Applied)
// but for pending, which the snapshot goroutine clears.
type logSize struct {
	total  uint64 // bytes applied since the replica started
	snapAt uint64 // total at the last snapshot asked for
	marks  []logMark
	// pending: a snapshot was asked for and has not finished; retry: it
	// failed, ask again a quarter of the limit later.
	pending, retry atomic.Bool
}

// logMark is the index of an entry and the bytes applied up to it.
type logMark struct {
	index, total uint64
}

// snapshotReq asks the snapshot goroutine for a snapshot of shard i that
// compacts the log up to index.
type snapshotReq struct {
	shard int
	index uint64
}

var (
	sizeSnapshots      = metrics.NewCounter(`corvo_raft_size_snapshots_total`)
	sizeSnapshotErrors = metrics.NewCounter(`corvo_raft_size_snapshot_errors_total`)
)

// countLog records an applied Update of shard i (bytes, up to index) and
// asks for a snapshot when SnapshotBytes have been applied since the last.
func (h *Host) countLog(i int, index, bytes uint64) {
	if h.cfg.SnapshotBytes <= 0 || bytes == 0 || i < 0 || i >= len(h.logSizes) {
		return
	}
	limit := uint64(h.cfg.SnapshotBytes)
	step := max(limit/4, 1)
	s := &h.logSizes[i]
	s.total += bytes
	if s.retry.Swap(false) {
		s.snapAt = 0 // ask again a quarter of the limit later
		if s.total+step > limit {
			s.snapAt = s.total + step - limit
		}
	}
	if n := len(s.marks); n == 0 || s.total-s.marks[n-1].total >= step {
		s.marks = append(s.marks, logMark{index: index, total: s.total})
	}
	if s.total-s.snapAt < limit || s.pending.Load() {
		return
	}
	// The newest mark at least a quarter of the limit behind: the log is
	// compacted up to it. Older marks are of no more use.
	var to uint64
	k := 0
	for j, m := range s.marks {
		if s.total-m.total < step {
			break
		}
		to, k = m.index, j
	}
	if to == 0 {
		return
	}
	s.marks = append(s.marks[:0], s.marks[k:]...)
	s.pending.Store(true)
	select {
	case h.snapshotReqs <- snapshotReq{shard: i, index: to}:
		s.snapAt = s.total
	default:
		s.pending.Store(false) // the goroutine is behind: ask again on the next Update
	}
}

// snapshotLoop takes the snapshots countLog asks for, one at a time.
func (h *Host) snapshotLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.closing:
			return
		case r := <-h.snapshotReqs:
			h.sizeSnapshot(r)
			h.logSizes[r.shard].pending.Store(false)
		}
	}
}

// sizeSnapshotTimeout bounds one snapshot (Sync of the shard's Pebble and
// a small file).
const sizeSnapshotTimeout = 30 * time.Second

func (h *Host) sizeSnapshot(r snapshotReq) {
	rs, err := h.nh.RequestSnapshot(ShardID(r.shard), dragonboat.SnapshotOption{
		OverrideCompactionOverhead: true, CompactionIndex: r.index}, sizeSnapshotTimeout)
	if err != nil {
		h.sizeSnapshotFailed(r, err)
		return
	}
	defer rs.Release()
	select {
	case res := <-rs.ResultC():
		switch {
		case res.Terminated():
			// The shard stopped (the host closes, or the replica moved).
		case res.Completed():
			sizeSnapshots.Inc()
		case res.Rejected():
			// Another snapshot (the entry count's, or one being
			// received) was under way: it compacts the log too.
		default:
			h.sizeSnapshotFailed(r, errors.New("snapshot request timed out or was dropped"))
		}
	case <-h.closing:
	}
}

func (h *Host) sizeSnapshotFailed(r snapshotReq, err error) {
	if errors.Is(err, dragonboat.ErrClosed) || errors.Is(err, dragonboat.ErrShardNotFound) {
		return // stopping, or the replica moved away
	}
	h.logSizes[r.shard].retry.Store(true)
	if errors.Is(err, dragonboat.ErrShardNotReady) {
		return // still replaying its log at start
	}
	sizeSnapshotErrors.Inc()
	h.log.Warn().Err(err).Int("shard", r.shard).Uint64("compact_to", r.index).Msg("snapshot by log size failed; asking again a quarter of --snapshot-bytes later")
}
