package shard

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInMemEntrySliceOverride: proposing one entry at a time allocates far
// less than dragonboat's default 40 KiB in-memory log slice per entry, so
// the override in inmem_slice.go reaches dragonboat's variables (after a
// dragonboat upgrade that renamed them, the linknamed variables would be
// our own and this would fail). Not parallel: it reads process-wide
// allocation counts.
func TestInMemEntrySliceOverride(t *testing.T) {
	h := openHost(t, t.TempDir(), 1)
	defer h.Close()
	propose := func(n int) { proposeEnqueues(t, h, n) }
	propose(50) // warm up: leader, caches, first slices
	const n = 300
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	propose(n)
	runtime.ReadMemStats(&after)
	perEntry := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per entry", perEntry)
	require.Less(t, perEntry, uint64(24<<10), "each entry allocates a new 40 KiB log slice: the override did not take effect")
}

// proposeEnqueues proposes n enqueues to shard 0, one at a time.
func proposeEnqueues(t *testing.T, h *Host, n int) {
	t.Helper()
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := h.Propose(ctx, 0, enqueueOp(0, "q"))
		cancel()
		require.NoError(t, err)
	}
}
