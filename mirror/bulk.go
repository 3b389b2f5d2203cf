package mirror

import (
	"context"
	"database/sql"
	"errors"

	"github.com/corvohq/corvo/router"
)

// BulkRecord is the status of one asynchronous bulk operation. It lives in
// the node's mirror file because it is this node's bookkeeping, not job
// truth: losing it loses a progress report, never a job.
type BulkRecord struct {
	ID         string
	Action     string
	Status     string // processing, completed, cancelled, failed, interrupted
	Total      int64
	Processed  int64
	Affected   int64
	Errors     int64
	CreatedAt  int64 // Unix ns
	FinishedAt int64 // Unix ns, 0 while processing
	Error      string
	Failed     []byte // JSON array of the first failures
	// Namespace is the namespace of the request that started it
	// ("default" for one of the default namespace).
	Namespace string
}

// bulkKeep is how many operation records the table keeps.
const bulkKeep = 1000

const bulkSchema = `
CREATE TABLE IF NOT EXISTS bulk_operations (
    id          TEXT PRIMARY KEY,
    action      TEXT NOT NULL,
    status      TEXT NOT NULL,
    total       INTEGER NOT NULL,
    processed   INTEGER NOT NULL,
    affected    INTEGER NOT NULL,
    errors      INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER,
    error       TEXT,
    failed      TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_bulk_created ON bulk_operations(created_at);
`

// bulkMigrate adds, in place, the columns a table made by an older version
// lacks (the records are this node's bookkeeping: never rebuilt).
func (m *Mirror) bulkMigrate() error {
	rows, err := m.db.Query(`SELECT name FROM pragma_table_info('bulk_operations')`)
	if err != nil {
		return err
	}
	has := false
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		has = has || name == "namespace"
	}
	rows.Close()
	if err := rows.Err(); err != nil || has {
		return err
	}
	_, err = m.db.Exec(`ALTER TABLE bulk_operations ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default'`)
	return err
}

// SaveBulk writes an operation's record (insert or update). A new record
// prunes the oldest beyond the last thousand.
func (m *Mirror) SaveBulk(ctx context.Context, r *BulkRecord) error {
	ns := r.Namespace
	if ns == "" {
		ns = router.DefaultNamespace
	}
	_, err := m.db.ExecContext(ctx, `INSERT INTO bulk_operations (id, action, status, total, processed, affected, errors,
 created_at, finished_at, error, failed, namespace) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET status=excluded.status, total=excluded.total, processed=excluded.processed,
 affected=excluded.affected, errors=excluded.errors, finished_at=excluded.finished_at, error=excluded.error,
 failed=excluded.failed`,
		r.ID, r.Action, r.Status, r.Total, r.Processed, r.Affected, r.Errors, r.CreatedAt, nullTime(r.FinishedAt),
		nullText(r.Error), nullJSON(r.Failed), ns)
	if err != nil {
		return err
	}
	if r.Processed == 0 && r.FinishedAt == 0 { // a new operation
		_, err = m.db.ExecContext(ctx, `DELETE FROM bulk_operations WHERE id NOT IN
 (SELECT id FROM bulk_operations ORDER BY created_at DESC LIMIT ?)`, bulkKeep)
	}
	return err
}

const bulkCols = `id, action, status, total, processed, affected, errors, created_at, finished_at, error, failed, namespace`

func scanBulk(sc interface{ Scan(...any) error }) (*BulkRecord, error) {
	var r BulkRecord
	var fin sql.NullInt64
	var msg, failed sql.NullString
	if err := sc.Scan(&r.ID, &r.Action, &r.Status, &r.Total, &r.Processed, &r.Affected, &r.Errors, &r.CreatedAt, &fin, &msg, &failed, &r.Namespace); err != nil {
		return nil, err
	}
	r.FinishedAt, r.Error = fin.Int64, msg.String
	if failed.Valid {
		r.Failed = []byte(failed.String)
	}
	return &r, nil
}

// GetBulk reads one record; nil when there is none.
func (m *Mirror) GetBulk(ctx context.Context, id string) (*BulkRecord, error) {
	r, err := scanBulk(m.rdb.QueryRowContext(ctx, `SELECT `+bulkCols+` FROM bulk_operations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// ListBulk reads the newest records first, of namespace ns ("": of every
// namespace).
func (m *Mirror) ListBulk(ctx context.Context, limit int, ns string) ([]BulkRecord, error) {
	rows, err := m.rdb.QueryContext(ctx, `SELECT `+bulkCols+` FROM bulk_operations WHERE ? = '' OR namespace = ?
 ORDER BY created_at DESC, id DESC LIMIT ?`, ns, ns, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []BulkRecord{}
	for rows.Next() {
		r, err := scanBulk(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
	}
	return out, rows.Err()
}

// InterruptBulk marks the operations a previous run left processing as
// interrupted (it finished them at 'at', Unix ns) and returns how many.
func (m *Mirror) InterruptBulk(ctx context.Context, at int64) (int64, error) {
	res, err := m.db.ExecContext(ctx, `UPDATE bulk_operations SET status = 'interrupted', finished_at = ?,
 error = 'the server stopped before the operation finished' WHERE status = 'processing'`, at)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
