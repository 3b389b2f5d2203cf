// Package statemachine is Corvo's job lifecycle as a deterministic
// dragonboat on-disk state machine over Pebble, one Pebble DB per shard.
//
// Every mutation arrives as an Entry of ops (see ops.go). Update applies all
// entries it is given in one Pebble batch, together with the applied index,
// so a crash never applies an entry twice or skips one. The state machine
// never reads a clock or a random source: time comes inside each entry.
package statemachine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/internal/intern"
)

// ResultApplied and ResultRejected are the sm.Result.Value of an entry: a
// rejected entry (undecodable) changed nothing.
const (
	ResultRejected uint64 = 0
	ResultApplied  uint64 = 1
)

// Listener hears about every committed Update. It runs on the apply
// goroutine: it must be quick and must not block.
type Listener interface {
	Applied(info *AppliedInfo)
}

// QueueSignal describes a queue an Update touched.
type QueueSignal struct {
	Queue   string
	Pending int64 // pending jobs now
	Paused  bool
	Ready   bool      // it gained fetchable jobs (enqueue, promote, reclaim, resume …)
	Head    QueueHead // its first pending job, when Pending > 0
	// BlockedUntil says a limit keeps the queue's pending jobs from being
	// fetched: until this time (a throttle window frees up), or until a
	// later signal (math.MaxInt64: the concurrency cap is reached). 0: not
	// blocked.
	BlockedUntil int64
	// Provider names the queue's provider when its window is what
	// blocks the queue (BlockedUntil is then the provider's), for
	// metrics.
	Provider string
}

// AppliedInfo describes one committed Update.
type AppliedInfo struct {
	ShardID uint64
	Index   uint64
	Queues  []QueueSignal
	// Shard-wide counts after the Update: leases the reclaim ticker must
	// watch, and scheduled + retrying jobs the promote ticker must watch.
	Active int64
	Due    int64
	Outbox int64 // outbox records awaiting delivery
	// NextCron is the earliest scheduled cron run (Unix ns, 0: none).
	NextCron int64
	// Changes lists every job the Update touched, with its final state
	// (Config.EmitChanges only): the mirror's feed.
	Changes []JobChange
	// Reset says the shard's state was replaced by a snapshot from the
	// leader (a replica that fell behind the log): everything derived
	// from it must be re-read; Queues, Changes and Events are empty.
	Reset bool
	// From is the Update's first entry index (Index is its last).
	From uint64
	// Bytes is the size of the Update's entries as the Raft log holds
	// them (their commands): the shard host snapshots and compacts the
	// log by it.
	Bytes uint64
	// Events lists every lifecycle transition of the Update in apply
	// order (Config.EmitEvents only): the feed of GET /api/v1/events.
	Events []JobEvent
}

// JobChange is a job's state after an Update, or its deletion. Everything
// it holds is the receiver's to read, never to modify: the record may be
// shared with the state machine's job cache.
type JobChange struct {
	ID        string
	Deleted   bool
	Job       *Job // the job's record; nil when Deleted
	State     JobState
	NewErrors []JobError // errors recorded in this Update
	// NewUsage lists the usage records written in this Update, oldest
	// first; a heartbeat's record replaces the record of the same N.
	NewUsage []UsageRecord
	// NewScores lists the score records written in this Update, oldest
	// first.
	NewScores []ScoreRecord
}

// Config configures one shard's state machine.
type Config struct {
	ShardID  uint64
	Dir      string        // the Pebble directory
	FS       vfs.FS        // nil: the OS file system
	Cache    *pebble.Cache // shared block cache; nil: Pebble's default
	Listener Listener      // nil: none
	Logger   zerolog.Logger
	// JobCacheBytes bounds the in-memory cache of live jobs (0: default;
	// negative: off).
	JobCacheBytes int64
	// MemTableBytes is Pebble's memtable size (0: MemTableBytesDefault);
	// Pebble holds up to two per shard.
	MemTableBytes int64
	// Handoff, when set, takes each entry's results to the proposer
	// waiting for them on this node, and dragonboat's results carry none
	// (Handoff).
	Handoff *Handoff
	// EmitChanges fills AppliedInfo.Changes (the mirror needs them).
	EmitChanges bool
	// EmitEvents fills AppliedInfo.Events (the event stream needs them).
	EmitEvents bool
}

// MemTableBytesDefault is Config.MemTableBytes's default.
const MemTableBytesDefault = 32 << 20

// StateMachine implements dragonboat's IOnDiskStateMachine.
type StateMachine struct {
	cfg Config
	db  *pebble.DB

	// Owned by the apply goroutine (Open, Update, Recover).
	applied uint64
	lastNow int64
	// spare is the applier Updates reuse (newApplier); names interns the
	// queue, worker and host names of the entries it decodes.
	spare *applier
	names intern.Table
	// encScratch is where an entry's results are encoded (applyEntry),
	// kept from one entry to the next.
	encScratch []byte
	stats      map[string]*QueueStats
	configs    map[string]*QueueConfig
	// Shard-wide totals of active and of scheduled + retrying jobs.
	active, due int64
	// Every key of the due (d|) and lease (l|) indexes below these is gone,
	// so promote and reclaim scans start here. Keys are always inserted in
	// the future of the entry that inserts them, and a scan up to now moves
	// the cursor to now, so the cursors only ever advance. Like the pending
	// cursors, they change costs, never results.
	dueCursor, leaseCursor, expireCursor, uniqueCursor, purgeCursor, workerCursor, cacheCursor []byte
	// workers mirrors w| records touched since open (write-through).
	workers map[string]*Worker
	// outbox counts the records awaiting delivery.
	outbox int64
	// watched counts, per job, the jobs waiting on it (its dw| keys).
	watched map[string]int
	// schedules counts cron schedules; nextCron is the earliest run (0:
	// none), recomputed when nextCronStale.
	schedules, nextCron int64
	nextCronStale       bool
	// heads[queue] is the queue's exact first pending key when known (nil
	// when not), so the per-Update queue signals rarely need a seek.
	heads map[string][]byte
	// wins[queue] is the queue's pending window (pendwin.go); tests set
	// winKeys (its size; 0: the default) and noWins (none at all).
	wins    map[string]*pendWin
	winKeys int
	noWins  bool
	// jobs caches the records of live jobs, write-through (see jobcache.go).
	// jobsMu is held by Update and by ReleaseMemory, which empties it
	// from another goroutine.
	jobs   *jobCache
	jobsMu sync.Mutex
	// rates[queue] holds the fetch times of a throttled queue inside its
	// window, oldest first: a copy of its rl| keys, loaded on first use.
	rates map[string][]int64
	// provReqs and provToks hold a provider's request times and token
	// reports inside its window, by provider ID: copies of its pr| and
	// pt| keys, loaded on first use.
	provReqs map[string][]int64
	provToks map[string][]provTok

	// cursors[queue] is a key no greater than the queue's first pending key,
	// so fetches seek past the tombstones of consumed jobs. It only speeds
	// scans up; results never depend on it. Lookups read it under mu.
	mu      sync.RWMutex
	cursors map[string][]byte

	appliedAtomic atomic.Uint64 // the applied index, for lookups
	jobBytes      atomic.Int64  // the job cache's size after the last Update (MemoryUsage)
	filterBytes   atomic.Int64  // the dedup and job-ID filters' size after the last Update (FilterBytes)
	closeMu       sync.RWMutex  // lookups, Sync and snapshots hold it shared; Close and ReleaseMemory's reopen exclusively
	pinned        atomic.Int32  // snapshots prepared and not yet saved: the DB may not reopen
	closed        bool
	openedAt      uint64       // the applied index Open found
	dedup         *dedupFilter // which entry IDs may have a dedup record (dedup.go)
	jobIDs        *jobIDFilter // which recent job IDs may have a job record (jobids.go)
	recoverBatch  int          // recover's batch size (0: recoverBatchBytes)
}

var _ sm.IOnDiskStateMachine = (*StateMachine)(nil)

// New returns a state machine that opens its Pebble DB in Open.
func New(cfg Config) *StateMachine {
	return &StateMachine{cfg: cfg}
}

func (s *StateMachine) pebbleOptions() *pebble.Options {
	opts := &pebble.Options{
		FS:                    s.cfg.FS,
		Cache:                 s.cfg.Cache,
		MemTableSize:          uint64(cmp.Or(s.cfg.MemTableBytes, MemTableBytesDefault)),
		L0CompactionThreshold: 8,
		L0StopWritesThreshold: 32,
		Logger:                pebbleLogger{s.cfg.Logger},
		EventListener: &pebble.EventListener{
			BackgroundError: (&errorLimiter{log: s.cfg.Logger, every: backgroundErrorEvery, now: time.Now}).backgroundError,
		},
		// No write-ahead log: the Raft log is this DB's log. Update
		// commits to the memtable only; Sync (before every snapshot and
		// log compaction) and Close flush it, and after a crash Open
		// returns the index of the last flush and dragonboat replays
		// the entries after it. A WAL wrote every payload a second
		// time, and its preallocated, recycled files held a few times
		// the memtable size on disk per shard.
		DisableWAL: true,
	}
	// No block compression: decompressing blocks on every point read cost
	// more CPU than the disk it saves (measured on the batched lifecycle).
	opts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	opts.TargetFileSizes[1] = lbaseFileSize
	// Most point reads miss (a pending job has no state record yet, an
	// entry ID is new): bloom filters answer those without touching SSTs.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	return opts
}

// lbaseFileSize is the target SST size of the first level below L0, each
// level below it twice the one above (Pebble's default: 4 MB, as L0's 2 MB
// doubled). L0's stays Pebble's (16 MB there cost the batched lifecycle
// more CPU). Every table costs Go heap for as long as the node runs (its
// metadata, its reader in the file cache, about 3 KB): the overload's 7 GB
// of payloads made ~1,000 tables with Pebble's sizes, 130–290 with these
// (BENCHMARKS.md, session 29; TestFewTablesForLargePayloads); the
// lifecycle, one job per request and batched, measured the same.
const lbaseFileSize = 16 << 20

// Open opens the shard's Pebble DB and returns the last applied index.
func (s *StateMachine) Open(<-chan struct{}) (uint64, error) {
	db, err := pebble.Open(s.cfg.Dir, s.pebbleOptions())
	if err != nil {
		return 0, fmt.Errorf("open pebble %s: %w", s.cfg.Dir, err)
	}
	if err := s.wipeUnfinishedRecovery(db); err != nil {
		_ = db.Close()
		return 0, err
	}
	s.closeMu.Lock() // MemoryUsage reads db from other goroutines
	s.db = db
	s.closeMu.Unlock()
	if err := s.loadMeta(); err != nil {
		s.closeMu.Lock()
		s.db = nil
		s.closeMu.Unlock()
		_ = db.Close()
		return 0, err
	}
	s.openedAt = s.applied
	return s.applied, nil
}

// allKeysStart and allKeysEnd bound every key of the layout (keys.go).
var (
	allKeysStart = []byte{0}
	allKeysEnd   = []byte{0xff, 0xff, 0xff, 0xff}
)

// wipeUnfinishedRecovery empties a DB that holds keys but no applied
// index: what a snapshot recovery that did not finish left (recover writes
// the index last; every Update writes it), which is neither the state
// before it nor the snapshot's. Open then returns 0, and dragonboat
// recovers from the snapshot again (or the replica catches up from
// scratch), instead of running on a DB with keys missing.
func (s *StateMachine) wipeUnfinishedRecovery(db *pebble.DB) error {
	_, closer, err := db.Get([]byte(keyMeta))
	if err == nil {
		return closer.Close()
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("read applied index: %w", err)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	found := it.First()
	if err := it.Close(); err != nil {
		return err
	}
	if !found {
		return nil // a new DB
	}
	s.cfg.Logger.Warn().Str("dir", s.cfg.Dir).Msg("the shard's state holds the rest of a snapshot recovery that did not finish: emptied")
	if err := db.DeleteRange(allKeysStart, allKeysEnd, pebble.NoSync); err != nil {
		return fmt.Errorf("empty an unfinished recovery: %w", err)
	}
	if err := flushWithin(db, flushWait); err != nil {
		return fmt.Errorf("empty an unfinished recovery: flush: %w", err)
	}
	return nil
}

func (s *StateMachine) resetCaches() {
	s.stats = make(map[string]*QueueStats)
	s.configs = make(map[string]*QueueConfig)
	s.dueCursor, s.leaseCursor, s.expireCursor, s.uniqueCursor, s.purgeCursor, s.workerCursor, s.cacheCursor = nil, nil, nil, nil, nil, nil, nil
	s.workers = make(map[string]*Worker)
	s.heads = make(map[string][]byte)
	s.wins = make(map[string]*pendWin)
	s.jobsMu.Lock()
	s.jobs = newJobCache(s.cfg.JobCacheBytes)
	s.jobsMu.Unlock()
	s.rates = make(map[string][]int64)
	s.provReqs = make(map[string][]int64)
	s.provToks = make(map[string][]provTok)
	s.watched = make(map[string]int)
	s.active, s.due, s.outbox = 0, 0, 0
	s.schedules, s.nextCron, s.nextCronStale = 0, 0, false
	s.mu.Lock()
	s.cursors = make(map[string][]byte)
	s.mu.Unlock()
}

func (s *StateMachine) loadMeta() error {
	s.resetCaches()
	s.applied, s.lastNow = 0, 0
	infos, err := s.listQueues()
	if err != nil {
		return err
	}
	for i := range infos {
		c := &infos[i].Stats.Counts
		s.active += c[StateActive]
		s.due += c[StateScheduled] + c[StateRetrying]
	}
	if err := s.countOutbox(); err != nil {
		return err
	}
	if err := s.loadCronState(); err != nil {
		return err
	}
	if err := s.loadWatched(); err != nil {
		return err
	}
	if err := s.loadDedup(); err != nil {
		return err
	}
	if err := s.loadApplied(); err != nil {
		return err
	}
	if err := s.loadJobIDs(s.lastNow); err != nil {
		return err
	}
	s.filterBytes.Store(s.filtersSize())
	return nil
}

// filtersSize is what the dedup and job-ID filters' bit arrays take
// (FilterBytes). Call with jobsMu held, or before the shard serves.
func (s *StateMachine) filtersSize() int64 {
	var n int64
	if s.dedup != nil {
		n += s.dedup.bytes
	}
	if s.jobIDs != nil {
		n += s.jobIDs.bytes
	}
	return n
}

// loadApplied reads the applied index and the last entry's time.
func (s *StateMachine) loadApplied() error {
	v, closer, err := s.db.Get([]byte(keyMeta))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read applied index: %w", err)
	}
	defer closer.Close()
	if len(v) != 16 {
		return fmt.Errorf("corrupt applied index record (%d bytes)", len(v))
	}
	s.applied = binary.BigEndian.Uint64(v[:8])
	s.lastNow = int64(binary.BigEndian.Uint64(v[8:]))
	s.appliedAtomic.Store(s.applied)
	return nil
}

// Update applies committed entries in one Pebble batch.
func (s *StateMachine) Update(entries []sm.Entry) ([]sm.Entry, error) {
	if len(entries) == 0 {
		return entries, nil
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	b := s.db.NewIndexedBatch()
	defer b.Close()
	a := newApplier(s, b)
	defer a.done()
	var size uint64
	for i := range entries {
		ent := &entries[i]
		size += uint64(len(ent.Cmd))
		if ent.Index <= s.applied {
			// Already applied (can only happen if dragonboat replays what
			// Open reported as applied); keep the state untouched.
			ent.Result = sm.Result{Value: ResultRejected}
			continue
		}
		a.index = ent.Index
		data, ok := a.applyEntry(ent.Cmd)
		if a.err != nil {
			return nil, a.err
		}
		if ok {
			ent.Result = sm.Result{Value: ResultApplied, Data: data}
		} else {
			ent.Result = sm.Result{Value: ResultRejected}
		}
	}
	signals := a.flushStats()
	last := entries[len(entries)-1].Index
	var meta [16]byte
	binary.BigEndian.PutUint64(meta[:8], last)
	binary.BigEndian.PutUint64(meta[8:], uint64(s.lastNow))
	if err := b.Set([]byte(keyMeta), meta[:], nil); err != nil {
		return nil, err
	}
	if a.err != nil {
		return nil, a.err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	s.applied = last
	s.appliedAtomic.Store(last)
	s.jobBytes.Store(s.jobs.bytes)
	s.filterBytes.Store(s.filtersSize())
	if s.cfg.Listener != nil {
		s.cfg.Listener.Applied(&AppliedInfo{ShardID: s.cfg.ShardID, Index: last, Queues: signals, Active: s.active, Due: s.due,
			Outbox: s.outbox, NextCron: s.nextCron, Changes: a.changeList(), From: entries[0].Index, Events: a.events, Bytes: size})
	}
	return entries, nil
}

// Sync makes every applied entry durable: it flushes the memtable (the DB
// has no WAL; the Raft log is the durability anchor and replays from the
// applied index Open finds). dragonboat calls it before it snapshots or
// compacts its log.
func (s *StateMachine) Sync() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	if err := flushWithin(s.db, flushWait); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// FilterBytes is what the shard's dedup and job-ID filters hold (bloom
// filters of the entry IDs of DedupRetention and the job IDs of the last
// 20-30 s: they grow with the write rate, ~1-2 bytes per job).
func (s *StateMachine) FilterBytes() int64 { return s.filterBytes.Load() }

// MemoryUsage is what the shard holds in memory: its Pebble memtables
// (those waiting to be freed included) and its cache of live jobs.
func (s *StateMachine) MemoryUsage() (memtables, jobCache int64) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed || s.db == nil {
		return 0, 0
	}
	m := s.db.Metrics()
	return int64(m.MemTable.Size + m.MemTable.ZombieSize), s.jobBytes.Load()
}

// ReleaseMemory gives back what the shard holds in memory for speed, when
// the node has been quiet (the node's idle release): it empties the cache
// of live jobs (the next reads of those jobs go to Pebble), flushes the
// memtable and reopens the Pebble DB. The reopen is what frees the
// memtables: Pebble keeps a flushed memtable's arena for the next one, so a
// DB that took a burst holds two full arenas until it closes, and a fresh
// one starts small. Safe from any goroutine; results never depend on it.
// While lookups or a snapshot hold the DB it only empties the cache and
// flushes.
func (s *StateMachine) ReleaseMemory() error {
	// Lock order: jobsMu, then closeMu only by TryLock, so neither an
	// Update (jobsMu) nor a lookup (closeMu) ever waits on the other.
	for try := 0; ; try++ {
		s.jobsMu.Lock()
		if s.closeMu.TryLock() {
			err := s.reopenLocked()
			s.closeMu.Unlock()
			s.jobsMu.Unlock()
			return err
		}
		s.jobsMu.Unlock()
		if try == 20 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed || s.db == nil {
		return nil
	}
	s.dropJobCache()
	if err := flushWithin(s.db, releaseFlushWait); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

func (s *StateMachine) dropJobCache() {
	s.jobsMu.Lock()
	s.jobs = newJobCache(s.cfg.JobCacheBytes)
	s.jobBytes.Store(0)
	s.jobsMu.Unlock()
}

// reopenLocked runs ReleaseMemory under jobsMu and closeMu, held
// exclusively: no Update, lookup or snapshot preparation runs.
func (s *StateMachine) reopenLocked() error {
	if s.closed || s.db == nil {
		return nil
	}
	s.jobs = newJobCache(s.cfg.JobCacheBytes)
	s.jobBytes.Store(0)
	s.wins = make(map[string]*pendWin) // filled again by the next fetches
	if err := flushWithin(s.db, releaseFlushWait); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if s.pinned.Load() > 0 { // a snapshot being saved reads this DB
		return nil
	}
	if err := s.db.Close(); err != nil {
		s.db, s.closed = nil, true
		return fmt.Errorf("close to release memory: %w", err)
	}
	db, err := pebble.Open(s.cfg.Dir, s.pebbleOptions())
	if err != nil {
		s.db, s.closed = nil, true
		return fmt.Errorf("reopen pebble %s: %w", s.cfg.Dir, err)
	}
	s.db = db
	return nil
}

// ErrClosed answers lookups on a closed state machine.
var ErrClosed = errors.New("statemachine: closed")

// Close closes the Pebble DB, after any lookup in flight.
func (s *StateMachine) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.closed = true
	if s.db == nil {
		return nil
	}
	// What the memtable holds is flushed, so a restart need not replay
	// it from the Raft log (a crash does); a flush that cannot finish
	// is left to that replay.
	ferr := flushWithin(s.db, closeFlushWait)
	err := s.db.Close()
	s.db = nil
	if ferr != nil {
		return fmt.Errorf("flush at close: %w", ferr)
	}
	return err
}

// Applied returns the last applied index; safe from any goroutine.
func (s *StateMachine) Applied() uint64 { return s.appliedAtomic.Load() }

const snapshotMagic = "CORVOSNAP1"

// PrepareSnapshot pins a consistent view of the DB.
func (s *StateMachine) PrepareSnapshot() (interface{}, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.db == nil {
		return nil, ErrClosed
	}
	s.pinned.Add(1) // until SaveSnapshot closes it
	return s.db.NewSnapshot(), nil
}

// SaveSnapshot streams every key of the pinned view as length-prefixed
// pairs.
func (s *StateMachine) SaveSnapshot(ctx interface{}, w io.Writer, done <-chan struct{}) error {
	snap, ok := ctx.(*pebble.Snapshot)
	if !ok {
		return errors.New("statemachine: bad snapshot context")
	}
	defer s.pinned.Add(-1)
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	bw := newSnapWriter(w)
	bw.raw([]byte(snapshotMagic))
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if n++; n%4096 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		bw.pair(it.Key(), it.Value())
	}
	if err := it.Error(); err != nil {
		return err
	}
	bw.end()
	return bw.err
}

// RecoverFromSnapshot replaces the DB's contents with a snapshot stream.
func (s *StateMachine) RecoverFromSnapshot(r io.Reader, done <-chan struct{}) error {
	if err := s.recover(r, done); err != nil {
		return err
	}
	if s.cfg.Listener != nil {
		s.cfg.Listener.Applied(&AppliedInfo{ShardID: s.cfg.ShardID, Index: s.applied, Active: s.active, Due: s.due,
			Outbox: s.outbox, NextCron: s.nextCron, Reset: true})
	}
	return nil
}

// recoverBatchBytes is how much of a snapshot stream recover commits at a
// time (StateMachine.recoverBatch: tests split small snapshots).
const recoverBatchBytes = 4 << 20

// recover is RecoverFromSnapshot's work, with the DB held (closeMu). It
// commits the stream in batches, so a recovery that stops half-way (the
// node shuts down: done; the stream breaks) leaves a DB that is neither
// the old state nor the new. The applied index is therefore written last,
// in the batch that completes the recovery: until then the DB has none
// (the first step deletes every key), and Open takes a DB with keys but
// no applied index for what it is, the rest of an unfinished recovery
// (wipeUnfinishedRecovery). Written in stream order, it had sorted among
// the first keys (m|) and landed in an early batch, and Open after a stop
// returned the snapshot's index over a DB without the keys that sort
// after it (pending index, queue stats, dedup records …).
func (s *StateMachine) recover(r io.Reader, done <-chan struct{}) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	sr := newSnapReader(r)
	magic := sr.raw(len(snapshotMagic))
	if sr.err != nil || string(magic) != snapshotMagic {
		return errors.New("statemachine: not a corvo snapshot")
	}
	if err := s.db.DeleteRange(allKeysStart, allKeysEnd, pebble.NoSync); err != nil {
		return err
	}
	var meta []byte
	b := s.db.NewBatch()
	for {
		k, v, ok := sr.pair()
		if sr.err != nil {
			b.Close()
			return sr.err
		}
		if !ok {
			break
		}
		if string(k) == keyMeta {
			meta = append([]byte(nil), v...)
			continue
		}
		if err := b.Set(k, v, nil); err != nil {
			b.Close()
			return err
		}
		if b.Len() > cmp.Or(s.recoverBatch, recoverBatchBytes) {
			select {
			case <-done:
				b.Close()
				return sm.ErrSnapshotStopped
			default:
			}
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b = s.db.NewBatch()
		}
	}
	if meta != nil {
		if err := b.Set([]byte(keyMeta), meta, nil); err != nil {
			b.Close()
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	if err := flushWithin(s.db, flushWait); err != nil { // durable before dragonboat records the snapshot
		return fmt.Errorf("flush: %w", err)
	}
	return s.loadMeta()
}

type pebbleLogger struct{ l zerolog.Logger }

func (pebbleLogger) Infof(string, ...interface{}) {}
func (p pebbleLogger) Errorf(format string, args ...interface{}) {
	p.l.Error().Str("component", "pebble").Msgf(format, args...)
}
func (p pebbleLogger) Fatalf(format string, args ...interface{}) {
	p.l.Fatal().Str("component", "pebble").Msgf(format, args...)
}

// cursor returns the fetch lower bound for a queue.
func (s *StateMachine) cursor(queue string) []byte {
	s.mu.RLock()
	c := s.cursors[queue]
	s.mu.RUnlock()
	if c == nil {
		return pendingPrefix(queue)
	}
	return c
}

func (s *StateMachine) lowerCursor(queue string, key []byte) {
	s.mu.Lock()
	if c, ok := s.cursors[queue]; ok && bytes.Compare(key, c) < 0 {
		s.cursors[queue] = append([]byte(nil), key...)
	}
	s.mu.Unlock()
}

func (s *StateMachine) setCursor(queue string, key []byte) {
	s.mu.Lock()
	s.cursors[queue] = append([]byte(nil), key...)
	s.mu.Unlock()
}
