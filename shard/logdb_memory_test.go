package shard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The reflection path to dragonboat's LogDB still leads to its Pebble DBs
// (an upgrade may move it), and the idle release empties their memtables.
func TestLogDBFlushFreesItsMemtable(t *testing.T) {
	h := openHost(t, t.TempDir(), 1)
	defer h.Close()
	require.NotEmpty(t, h.logDBs, "the raft log's Pebble DBs were not found")
	proposeEnqueues(t, h, 20)
	flushes := func() (n int64) {
		for _, db := range h.logDBs {
			n += db.Metrics().Flush.Count
		}
		return n
	}
	before := flushes()
	require.NoError(t, h.ReleaseMemory())
	require.Greater(t, flushes(), before, "the idle release flushed the log's memtable")

	h.Close()
	require.Nil(t, h.logDBs)
	require.NoError(t, h.flushLogDB(), "a release after the close touches no closed DB")
}
