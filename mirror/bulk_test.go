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
	b := &BulkRecord{ID: "bulk_b", Action: "delete", Status: "processing", Total: 5, CreatedAt: 2, Namespace: "acme"}
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
	list, err := m.ListBulk(ctx, 10, "")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "bulk_b", list[0].ID)
	for ns, want := range map[string]string{"acme": "bulk_b", "default": "bulk_a"} {
		list, err = m.ListBulk(ctx, 10, ns)
		require.NoError(t, err)
		require.Len(t, list, 1, ns)
		require.Equal(t, want, list[0].ID, ns)
	}
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

// TestMirrorBulkTableGainsNamespace: a bulk table an older version made
// (no namespace column) gains it in place; its records are the default
// namespace's.
func TestMirrorBulkTableGainsNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mirror.db")
	m, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	_, err = m.db.Exec(`DROP TABLE bulk_operations; CREATE TABLE bulk_operations (id TEXT PRIMARY KEY, action TEXT NOT NULL,
 status TEXT NOT NULL, total INTEGER NOT NULL, processed INTEGER NOT NULL, affected INTEGER NOT NULL, errors INTEGER NOT NULL,
 created_at INTEGER NOT NULL, finished_at INTEGER, error TEXT, failed TEXT) WITHOUT ROWID;
 INSERT INTO bulk_operations VALUES ('bulk_old','retry','completed',1,1,1,0,5,6,NULL,NULL);`)
	require.NoError(t, err)
	m.Close()
	m2, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	t.Cleanup(m2.Close)
	got, err := m2.GetBulk(ctx, "bulk_old")
	require.NoError(t, err)
	require.Equal(t, "default", got.Namespace)
}
