package statemachine

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestJobCacheObjectsAreSmall: the job cache holds hundreds of thousands
// of records after a bulk enqueue, and every collection marks them. Go's
// collector scans objects of up to 512 bytes span by span and larger ones
// one by one; held as one 624-byte object, a record cost a 1M-job bulk
// enqueue ~2 s more of marking than as a job and a state apart
// (BENCHMARKS.md, session 36). Growing either past 512 bytes brings that
// back.
func TestJobCacheObjectsAreSmall(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(Job{}), uintptr(512), "a cached Job")
	require.LessOrEqual(t, unsafe.Sizeof(cachedJob{}), uintptr(512), "a cachedJob")
}

// TestJobSizeIsTheHeaps: the memory plan gives each shard's job cache a
// share of the node's budget and the cache counts its records with
// jobSize, so that account must be what the records hold in the heap. It
// fails when Job or cachedJob grow into another size class without
// recordOverhead following.
func TestJobSizeIsTheHeaps(t *testing.T) {
	for _, size := range []int{16, 300, 4096} {
		const n = 20000
		payload := []byte(strings.Repeat("x", size))
		// IDs as a decoded entry gives them: bytes the record's string
		// is made from (the cache keeps the string).
		ids := make([][]byte, n)
		for i := range ids {
			ids[i] = fmt.Appendf(nil, "01JQ%022d", i)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newJobCache(1 << 40)
		for i := range ids {
			j := Job{ID: string(ids[i]), Queue: "emails", Payload: payload, JobOptions: DefaultJobOptions()}
			c.add(&j, JobState{})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		ratio := heap / float64(c.bytes)
		require.InDelta(t, 1, ratio, 0.15, "payload %d B: the cache counts %d B a record, the heap holds %.0f", size, c.bytes/n, heap/n)
		runtime.KeepAlive(c)
	}
}
