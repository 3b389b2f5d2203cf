package shard

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// TestShardLogSizeAsksForSnapshots: with a limit of 1,000 bytes, a replica
// applying 100 bytes an entry asks for a snapshot once 1,000 bytes went
// by, compacting to the newest mark at least a quarter (250) behind; asks
// nothing more while that one is pending; and after a failed one asks
// again a quarter of the limit later, not a whole limit.
func TestShardLogSizeAsksForSnapshots(t *testing.T) {
	t.Parallel()
	h := &Host{cfg: Config{SnapshotBytes: 1000}, logSizes: make([]logSize, 2), snapshotReqs: make(chan snapshotReq, 2)}
	apply := func(from, to uint64) {
		for i := from; i <= to; i++ {
			h.countLog(1, i, 100)
		}
	}
	apply(1, 9)
	require.Empty(t, h.snapshotReqs, "900 bytes: below the limit")
	apply(10, 10)
	require.Equal(t, snapshotReq{shard: 1, index: 7}, <-h.snapshotReqs,
		"marks at 1, 4, 7, 10 (every 250 bytes): 7 is the newest 250 or more behind")
	require.True(t, h.logSizes[1].pending.Load())

	apply(11, 25)
	require.Empty(t, h.snapshotReqs, "one snapshot at a time")
	h.logSizes[1].pending.Store(false) // it finished
	apply(26, 26)
	require.Equal(t, snapshotReq{shard: 1, index: 22}, <-h.snapshotReqs, "1,600 bytes since the last: marks at 13, 16, 19, 22, 25")

	// A failed snapshot: the next is asked for 250 bytes later.
	h.logSizes[1].retry.Store(true)
	h.logSizes[1].pending.Store(false)
	apply(27, 29)
	require.Empty(t, h.snapshotReqs)
	apply(30, 30)
	require.Len(t, h.snapshotReqs, 1)
	require.Empty(t, h.logSizes[0].marks, "other shards untouched")

	// Off with a negative limit; nothing for empty updates.
	off := &Host{cfg: Config{SnapshotBytes: -1}, logSizes: make([]logSize, 1), snapshotReqs: make(chan snapshotReq, 1)}
	for i := uint64(1); i < 100; i++ {
		off.countLog(0, i, 1<<20)
	}
	require.Empty(t, off.snapshotReqs)
	require.Zero(t, off.logSizes[0].total)
}

// TestShardLogCompactedBySize: a real host with a 256 KiB limit, fed
// entries of 32 KiB payloads, compacts its Raft log long before the entry
// count would (100,000): the log's first index moves past the first
// entries, and the bytes it keeps stay under 1.5 times the limit; every
// job is still readable, also after a restart.
func TestShardLogCompactedBySize(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	open := func() *Host {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h, err := Open(ctx, Config{DataDir: dir, RaftAddress: addr, Shards: 1, Logger: zerolog.Nop(), RTTMillisecond: 10, ElectionRTT: 10,
			SnapshotBytes: 256 << 10})
		require.NoError(t, err)
		return h
	}
	h := open()
	t.Cleanup(h.Close) // also when a check fails: nothing may outlive the data dir
	payload := []byte(`{"d":"` + strings.Repeat("x", 32<<10) + `"}`)
	var ids []string
	for range 64 { // 2 MiB: eight times the limit
		op := enqueueOp(0, "big")
		op.Job.Payload = payload
		ids = append(ids, op.Job.ID)
		rs, err := h.Propose(context.Background(), 0, op)
		require.NoError(t, err)
		require.Equal(t, statemachine.StatusOK, rs[0].Status)
	}
	lr, err := h.nh.GetLogReader(ShardID(0))
	require.NoError(t, err)
	// Once the last snapshot asked for is taken, the log keeps at most
	// half the limit from the compaction, plus what was applied since
	// (less than the limit, or another snapshot would follow).
	var kept uint64
	require.Eventually(t, func() bool {
		first, last := lr.GetRange()
		if first <= 10 {
			return false
		}
		ents, err := lr.Entries(first, last+1, math.MaxUint64)
		if err != nil {
			return false // compacted meanwhile: look again
		}
		kept = 0
		for _, e := range ents {
			kept += uint64(len(e.Cmd))
		}
		return kept <= 256<<10*3/2
	}, 10*time.Second, 10*time.Millisecond, "the log was compacted by size to at most 1.5 times the limit")
	h.Close()

	h = open()
	t.Cleanup(h.Close)
	for _, id := range ids {
		v, err := h.Read(0, statemachine.GetJobQuery{ID: id})
		require.NoError(t, err)
		require.Equal(t, payload, []byte(v.(*statemachine.JobView).Job.Payload))
	}
}
