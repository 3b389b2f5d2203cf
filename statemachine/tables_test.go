package statemachine

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

// TestFewTablesForLargePayloads: 64 MiB of 64 KiB values, compacted, make
// a few SSTs of up to lbaseFileSize, not two dozen as with Pebble's
// default sizes. Every table costs the node Go heap for as long as it runs
// (its metadata, its reader in the file cache): the overload's 7 GB of
// payloads made ~1,000 tables with Pebble's sizes, 130–290 with these
// (BENCHMARKS.md, session 29).
func TestFewTablesForLargePayloads(t *testing.T) {
	t.Parallel()
	s := New(Config{Dir: t.TempDir()})
	db, err := pebble.Open(s.cfg.Dir, s.pebbleOptions())
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	const total, size = 64 << 20, 64 << 10
	val := make([]byte, size)
	// Keys in no order, as job IDs and index keys interleave across
	// flushes: the compaction rewrites the tables (sorted, non-overlapping
	// ones it would only move down).
	for i := range total / size {
		val[0] = byte(i)
		require.NoError(t, db.Set(fmt.Appendf(nil, "k%08x", uint32(i)*2654435761), val, pebble.NoSync))
	}
	require.NoError(t, db.Flush())
	require.NoError(t, db.Compact(context.Background(), []byte("k"), []byte("l"), true))
	var tables int64
	for _, l := range db.Metrics().Levels {
		tables += l.TablesCount
	}
	// Measured: 9 tables, 24 with Pebble's default sizes.
	require.LessOrEqual(t, tables, int64(3*total/lbaseFileSize), "SSTs for %d MiB", total>>20)
}
