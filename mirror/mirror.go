// Package mirror keeps one SQLite database per node as a materialized view
// of every local shard's jobs, for search, lists and dashboards. It is fed
// by the state machines' change events after each Pebble commit, applied in
// batched transactions off the Raft apply path (a job changed several times
// within a flush window costs one upsert). It is never a source of truth:
// when it falls behind (a full buffer, a missing or corrupt file, a restart
// after changes it never saw) it rebuilds a shard from Pebble.
package mirror

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	_ "github.com/mattn/go-sqlite3" // the SQLite driver (cgo)
	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/statemachine"
)

// Source reads the shards' Pebble state (shard.Host).
type Source interface {
	Shards() int
	// Read fails for a shard this node runs no replica of.
	Read(shard int, query interface{}) (interface{}, error)
	// Hosts reports whether this node hosts the shard (a replica whose
	// Pebble state can be read).
	Hosts(shard int) bool
}

// Defaults of Config.
const (
	QueueSizeDefault   = 8192
	CacheBytesDefault  = 64 << 20
	FlushWindowDefault = 50 * time.Millisecond
	// PayloadMaxDefault is the most of a payload the mirror keeps: whole
	// below it (every search filter sees it all), its first bytes above
	// it. Typical job payloads are well below it; for large ones the
	// mirror, which would otherwise hold a second full copy of every
	// payload beside Pebble, costs at most this much per job.
	PayloadMaxDefault = 16 << 10
)

// Config configures a Mirror.
type Config struct {
	Path   string // the SQLite file
	Shards int    // the node's shard count
	// QueueSize is how many Updates are buffered before events are
	// dropped (the shard is then rebuilt); default QueueSizeDefault.
	QueueSize int
	// FlushWindow is how long changes coalesce before a write; default
	// FlushWindowDefault.
	FlushWindow time.Duration
	// PayloadMax is how many bytes of a payload the mirror keeps: a
	// longer payload is kept as its first PayloadMax bytes, and a search
	// page reads the whole payload from Pebble for it (payload_contains
	// sees the prefix; payload_jq never matches it). Default
	// PayloadMaxDefault; negative: whole payloads, whatever their size.
	PayloadMax int
	Logger     zerolog.Logger
	// CacheBytes is the SQLite page cache of the connection that writes
	// the jobs; every other connection (at most 5) gets an eighth of it.
	// Default CacheBytesDefault.
	CacheBytes int64
	// Buffer accounts the Updates waiting to be written against the
	// node's memory budget: an Update that does not fit is dropped like
	// one that finds the queue full (the shard is rebuilt from Pebble).
	// nil: bounded only by QueueSize.
	Buffer *membudget.Account
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.QueueSize == 0 {
		c.QueueSize = QueueSizeDefault
	}
	if c.FlushWindow == 0 {
		c.FlushWindow = FlushWindowDefault
	}
	if c.PayloadMax == 0 {
		c.PayloadMax = PayloadMaxDefault
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = CacheBytesDefault
	}
	return c
}

// Validate checks a defaulted config.
func (c Config) Validate() error {
	switch {
	case c.Path == "":
		return errors.New("mirror: path is required")
	case c.Shards < 1:
		return fmt.Errorf("mirror: shards must be positive, got %d", c.Shards)
	case c.QueueSize < 1:
		return fmt.Errorf("mirror: queue size must be positive, got %d", c.QueueSize)
	case c.FlushWindow <= 0:
		return fmt.Errorf("mirror: flush window must be positive, got %s", c.FlushWindow)
	case c.CacheBytes < 0:
		return fmt.Errorf("mirror: cache bytes must be positive, got %d", c.CacheBytes)
	}
	return nil
}

// Mirror is the per-node SQLite view.
type Mirror struct {
	cfg Config
	log zerolog.Logger
	db  *sql.DB // one connection: schema, bulk records, rebuild cleanup, drops
	rdb *sql.DB // readers
	w   *writer // the apply goroutine's writes of job rows
	// spare is the map of a flush's changes, reused (newPending; the
	// apply goroutine's).
	spare map[string]change

	readMu  sync.Mutex // held while reading the shards
	noReads bool       // set by StopReads
	in      chan *statemachine.AppliedInfo
	src     Source
	stop    chan struct{}
	done    chan struct{}

	shards   int
	seen     []atomic.Uint64 // latest index an event brought, per shard
	mirrored []atomic.Uint64 // index committed to SQLite, per shard
	dirty    []atomic.Bool   // events were dropped: rebuild
	losses   []atomic.Int64  // how often changes were lost, per shard
	gen      []int64         // rebuild generation, per shard (apply goroutine)
	rebuilds chan int
	shrinks  chan struct{} // ReleaseMemory asks the apply goroutine
	once     sync.Once

	// hosted: the mirror keeps the shard's rows and applies its events
	// (false after DropShard, or when the node did not host the shard at
	// Start). Only the apply goroutine changes it (Start before it runs).
	hosted []atomic.Bool
	// refill: the shard's rows are incomplete until its rebuild finishes:
	// it is hosted again after a drop, or a snapshot replaced its state
	// (a replica that joined or fell behind: its rows are another state's).
	refill  []atomic.Bool
	drops   chan dropReq
	started atomic.Bool

	dropped *metrics.Counter
	applied *metrics.Counter

	// progress is closed, and replaced, each time mirrored moves forward:
	// WaitFor and Caught wait on it instead of polling.
	progressMu sync.Mutex
	progress   chan struct{}
	// hurry cuts the flush window short: a reader waits for the writes
	// being collected (WaitFor).
	hurry chan struct{}

	// testRowRead, when set (tests), is called after each row a search
	// reads, with the count so far.
	testRowRead func(n int)
}

// Open opens (or creates) the mirror for a node of cfg.Shards shards. A
// file that is corrupt or of another schema is replaced (it is rebuilt
// from Pebble when the mirror starts).
func Open(cfg Config) (*Mirror, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	shards := cfg.Shards
	m := &Mirror{cfg: cfg, log: cfg.Logger.With().Str("component", "mirror").Logger(), shards: shards,
		in: make(chan *statemachine.AppliedInfo, cfg.QueueSize), stop: make(chan struct{}), done: make(chan struct{}),
		seen: make([]atomic.Uint64, shards), mirrored: make([]atomic.Uint64, shards), dirty: make([]atomic.Bool, shards),
		losses: make([]atomic.Int64, shards),
		gen:    make([]int64, shards), rebuilds: make(chan int, shards+1),
		shrinks: make(chan struct{}, 1),
		hosted:  make([]atomic.Bool, shards), refill: make([]atomic.Bool, shards), drops: make(chan dropReq),
		dropped:  metrics.GetOrCreateCounter(`corvo_mirror_dropped_updates_total`),
		applied:  metrics.GetOrCreateCounter(`corvo_mirror_applied_changes_total`),
		progress: make(chan struct{}), hurry: make(chan struct{}, 1),
	}
	for sh := range m.hosted {
		m.hosted[sh].Store(true)
	}
	if err := m.openDB(); err != nil {
		m.log.Warn().Err(err).Msg("mirror unusable: recreating it (it will be rebuilt from Pebble)")
		m.closeDB()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(cfg.Path + suffix)
		}
		if err := m.openDB(); err != nil {
			m.closeDB() // what the second attempt opened before it failed
			return nil, err
		}
	}
	return m, nil
}

func (m *Mirror) openDB() error {
	// synchronous=OFF: the mirror is rebuilt from Pebble whenever it may
	// have lost writes, so it never pays for fsyncs.
	dsn := "file:" + m.cfg.Path + "?_journal_mode=WAL&_synchronous=OFF&_busy_timeout=5000&_foreign_keys=off&_cache_size=-" +
		strconv.FormatInt(max(m.cfg.CacheBytes>>13, 1), 10) // KiB: an eighth of the writer's
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	m.db = db
	if err := m.migrate(); err != nil {
		return err
	}
	// Bookkeeping tables outside the rebuildable view: created in place,
	// so a new one never forces a rebuild of the jobs.
	if _, err := m.db.Exec(bulkSchema); err != nil {
		return err
	}
	if err := m.bulkMigrate(); err != nil {
		return err
	}
	if m.w, err = openWriter(m.cfg.Path, m.cfg.CacheBytes); err != nil {
		return err
	}
	m.w.payloadMax = m.cfg.PayloadMax
	for sh := range m.shards {
		lo, hi := shardRowids(sh)
		var last sql.NullInt64
		if err := m.db.QueryRow(`SELECT max(rowid) FROM jobs WHERE rowid >= ? AND rowid < ?`, lo, hi).Scan(&last); err != nil {
			return err
		}
		m.w.rowids = append(m.w.rowids, max(last.Int64-lo, 0))
	}
	rdb, err := sql.Open("sqlite3", dsn+"&mode=ro")
	if err != nil {
		return err
	}
	rdb.SetMaxOpenConns(4)
	m.rdb = rdb
	rows, err := m.db.Query(`SELECT shard, idx, gen FROM mirror_state`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var sh int
		var idx uint64
		var gen int64
		if err := rows.Scan(&sh, &idx, &gen); err != nil {
			return err
		}
		if sh >= 0 && sh < m.shards {
			m.mirrored[sh].Store(idx)
			m.gen[sh] = gen
		}
	}
	return rows.Err()
}

func (m *Mirror) closeDB() {
	if m.w != nil {
		m.w.close()
		m.w = nil
	}
	if m.db != nil {
		_ = m.db.Close()
		m.db = nil
	}
	if m.rdb != nil {
		_ = m.rdb.Close()
		m.rdb = nil
	}
}

// schemaVersion changes whenever the tables do: an older file is rebuilt.
// 4: payload is the last column of jobs. 5: payload_size (a payload kept
// as its prefix, Config.PayloadMax), before the payload: a column added
// in place would go after it. 6: job_deps (a job's depends_on, searched
// by the dependency). 7: job_usage; cache_key, cached_from, saved_nanos.
// 8: route_target; job_scores. 9: jobs is a rowid table, its indexes
// end with the ID. 10: the time-ordered indexes carry payload_size.
const schemaVersion = 10

func (m *Mirror) migrate() error {
	var v int
	if err := m.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v == schemaVersion {
		return nil
	}
	if v != 0 {
		return fmt.Errorf("mirror schema version %d, want %d (the file is recreated and rebuilt)", v, schemaVersion)
	}
	_, err := m.db.Exec(schema + fmt.Sprintf("PRAGMA user_version = %d;", schemaVersion))
	return err
}

// Times are Unix nanoseconds (NULL when unset); payload, tags, progress,
// checkpoint and result are JSON text (payload only a prefix of it when
// payload_size is set: Config.PayloadMax).
//
// The payload is the row's last column, the free text before it comes
// after the small columns: a row larger than a page spills onto a chain
// of overflow pages, and SQLite reads a column by walking that chain up
// to it, so every column stored after a 1 MiB payload costs reading the
// payload (measured: 0.5 ms a row). Pages of a search select the
// payload only when octet_length (read from the record header, not the
// chain) says it is small (PagePayloadMax).
//
// jobs is a rowid table, not WITHOUT ROWID: a WITHOUT ROWID table keeps
// whole rows in its B-tree's cells, interior ones too, and SQLite reads a
// cell's overflow chain to compare keys, so every lookup by ID read the
// payloads of the rows it passed (BenchmarkMirrorSearchPage, a page of 50
// among jobs with 16 KiB payload prefixes: 4.8 ms, as a rowid table
// 0.25 ms). A rowid table's B-tree compares integers; the ID has its own
// index (the primary key's), and the other indexes end with the ID so
// that they give pages in (sort value, ID) order and test shard ranges
// without a table lookup. A new row's rowid puts it with its shard's rows
// (writer.nextRowid), as the IDs did. The price is one more B-tree to
// write: a small job's insert costs ~15 % more (BenchmarkMirrorWrite 7.9
// -> 9.0 µs).
//
// The indexes a search walks in time order carry payload_size after the
// ID: payload_jq never matches a payload kept as a prefix, and SQLite
// reads payload_size from the index before it seeks the row (a deferred
// seek), so a payload_jq search skips such jobs without reading them
// (BenchmarkMirrorSearchJQCut, 5,000 jobs of 64 KiB: 3-8 ms -> 0.33 ms).
const schema = `
CREATE TABLE jobs (
    id               TEXT PRIMARY KEY NOT NULL,
    shard            INTEGER NOT NULL,
    idx              INTEGER NOT NULL,  -- Raft index of the change this row reflects
    gen              INTEGER NOT NULL,  -- rebuild generation
    queue            TEXT NOT NULL,
    state            TEXT NOT NULL,
    priority         INTEGER NOT NULL,
    attempt          INTEGER NOT NULL,
    max_retries      INTEGER NOT NULL,
    error_count      INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    scheduled_at     INTEGER,
    started_at       INTEGER,
    completed_at     INTEGER,
    failed_at        INTEGER,
    expire_at        INTEGER,
    lease_expires_at INTEGER,
    unique_key       TEXT,
    batch_id         TEXT,
    chain_id         TEXT,
    worker_id        TEXT,
    hostname         TEXT,
    tags             TEXT,
    reason           TEXT,
    progress         TEXT,
    last_error       TEXT,
    checkpoint       TEXT,
    result           TEXT,
    cache_key        TEXT,              -- the job's result cache key (statemachine.JobOptions.CacheKey)
    cached_from      TEXT,              -- completed from the cache: the job whose result it took
    saved_nanos      INTEGER,           -- … and that job's cost (1e-9 USD)
    route_target     TEXT,              -- a routed job's current model (statemachine.Routing.Target)
    payload_size     INTEGER,           -- NULL: payload is whole; else its full size, payload its first bytes
    payload          TEXT NOT NULL
);
CREATE INDEX idx_jobs_queue_state ON jobs(queue, state, created_at, id, payload_size);
CREATE INDEX idx_jobs_created ON jobs(created_at, id, payload_size);
CREATE INDEX idx_jobs_state_created ON jobs(state, created_at, id, payload_size);
CREATE INDEX idx_jobs_batch ON jobs(batch_id, id) WHERE batch_id IS NOT NULL;
CREATE INDEX idx_jobs_unique ON jobs(unique_key, id) WHERE unique_key IS NOT NULL;
CREATE INDEX idx_jobs_route_target ON jobs(route_target, id) WHERE route_target IS NOT NULL;
CREATE TABLE job_errors (
    job_id  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    error   TEXT NOT NULL,
    at      INTEGER NOT NULL
);
CREATE INDEX idx_job_errors_job ON job_errors(job_id);
CREATE TABLE job_deps (
    job_id TEXT NOT NULL,  -- the held job
    dep_id TEXT NOT NULL,  -- a job it depends on
    PRIMARY KEY (job_id, dep_id)
) WITHOUT ROWID;
CREATE INDEX idx_job_deps_dep ON job_deps(dep_id);
CREATE TABLE job_usage (
    job_id                TEXT NOT NULL,
    n                     INTEGER NOT NULL,  -- the record's number in the job (statemachine.UsageRecord)
    shard                 INTEGER NOT NULL,
    attempt               INTEGER NOT NULL,
    phase                 TEXT NOT NULL,     -- heartbeat, ack, fail
    queue                 TEXT NOT NULL,     -- the job's queue when reported
    model                 TEXT,
    provider              TEXT,
    input_tokens          INTEGER NOT NULL,
    output_tokens         INTEGER NOT NULL,
    cache_creation_tokens INTEGER NOT NULL,
    cache_read_tokens     INTEGER NOT NULL,
    cost_nanos            INTEGER NOT NULL,  -- 1e-9 USD
    latency_ms            INTEGER NOT NULL,
    at                    INTEGER NOT NULL,
    PRIMARY KEY (job_id, n)
) WITHOUT ROWID;
CREATE INDEX idx_job_usage_at ON job_usage(at);
CREATE TABLE job_scores (
    job_id    TEXT NOT NULL,
    n         INTEGER NOT NULL,  -- the score's number in the job (statemachine.ScoreRecord)
    dimension TEXT NOT NULL,
    value     REAL NOT NULL,
    shard     INTEGER NOT NULL,
    queue     TEXT NOT NULL,     -- the job's queue when scored
    scorer    TEXT NOT NULL,
    comment   TEXT,
    at        INTEGER NOT NULL,
    PRIMARY KEY (job_id, n, dimension)
) WITHOUT ROWID;
CREATE INDEX idx_job_scores_at ON job_scores(at);
CREATE TABLE mirror_state (
    shard INTEGER PRIMARY KEY,
    idx   INTEGER NOT NULL,
    gen   INTEGER NOT NULL
);
`

// Applied takes a state machine's committed Update (shard.Config's hook).
// It never blocks: when the buffer is full the Update is dropped and its
// shard marked for a rebuild.
func (m *Mirror) Applied(info *statemachine.AppliedInfo) {
	sh := int(info.ShardID) - 1
	if sh < 0 || sh >= m.shards {
		return
	}
	if !m.hosted[sh].Load() {
		// Not kept here (dropped): the event is ignored, and the apply
		// goroutine checks whether the node hosts the shard again (then
		// it rebuilds it from Pebble, which holds what was ignored).
		m.markDirty(sh)
		return
	}
	m.seen[sh].Store(info.Index)
	if info.Reset {
		// A snapshot replaced the shard's state: changes were not
		// emitted for it, so the shard is read again from Pebble, and
		// until then searches ask a node that holds it (Holds).
		m.refill[sh].Store(true)
		m.markDirty(sh)
		return
	}
	n := infoBytes(info)
	if !m.cfg.Buffer.TryAcquire(n) {
		m.dropped.Inc()
		m.markDirty(sh)
		return
	}
	select {
	case m.in <- info:
	default:
		m.cfg.Buffer.Release(n)
		m.dropped.Inc()
		m.markDirty(sh)
	}
}

// infoBytes estimates what an Update's changes hold in memory.
func infoBytes(info *statemachine.AppliedInfo) int64 {
	n := int64(256)
	for i := range info.Changes {
		c := &info.Changes[i]
		n += 128 + int64(len(c.ID))
		if j := c.Job; j != nil {
			n += int64(len(j.Payload) + len(j.Tags) + len(c.State.Result) + len(c.State.Progress) +
				len(c.State.Checkpoint) + len(c.State.LastError) + 256)
		}
	}
	return n
}

// markDirty records that changes of shard sh were lost and queues one
// rebuild (a rebuild in progress sees the new loss count and runs again).
func (m *Mirror) markDirty(sh int) {
	m.losses[sh].Add(1)
	if !m.dirty[sh].Swap(true) {
		m.rebuilds <- sh
	}
}

// Start checks each shard against its Pebble state, schedules rebuilds for
// the ones the mirror missed changes of, and starts applying. A shard the
// node does not host is dropped (rows left from when it did are deleted)
// until the source hosts it again; one it hosts but cannot read yet is
// rebuilt when it can.
func (m *Mirror) Start(src Source) error {
	m.src = src
	for sh := 0; sh < m.shards; sh++ {
		v, err := src.Read(sh, statemachine.OpenedAtQuery{})
		if err != nil && !src.Hosts(sh) {
			if err := m.drop(sh); err != nil {
				return fmt.Errorf("mirror: shard %d is not hosted here, and dropping its rows failed: %w", sh, err)
			}
			continue
		}
		if err != nil {
			m.log.Warn().Err(err).Int("shard", sh).Msg("mirror: cannot read the shard yet; it will be rebuilt when it can")
			m.markDirty(sh)
			continue
		}
		// A mirror ahead of Pebble is normal after a crash (Pebble keeps
		// what it flushed; dragonboat replays the entries after it, and
		// their changes, each row carrying its index, rewrite the rows
		// they already wrote). One behind missed changes: rebuild.
		if opened := v.(uint64); opened > m.mirrored[sh].Load() {
			m.log.Info().Int("shard", sh).Uint64("mirror_index", m.mirrored[sh].Load()).Uint64("pebble_index", opened).Msg("mirror behind Pebble: rebuilding the shard")
			m.markDirty(sh)
		}
	}
	for sh := 0; sh < m.shards; sh++ {
		sh := sh
		metrics.GetOrCreateGauge(fmt.Sprintf(`corvo_mirror_lag_entries{shard="%d"}`, sh), func() float64 {
			return float64(m.seen[sh].Load()) - float64(m.mirrored[sh].Load())
		})
	}
	m.started.Store(true)
	go m.loop()
	return nil
}

// dropReq asks the apply goroutine to drop a shard.
type dropReq struct {
	shard int
	done  chan error
}

// DropShard deletes shard sh's rows and its applied index: this node
// stopped hosting it (call it once the Source no longer hosts it). Events
// still queued for it are ignored, and so is every later one until the
// Source hosts the shard again: then it is rebuilt from Pebble (a Reset or
// any event of the shard, or a check every second, notices). It runs on
// the apply goroutine, between writes and rebuilds.
func (m *Mirror) DropShard(sh int) error {
	if sh < 0 || sh >= m.shards {
		return fmt.Errorf("mirror: no shard %d", sh)
	}
	if !m.started.Load() {
		return m.drop(sh)
	}
	req := dropReq{shard: sh, done: make(chan error, 1)}
	select {
	case m.drops <- req:
	case <-m.done:
		return errors.New("mirror: closed")
	}
	select {
	case err := <-req.done:
		return err
	case <-m.done:
		return errors.New("mirror: closed")
	}
}

// drop forgets shard sh (the apply goroutine, or Start before it runs).
func (m *Mirror) drop(sh int) error {
	m.hosted[sh].Store(false)
	m.refill[sh].Store(false)
	lo, hi := shardIDRange(sh)
	err := func() error {
		tx, err := m.db.BeginTx(context.Background(), nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`DELETE FROM job_errors WHERE job_id >= ? AND job_id < ?`, []any{lo, hi}},
			{`DELETE FROM job_deps WHERE job_id >= ? AND job_id < ?`, []any{lo, hi}},
			{`DELETE FROM job_usage WHERE job_id >= ? AND job_id < ?`, []any{lo, hi}},
			{`DELETE FROM job_scores WHERE job_id >= ? AND job_id < ?`, []any{lo, hi}},
			{`DELETE FROM jobs WHERE id >= ? AND id < ?`, []any{lo, hi}},
			{`DELETE FROM mirror_state WHERE shard = ?`, []any{sh}},
		} {
			if _, err := tx.Exec(q.sql, q.args...); err != nil {
				return err
			}
		}
		return tx.Commit()
	}()
	m.seen[sh].Store(0)
	m.mirrored[sh].Store(0)
	if err != nil {
		return fmt.Errorf("mirror: drop shard %d: %w", sh, err)
	}
	m.log.Info().Int("shard", sh).Msg("mirror dropped a shard this node no longer hosts")
	return nil
}

// Holds reports whether the mirror has shard sh's rows in full, up to its
// lag: it keeps the shard and is not refilling it after a drop.
func (m *Mirror) Holds(sh int) bool {
	return sh >= 0 && sh < m.shards && m.hosted[sh].Load() && !m.refill[sh].Load()
}

// ReleaseMemory gives back what SQLite caches (the node's idle release):
// the read connections close (they reopen on the next read) and the
// writer frees its page cache and buffer, between two writes.
func (m *Mirror) ReleaseMemory() {
	for _, db := range []*sql.DB{m.rdb, m.db} {
		db.SetMaxIdleConns(0) // closes the idle ones
		db.SetMaxIdleConns(maxIdleConns)
	}
	select {
	case m.shrinks <- struct{}{}:
	default: // one is already asked for
	}
}

// maxIdleConns is database/sql's default.
const maxIdleConns = 2

// RequestRebuild rebuilds every shard from Pebble (POST /admin/rebuild-mirror).
func (m *Mirror) RequestRebuild() {
	for sh := 0; sh < m.shards; sh++ {
		m.markDirty(sh)
	}
}

// Close stops applying and closes the database.
func (m *Mirror) Close() {
	m.once.Do(func() {
		close(m.stop)
		if m.src != nil {
			<-m.done
		}
		m.closeDB()
	})
}

// Lag is how far the mirror is behind each shard, in Raft entries (at
// least 1 while a shard waits for a rebuild after dropped changes).
func (m *Mirror) Lag() []int64 {
	out := make([]int64, m.shards)
	for sh := range out {
		if !m.hosted[sh].Load() {
			continue // not kept here
		}
		if d := int64(m.seen[sh].Load()) - int64(m.mirrored[sh].Load()); d > 0 {
			out[sh] = d
		}
		if out[sh] == 0 && m.dirty[sh].Load() {
			out[sh] = 1 // changes were dropped and a rebuild is due
		}
	}
	return out
}

// advanced wakes the waiters of WaitFor and Caught: mirrored moved.
func (m *Mirror) advanced() {
	m.progressMu.Lock()
	close(m.progress)
	m.progress = make(chan struct{})
	m.progressMu.Unlock()
}

// progressed is the channel the next advance closes.
func (m *Mirror) progressed() <-chan struct{} {
	m.progressMu.Lock()
	defer m.progressMu.Unlock()
	return m.progress
}

// Mark is, per shard, the index of the latest change this node's replica
// handed the mirror (0 for a shard not kept here). Every write this node
// has answered is at or below it: a search that waits for the mark
// (WaitFor) reads its own writes.
func (m *Mirror) Mark() []uint64 {
	out := make([]uint64, m.shards)
	for sh := range out {
		if m.hosted[sh].Load() {
			out[sh] = m.seen[sh].Load()
		}
	}
	return out
}

// WaitFor waits until the mirror has written every shard's changes up to
// mark (from Mark) into SQLite, or ctx ends (its error). Shards not kept
// here are skipped. The writer wakes it after each flush or rebuild.
func (m *Mirror) WaitFor(ctx context.Context, mark []uint64) error {
	for {
		next := m.progressed()
		reached := true
		for sh, idx := range mark {
			if sh < m.shards && m.hosted[sh].Load() && m.mirrored[sh].Load() < idx {
				reached = false
				break
			}
		}
		if reached {
			return nil
		}
		select {
		case m.hurry <- struct{}{}: // flush what is collected now
		default:
		}
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Caught reports whether the mirror has applied every change up to the
// given indexes (tests and "read your writes" waits).
func (m *Mirror) Caught(ctx context.Context) error {
	for {
		next := m.progressed()
		behind := false
		for sh := 0; sh < m.shards; sh++ {
			if !m.hosted[sh].Load() {
				continue
			}
			if m.dirty[sh].Load() || m.mirrored[sh].Load() < m.seen[sh].Load() {
				behind = true
			}
		}
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("mirror: still behind")
		case <-next:
		case <-time.After(100 * time.Millisecond): // a rebuild that fails midway advances nothing: look again
		}
	}
}
