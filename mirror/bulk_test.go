package mirror

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestMirrorBulkRecords: records save, update, list newest first, and
// survive a reopen, where the ones left processing become interrupted.
func TestMirrorBulkRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mirror.db")
	m, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	require.NoError(t, m.Start(fakeSource{}))
	a := &BulkRecord{ID: "bulk_a", Action: "retry", Status: "processing", Total: 10, CreatedAt: 1}
	b := &BulkRecord{ID: "bulk_b", Action: "delete", Status: "processing", Total: 5, CreatedAt: 2}
	require.NoError(t, m.SaveBulk(ctx, a))
	require.NoError(t, m.SaveBulk(ctx, b))
	b.Status, b.Processed, b.Affected, b.Errors, b.FinishedAt, b.Failed = "completed", 5, 4, 1, 3, []byte(`[{"job_id":"x"}]`)
	require.NoError(t, m.SaveBulk(ctx, b))
	got, err := m.GetBulk(ctx, "bulk_b")
	require.NoError(t, err)
	require.Equal(t, *b, *got)
	none, err := m.GetBulk(ctx, "bulk_zzz")
	require.NoError(t, err)
	require.Nil(t, none)
	list, err := m.ListBulk(ctx, 10)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "bulk_b", list[0].ID)
	m.Close()

	m2, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	t.Cleanup(m2.Close)
	n, err := m2.InterruptBulk(ctx, 9)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	got, err = m2.GetBulk(ctx, "bulk_a")
	require.NoError(t, err)
	require.Equal(t, "interrupted", got.Status)
	require.EqualValues(t, 9, got.FinishedAt)
	got, err = m2.GetBulk(ctx, "bulk_b")
	require.NoError(t, err)
	require.Equal(t, "completed", got.Status)
}
