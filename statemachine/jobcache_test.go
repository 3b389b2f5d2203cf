package statemachine

import (
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
