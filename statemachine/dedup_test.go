package statemachine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDedupFilterNoFalseNegatives(t *testing.T) {
	t.Parallel()
	d := newDedupFilter()
	rnd := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC).UnixNano()
	var ids []EntryID
	// More than one filter's capacity in one bucket: the chain grows.
	for i := range 3 * dedupFirstCap {
		id := NewEntryID(t0+int64(i)*int64(time.Microsecond), rnd.Uint64())
		d.add(id)
		ids = append(ids, id)
	}
	require.Greater(t, len(d.buckets[dedupBucket(ids[0])]), 1)
	for _, id := range ids {
		require.True(t, d.mayContain(id))
	}
	fp := 0
	for range 10000 {
		if d.mayContain(NewEntryID(t0, rnd.Uint64())) {
			fp++
		}
	}
	require.Less(t, fp, 300, "false positives near dedupFP, not every lookup")
}

func TestDedupFilterPruneDropsOnlyWholeBuckets(t *testing.T) {
	t.Parallel()
	d := newDedupFilter()
	base := 1000 * dedupBucketNs
	old := NewEntryID(base+1, 1)                 // bucket 1000
	split := NewEntryID(base+dedupBucketNs+5, 2) // bucket 1001, before the cut
	kept := NewEntryID(base+dedupBucketNs+50, 3) // bucket 1001, after the cut
	for _, id := range []EntryID{old, split, kept} {
		d.add(id)
	}
	d.prune(NewEntryID(base+dedupBucketNs+10, 0))
	require.False(t, d.mayContain(old), "a bucket wholly before the cut is dropped")
	require.True(t, d.mayContain(split), "a bucket the cut splits stays whole")
	require.True(t, d.mayContain(kept))
}

// The filter is rebuilt from the DB: a retry applied after a reopen or on
// a replica restored from a snapshot still finds its first attempt.
func TestStateMachineDuplicateAfterReopenAndSnapshotAppliesOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue("q", PriorityNormal)
	tb.enqueue("q", PriorityNormal)
	cmd := tb.entry(&FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 1})
	first := tb.applyRaw(cmd)
	require.Len(t, first[0].Jobs, 1)
	retry := append([]byte(nil), cmd...)
	retry[RetryFlagOffset] = 1

	tb.reopen()
	again := tb.applyRaw(retry)
	require.Equal(t, first[0].Jobs[0].Job.ID, again[0].Jobs[0].Job.ID, "after a reopen")

	other := tb.restored()
	again = other.applyRaw(retry)
	require.Equal(t, first[0].Jobs[0].Job.ID, again[0].Jobs[0].Job.ID, "after a snapshot")
	require.Len(t, other.fetch(10, "q"), 1, "only the other job is left to claim")
}
