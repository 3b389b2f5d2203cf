package mirror

/*
#include <stdlib.h>
#include "writer.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/corvohq/corvo/statemachine"
)

// writer is the mirror's own write connection. A flush is encoded into
// one buffer of operations (a prepared statement and its values) and run
// by C, in one transaction: one cgo call per flush (per 4 MiB of it)
// instead of ~30 per row
// (binding each value through database/sql or the driver was a third of
// the mirror's CPU; BENCHMARKS.md). Only the apply goroutine uses it.
type writer struct {
	payloadMax int // Config.PayloadMax
	db         *C.sqlite3
	stmts      []*C.sqlite3_stmt
	upserts    map[uint32]uint16 // upsert statement per set of non-NULL optional columns
	b          batch             // reused by every transaction
	// rowids is, per shard, the last sequence number given to a new row:
	// a row's rowid is its shard's number shifted by rowidSeqBits and the
	// sequence, so that the rows of a shard (of the queues it owns) lie
	// together in the table's B-tree, in the order they came, as the
	// WITHOUT ROWID table (keyed by job_<shard>_<ULID>) kept them: a scan of
	// one queue's rows, or a page of them, reads their pages and not every
	// page of the table (the rows of all queues mixed in arrival order
	// made a queue's unindexed filter on 1,000,000 jobs twice as slow).
	// An update keeps its row's rowid; a rolled-back number is skipped.
	rowids []int64
}

// rowidSeqBits is how many low bits of a rowid number a shard's rows.
const rowidSeqBits = 40

// nextRowid is the rowid for a new row of shard sh.
func (w *writer) nextRowid(sh int) int64 {
	for len(w.rowids) <= sh {
		w.rowids = append(w.rowids, 0)
	}
	w.rowids[sh]++
	return int64(sh)<<rowidSeqBits | w.rowids[sh]
}

// shardRowids is the range [lo, hi) of shard sh's rowids.
func shardRowids(sh int) (lo, hi int64) {
	return int64(sh) << rowidSeqBits, int64(sh+1) << rowidSeqBits
}

// The fixed statements, by index.
const (
	stDelJob uint16 = iota
	stDelErrs
	stInsErr
	stSetGen
	stSaveIdx
	stDelDeps
	stInsDep
	stDelUsage
	stPutUsage
	stDelScores
	stPutScore
	stFixed // upserts follow
)

var fixedSQL = [stFixed]string{
	stDelJob:  `DELETE FROM jobs WHERE id = ?`,
	stDelErrs: `DELETE FROM job_errors WHERE job_id = ?`,
	stInsErr:  `INSERT INTO job_errors (job_id, attempt, error, at) VALUES (?,?,?,?)`,
	stSetGen:  `UPDATE jobs SET gen = ? WHERE id = ?`,
	stSaveIdx: `INSERT INTO mirror_state (shard, idx, gen) VALUES (?,?,?)
ON CONFLICT(shard) DO UPDATE SET idx = excluded.idx, gen = excluded.gen`,
	stDelDeps:  `DELETE FROM job_deps WHERE job_id = ?`,
	stInsDep:   `INSERT OR IGNORE INTO job_deps (job_id, dep_id) VALUES (?,?)`,
	stDelUsage: `DELETE FROM job_usage WHERE job_id = ?`,
	stPutUsage: `INSERT OR REPLACE INTO job_usage (job_id, n, shard, attempt, phase, queue, model, provider, input_tokens,
output_tokens, cache_creation_tokens, cache_read_tokens, cost_nanos, latency_ms, at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
	stDelScores: `DELETE FROM job_scores WHERE job_id = ?`,
	// value is bound as text (the batch has no REAL): the column's REAL
	// affinity converts it.
	stPutScore: `INSERT OR REPLACE INTO job_scores (job_id, n, dimension, value, shard, queue, scorer, comment, at) VALUES (?,?,?,?,?,?,?,?,?)`,
}

// openWriter opens the writer's connection with a page cache of
// cacheBytes.
func openWriter(path string, cacheBytes int64) (*writer, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	w := &writer{upserts: map[uint32]uint16{}}
	if rc := C.corvo_open(cpath, &w.db, C.longlong(max(cacheBytes>>10, 1))); rc != 0 {
		err := w.err(rc, "open")
		w.close()
		return nil, err
	}
	for _, sql := range fixedSQL {
		if _, err := w.prepare(sql); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

func (w *writer) err(rc C.int, what string) error {
	msg := "out of memory"
	if w.db != nil {
		msg = C.GoString(C.corvo_errmsg(w.db))
	}
	return fmt.Errorf("mirror writer: %s: %s (SQLite code %d)", what, msg, int(rc))
}

func (w *writer) prepare(sql string) (uint16, error) {
	if len(w.stmts) >= 1<<16 {
		return 0, fmt.Errorf("mirror writer: too many statements")
	}
	csql := C.CString(sql)
	defer C.free(unsafe.Pointer(csql))
	var st *C.sqlite3_stmt
	if rc := C.corvo_prepare(w.db, csql, C.int(len(sql)), &st); rc != 0 {
		return 0, w.err(rc, "prepare")
	}
	w.stmts = append(w.stmts, st)
	return uint16(len(w.stmts) - 1), nil
}

func (w *writer) close() {
	for _, st := range w.stmts {
		C.corvo_finalize(st)
	}
	w.stmts = nil
	if w.db != nil {
		C.corvo_close(w.db)
		w.db = nil
	}
}

// tx runs fill in one transaction. fill appends operations to the batch,
// which runs them whenever it holds more than spillBytes (b.spill) and
// once more at the end, then commits; on an error nothing of it is kept.
func (w *writer) tx(fill func(b *batch) error) error {
	if err := w.sql(sqlBegin); err != nil { // the write lock now, waiting out the bookkeeping connection
		return err
	}
	b := &w.b
	b.w = w
	b.reset()
	err := fill(b)
	if err == nil {
		err = b.exec()
	}
	if err == nil {
		err = w.sql(sqlCommit)
	}
	if err != nil {
		_ = w.sql(sqlRollback)
		b.reset()
		return err
	}
	return nil
}

// The transaction statements, allocated once for the process.
var (
	sqlBegin    = C.CString("BEGIN IMMEDIATE")
	sqlCommit   = C.CString("COMMIT")
	sqlRollback = C.CString("ROLLBACK")
	sqlShrink   = C.CString("PRAGMA shrink_memory")
)

// shrink frees the connection's page cache and the batch buffer.
func (w *writer) shrink() error {
	w.b.buf = nil
	return w.sql(sqlShrink)
}

// sql runs one of the statements above.
func (w *writer) sql(stmt *C.char) error {
	if rc := C.corvo_sql(w.db, stmt); rc != 0 {
		return w.err(rc, C.GoString(stmt))
	}
	return nil
}

// batch is a flush's operations, encoded as writer.c reads them: per
// operation the statement (u16) and value count (u8), then each value as
// a tag (0 NULL, 1 int64, 2 text) and its bytes (8, or a u32 length and
// the text), little-endian.
type batch struct {
	buf []byte
	w   *writer
}

// spillBytes bounds a batch's buffer: a flush of many large rows runs in
// parts (one transaction still), so it never holds a second copy of them
// all.
const spillBytes = 4 << 20

func (b *batch) reset() { b.buf = b.buf[:0] }

// spill runs the operations so far if they exceed spillBytes.
func (b *batch) spill() error {
	if len(b.buf) < spillBytes {
		return nil
	}
	return b.exec()
}

// exec runs the operations so far, in the open transaction.
func (b *batch) exec() error {
	if len(b.buf) == 0 {
		return nil
	}
	w := b.w
	var at C.size_t
	rc := C.corvo_exec(&w.stmts[0], C.int(len(w.stmts)), (*C.uchar)(unsafe.Pointer(&b.buf[0])), C.size_t(len(b.buf)), &at)
	n := len(b.buf)
	b.reset()
	if rc != 0 {
		return w.err(rc, fmt.Sprintf("write (operation at byte %d of %d)", int(at), n))
	}
	return nil
}

func (b *batch) op(st uint16, n int) {
	b.buf = append(b.buf, byte(st), byte(st>>8), byte(n))
}

func (b *batch) int(v int64) {
	b.buf = append(b.buf, 1)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(v))
}

func (b *batch) text(s string) {
	b.buf = append(b.buf, 2)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(s)))
	b.buf = append(b.buf, s...)
}

func (b *batch) bytes(s []byte) {
	b.buf = append(b.buf, 2)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(s)))
	b.buf = append(b.buf, s...)
}

// unsafeString is b as a string without a copy, for appending to a batch at once
// (b is not changed meanwhile).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// The jobs table's columns: the first always have a value, the optional
// ones (from tags on) are NULL when unset and left out of the upsert.
var jobCols = [...]string{"id", "shard", "idx", "gen", "queue", "state", "priority", "attempt", "max_retries",
	"payload", "error_count", "created_at",
	"tags", "unique_key", "batch_id", "chain_id", "worker_id", "hostname", "progress", "checkpoint", "result",
	"reason", "last_error", "cache_key", "cached_from", "route_target", "scheduled_at", "started_at", "completed_at", "failed_at", "expire_at",
	"lease_expires_at", "payload_size", "saved_nanos"}

const firstOptional = 12

// optional is a row's optional columns; a column is set when its text is
// non-empty or its number non-zero.
type optional struct {
	text  [14]string // tags … last_error, cache_key, cached_from, route_target
	times [8]int64   // scheduled_at … lease_expires_at, payload_size, saved_nanos
}

func (o *optional) mask() uint32 {
	var m uint32
	for i, t := range o.text {
		if len(t) > 0 {
			m |= 1 << i
		}
	}
	for i, t := range o.times {
		if t != 0 {
			m |= 1 << (len(o.text) + i)
		}
	}
	return m
}

// upsertSQL is the upsert of a row whose optional columns in mask are set:
// the others are NULL, so they are neither bound nor listed. A row only
// replaces one of an older Raft index. The first value is the rowid of a
// new row (writer.nextRowid); an existing row keeps its own.
func upsertSQL(mask uint32) string {
	var cols, set []string
	for i, c := range jobCols {
		if i < firstOptional || mask&(1<<(i-firstOptional)) != 0 {
			cols = append(cols, c)
			if c != "id" {
				set = append(set, c+"=excluded."+c)
			}
		} else {
			set = append(set, c+"=NULL")
		}
	}
	return "INSERT INTO jobs (rowid," + strings.Join(cols, ",") + ") VALUES (?" + strings.Repeat(",?", len(cols)) +
		") ON CONFLICT(id) DO UPDATE SET " + strings.Join(set, ",") + " WHERE excluded.idx >= jobs.idx"
}

// upsert appends the upsert of a job's record and state.
func (w *writer) upsert(b *batch, shard int, idx uint64, gen int64, j *statemachine.Job, st *statemachine.JobState) error {
	var o optional
	o.text = [14]string{unsafeString(j.Tags), j.UniqueKey, j.BatchID, "", st.WorkerID, st.Hostname,
		unsafeString(st.Progress), unsafeString(st.Checkpoint), unsafeString(st.Result), st.Reason, st.LastError, j.CacheKey, j.CachedFrom, ""}
	if j.Routing != nil {
		o.text[13] = j.Routing.Target(st.RouteIndex)
	}
	if j.Chain != nil {
		o.text[3] = j.Chain.ID
	}
	sched := st.DueAt
	if sched == 0 && j.ScheduledAt > j.CreatedAt {
		sched = j.ScheduledAt
	}
	payload, size := keptPayload(j.Payload, w.payloadMax)
	o.times = [8]int64{sched, st.StartedAt, st.CompletedAt, st.FailedAt, j.ExpireAt, st.LeaseExpiresAt, size, j.SavedNanos}
	mask := o.mask()
	si, ok := w.upserts[mask]
	if !ok {
		var err error
		if si, err = w.prepare(upsertSQL(mask)); err != nil {
			return err
		}
		w.upserts[mask] = si
	}
	n := firstOptional
	for m := mask; m != 0; m &= m - 1 {
		n++
	}
	b.op(si, n+1)
	b.int(w.nextRowid(shard))
	b.text(j.ID)
	b.int(int64(shard))
	b.int(int64(idx))
	b.int(gen)
	b.text(j.Queue)
	b.text(st.State.String())
	b.int(int64(j.Priority))
	b.int(int64(st.Attempt))
	b.int(int64(j.MaxRetries))
	if len(payload) == 0 {
		b.text("null")
	} else {
		b.bytes(payload)
	}
	b.int(int64(st.Errors))
	b.int(j.CreatedAt)
	for i, t := range o.text {
		if mask&(1<<i) != 0 {
			b.text(t)
		}
	}
	for i, t := range o.times {
		if mask&(1<<(len(o.text)+i)) != 0 {
			b.int(t)
		}
	}
	return nil
}

// keptPayload is what the mirror keeps of a payload: all of it when it is
// at most max bytes long (or max is negative), with size 0; else its first
// max bytes, cut back to a whole UTF-8 character, and its full size.
func keptPayload(p []byte, max int) (kept []byte, size int64) {
	if max < 0 || len(p) <= max {
		return p, 0
	}
	n := max
	for n > 0 && !utf8.RuneStart(p[n]) {
		n--
	}
	return p[:n], int64(len(p))
}

func (b *batch) deleteJob(id string) {
	b.op(stDelJob, 1)
	b.text(id)
	b.deleteErrors(id)
	b.op(stDelDeps, 1)
	b.text(id)
	b.deleteUsage(id)
	b.deleteScores(id)
}

func (b *batch) deleteScores(id string) {
	b.op(stDelScores, 1)
	b.text(id)
}

// putScore writes a score record, a row per dimension.
func (b *batch) putScore(id string, shard int, r *statemachine.ScoreRecord) {
	for _, d := range r.Dims {
		b.op(stPutScore, 9)
		b.text(id)
		b.int(int64(r.N))
		b.text(d.Name)
		b.text(strconv.FormatFloat(d.Value, 'g', -1, 64))
		b.int(int64(shard))
		b.text(r.Queue)
		b.text(r.Scorer)
		b.nullText(r.Comment)
		b.int(r.At)
	}
}

// insertDeps records the jobs a job depends on. A job's depends_on never
// changes: every change of it inserts the same rows again (ignored), which
// costs only jobs that have dependencies.
func (b *batch) insertDeps(id string, deps []statemachine.Dep) {
	for i := range deps {
		b.op(stInsDep, 2)
		b.text(id)
		b.text(deps[i].ID)
	}
}

func (b *batch) deleteUsage(id string) {
	b.op(stDelUsage, 1)
	b.text(id)
}

// putUsage writes a usage record (a later one of the same number
// replaces it: a heartbeat's cumulative report).
func (b *batch) putUsage(id string, shard int, r *statemachine.UsageRecord) {
	b.op(stPutUsage, 15)
	b.text(id)
	b.int(int64(r.N))
	b.int(int64(shard))
	b.int(int64(r.Attempt))
	b.text(r.Phase.String())
	b.text(r.Queue)
	b.nullText(r.Model)
	b.nullText(r.Provider)
	b.int(r.InputTokens)
	b.int(r.OutputTokens)
	b.int(r.CacheCreationTokens)
	b.int(r.CacheReadTokens)
	b.int(r.CostNanos)
	b.int(r.LatencyMs)
	b.int(r.At)
}

// nullText appends s, or NULL when it is empty.
func (b *batch) nullText(s string) {
	if s == "" {
		b.buf = append(b.buf, 0)
		return
	}
	b.text(s)
}

func (b *batch) deleteErrors(id string) {
	b.op(stDelErrs, 1)
	b.text(id)
}

func (b *batch) insertError(id string, e *statemachine.JobError) {
	b.op(stInsErr, 4)
	b.text(id)
	b.int(int64(e.Attempt))
	b.text(e.Error)
	b.int(e.At)
}

func (b *batch) setGen(id string, gen int64) {
	b.op(stSetGen, 2)
	b.int(gen)
	b.text(id)
}

func (b *batch) saveIndex(shard int, idx uint64, gen int64) {
	b.op(stSaveIdx, 3)
	b.int(int64(shard))
	b.int(int64(idx))
	b.int(gen)
}

// SQLiteMemory is what SQLite holds in the process (page caches, prepared
// statements, schemas of every connection): the sqlite_cache consumer's
// gauge.
func SQLiteMemory() int64 { return int64(C.sqlite3_memory_used()) }
