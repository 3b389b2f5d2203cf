package mirror

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConfigDefaultsString pins what a Config with only its required
// fields becomes: 8,192 buffered updates, a 50 ms flush window, payloads
// kept whole up to 16 KiB, a 64 MiB page cache for the writer.
func TestConfigDefaultsString(t *testing.T) {
	t.Parallel()
	c := Config{Path: "m.db", Shards: 4}.WithDefaults()
	got := fmt.Sprintf("Path=%s\nShards=%d\nQueueSize=%d\nFlushWindow=%s\nPayloadMax=%d\nCacheBytes=%d\n", c.Path, c.Shards, c.QueueSize, c.FlushWindow, c.PayloadMax, c.CacheBytes)
	require.Equal(t, "Path=m.db\nShards=4\nQueueSize=8192\nFlushWindow=50ms\nPayloadMax=16384\nCacheBytes=67108864\n", got)
	require.NoError(t, c.Validate())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []Config{
		{Shards: 1},                        // no path
		{Path: filepath.Join(dir, "a.db")}, // no shards
		{Path: filepath.Join(dir, "b.db"), Shards: -2},
		{Path: filepath.Join(dir, "c.db"), Shards: 1, QueueSize: -1},
		{Path: filepath.Join(dir, "d.db"), Shards: 1, FlushWindow: -time.Millisecond},
		{Path: filepath.Join(dir, "e.db"), Shards: 1, CacheBytes: -1},
	} {
		require.Error(t, c.WithDefaults().Validate(), "%+v", c)
		m, err := Open(c)
		require.Error(t, err, "%+v", c)
		require.Nil(t, m)
	}
	// Open refused before creating anything.
	matches, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.Empty(t, matches)
}
