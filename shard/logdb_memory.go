package shard

import (
	"errors"
	"fmt"
	"reflect"
	"time"
	"unsafe"

	pebblelog "github.com/cockroachdb/pebble"
	"github.com/lni/dragonboat/v4"

	"github.com/corvohq/corvo/statemachine"
)

// The Raft log's memtable after a burst. dragonboat's LogDB is a Pebble
// (v1) DB whose memtable is an arena of logDBMemTableBytes taken from the C
// heap (its own mapping: above glibc's mmap threshold). A fresh arena
// costs nothing until written; one the burst filled stays resident until
// the memtable is flushed, which happens only once it is full, so a node
// that went quiet kept up to 4 MiB of log it will never read again. The
// node's idle release (Host.ReleaseMemory) flushes it: the full arena is
// freed and its successor is untouched.
//
// dragonboat gives no handle on its LogDB, so the Pebble DBs are found by
// reflection along NodeHost.mu.logdb → ShardedDB.shards[i].kvs → KV.db,
// once, when the host opens. This reaches into dragonboat's internals like
// inmem_slice.go: the version is pinned in go.mod (ARCHITECTURE.md), and
// TestLogDBFlushFreesItsMemtable fails if the path stops leading to the
// DBs after an upgrade. If it does not lead there, the host runs without
// this release (a warning says so).

// logDBs finds the Pebble DBs of nh's LogDB.
func logDBs(nh *dragonboat.NodeHost) ([]*pebblelog.DB, error) {
	v := reflect.ValueOf(nh).Elem()
	step := func(v reflect.Value, name string) (reflect.Value, error) {
		for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, fmt.Errorf("%s: nil on the way", name)
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("%s: not a struct (%s)", name, v.Type())
		}
		f := v.FieldByName(name)
		if !f.IsValid() {
			return reflect.Value{}, fmt.Errorf("%s: no such field in %s", name, v.Type())
		}
		return f, nil
	}
	var err error
	for _, name := range []string{"mu", "logdb", "shards"} {
		if v, err = step(v, name); err != nil {
			return nil, err
		}
	}
	if v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("shards: not a slice (%s)", v.Type())
	}
	dbType := reflect.TypeOf((*pebblelog.DB)(nil))
	var dbs []*pebblelog.DB
	for i := range v.Len() {
		kvs, err := step(v.Index(i), "kvs")
		if err != nil {
			return nil, err
		}
		db, err := step(kvs, "db")
		if err != nil {
			return nil, err
		}
		if db.Type() != dbType {
			return nil, fmt.Errorf("db: %s, not %s", db.Type(), dbType)
		}
		p := *(**pebblelog.DB)(unsafe.Pointer(db.UnsafeAddr()))
		if p == nil {
			return nil, errors.New("db: nil")
		}
		dbs = append(dbs, p)
	}
	if len(dbs) == 0 {
		return nil, errors.New("no LogDB shards")
	}
	return dbs, nil
}

// flushLogDB flushes the LogDB's memtables (the node's idle release, once
// per quiet spell).
func (h *Host) flushLogDB() error {
	h.logDBMu.Lock()
	defer h.logDBMu.Unlock()
	var errs []error
	for _, db := range h.logDBs {
		// A flush that cannot write is retried by Pebble for ever: wait
		// for it a bounded time.
		if err := statemachine.FlushWithin(db.AsyncFlush, logDBFlushWait); err != nil {
			errs = append(errs, fmt.Errorf("flush the raft log: %w", err))
		}
	}
	return errors.Join(errs...)
}

// logDBFlushWait bounds the idle release's flush of the Raft log.
const logDBFlushWait = time.Minute
