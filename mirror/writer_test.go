package mirror

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// row reads the optional columns of one job straight from SQLite (NULL
// reads as "<nil>").
func row(t *testing.T, m *Mirror, id string) map[string]any {
	t.Helper()
	cols := jobCols[:]
	vals := make([]any, len(cols))
	for i := range vals {
		vals[i] = new(any)
	}
	q := "SELECT " + cols[0]
	for _, c := range cols[1:] {
		q += ", " + c
	}
	err := m.rdb.QueryRow(q+" FROM jobs WHERE id = ?", id).Scan(vals...)
	if err == sql.ErrNoRows {
		return nil
	}
	require.NoError(t, err)
	out := map[string]any{}
	for i, c := range cols {
		v := *(vals[i].(*any))
		if b, ok := v.([]byte); ok {
			v = string(b)
		}
		if v == nil {
			v = "<nil>"
		}
		out[c] = v
	}
	return out
}

// A job's row changes shape as it moves (a worker and lease while active,
// none once it is pending again): each shape has its own upsert, and a
// column the newer shape leaves out becomes NULL.
func TestWriterShapesClearColumns(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	v := view(1, "emails.send", "pending", `{"a":1}`)
	v.Job.UniqueKey, v.Job.ExpireAt = "u-1", base+1e12
	feed(t, m, 2, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	r := row(t, m, v.Job.ID)
	require.Equal(t, "pending", r["state"])
	require.Equal(t, "u-1", r["unique_key"])
	require.Equal(t, `{"tenant":"acme"}`, r["tags"])
	require.Equal(t, "<nil>", r["worker_id"])

	active := *v
	active.State = statemachine.JobState{State: statemachine.StateActive, Attempt: 1, WorkerID: "w-1", Hostname: "h",
		StartedAt: base + 5, LeaseExpiresAt: base + 30e9, Progress: []byte(`{"pct":10}`)}
	feed(t, m, 3, statemachine.JobChange{ID: v.Job.ID, Job: &active.Job, State: active.State})
	r = row(t, m, v.Job.ID)
	require.Equal(t, "active", r["state"])
	require.Equal(t, "w-1", r["worker_id"])
	require.Equal(t, base+30e9, r["lease_expires_at"])
	require.Equal(t, `{"pct":10}`, r["progress"])

	retry := *v
	retry.Job.Tags = nil
	retry.State = statemachine.JobState{State: statemachine.StateRetrying, Attempt: 1, DueAt: base + 60e9, LastError: "SMTP 421", Errors: 1}
	feed(t, m, 4, statemachine.JobChange{ID: v.Job.ID, Job: &retry.Job, State: retry.State,
		NewErrors: []statemachine.JobError{{Attempt: 1, Error: "SMTP 421", At: base + 6}}})
	r = row(t, m, v.Job.ID)
	require.Equal(t, "retrying", r["state"])
	for _, c := range []string{"worker_id", "hostname", "lease_expires_at", "started_at", "progress", "tags"} {
		require.Equal(t, "<nil>", r[c], c)
	}
	require.Equal(t, base+60e9, r["scheduled_at"])
	require.Equal(t, "SMTP 421", r["last_error"])
	require.Equal(t, "u-1", r["unique_key"])
	var errs int
	require.NoError(t, m.rdb.QueryRow(`SELECT count(*) FROM job_errors WHERE job_id = ? AND error = 'SMTP 421'`, v.Job.ID).Scan(&errs))
	require.Equal(t, 1, errs)

	// An older change never overwrites a newer row.
	feed(t, m, 5)
	require.NoError(t, m.write(&pending{changes: map[string]change{v.Job.ID: {idx: 3, c: &statemachine.JobChange{ID: v.Job.ID, Job: &active.Job, State: active.State}}}, index: []uint64{0}}))
	require.Equal(t, "retrying", row(t, m, v.Job.ID)["state"])

	feed(t, m, 6, statemachine.JobChange{ID: v.Job.ID, Deleted: true})
	require.Nil(t, row(t, m, v.Job.ID))
	require.NoError(t, m.rdb.QueryRow(`SELECT count(*) FROM job_errors WHERE job_id = ?`, v.Job.ID).Scan(&errs))
	require.Zero(t, errs)
}

// Text is stored as given, quotes, NULs and all (bound, never spliced).
func TestWriterTextIsData(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	v := view(2, "q'; DROP TABLE jobs; --", "pending", `{"s":"it's \u0000 \"quoted\""}`)
	v.Job.BatchID = "b\x00c"
	feed(t, m, 2, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	r := row(t, m, v.Job.ID)
	require.Equal(t, "q'; DROP TABLE jobs; --", r["queue"])
	require.Equal(t, `{"s":"it's \u0000 \"quoted\""}`, r["payload"])
	require.Equal(t, "b\x00c", r["batch_id"])
}

// A malformed batch fails the whole transaction with an error; nothing of
// it is kept.
func TestWriterRejectsMalformedBatches(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	v := view(3, "q", "pending", `{}`)
	var good batch
	require.NoError(t, m.w.upsert(&good, 0, 2, 0, &v.Job, &v.State))
	for name, buf := range map[string][]byte{
		"truncated":         good.buf[:len(good.buf)-3],
		"unknown stmt":      append(append([]byte{}, good.buf...), 0xff, 0x7f, 0),
		"wrong count":       append(append([]byte{}, good.buf...), byte(stDelJob), 0, 2, 2, 1, 0, 0, 0, 'x', 2, 1, 0, 0, 0, 'y'),
		"bad tag":           append(append([]byte{}, good.buf...), byte(stDelJob), 0, 1, 9),
		"text past the end": append(append([]byte{}, good.buf...), byte(stDelJob), 0, 1, 2, 0xff, 0, 0, 0, 'x'),
	} {
		err := m.w.tx(func(b *batch) error { b.buf = append(b.buf, buf...); return nil })
		require.Error(t, err, name)
		require.Nil(t, row(t, m, v.Job.ID), name)
	}
	// A part already run (a spill) is rolled back with the rest.
	err := m.w.tx(func(b *batch) error {
		b.buf = append(b.buf, good.buf...)
		require.NoError(t, b.exec())
		b.buf = append(b.buf, byte(stDelJob), 0, 1, 9)
		return nil
	})
	require.Error(t, err)
	require.Nil(t, row(t, m, v.Job.ID))

	require.NoError(t, m.w.tx(func(b *batch) error { b.buf = append(b.buf, good.buf...); return nil }))
	require.Equal(t, "pending", row(t, m, v.Job.ID)["state"])
}

// A flush larger than spillBytes runs in parts, in one transaction.
func TestWriterSpillsLargeFlushes(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	pad := strings.Repeat("x", 100_000)
	p := &pending{changes: map[string]change{}, index: []uint64{7}}
	for i := 0; i < 100; i++ { // ~10 MB of payloads
		v := view(100+i, "big", "pending", `{"pad":"`+pad+`"}`)
		p.changes[v.Job.ID] = change{idx: 7, c: &statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State}}
	}
	require.NoError(t, m.write(p))
	var n int
	require.NoError(t, m.rdb.QueryRow(`SELECT count(*) FROM jobs WHERE queue = 'big'`).Scan(&n))
	require.Equal(t, 100, n)
	require.Less(t, cap(m.w.b.buf), 2*spillBytes, "the buffer never held the whole flush")
}

// Every shape's statement lists each column once and binds as many values
// as the row appends.
func TestUpsertSQLShapes(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	for _, mask := range []uint32{0, 1, 1 << 16, 0x1ffff, 0x0aaaa} {
		_, err := m.w.prepare(upsertSQL(mask))
		require.NoError(t, err, "mask %x", mask)
	}
}
