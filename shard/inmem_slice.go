package shard

import (
	_ "unsafe" // go:linkname

	_ "github.com/lni/dragonboat/v4" // defines the variables below
)

// dragonboat's in-memory Raft log (internal/raft/inmemory.go) makes a new
// slice of InMemEntrySliceSize entries (512 × 80 bytes, 40 KiB) whenever
// applied entries leave fewer than MinEntrySliceFreeSize (96) free slots
// or at most one entry — with one entry in flight per shard (the
// proposer's rule), on nearly every step. That was over half of the bytes
// a server allocated and doubled its GC cycles. The sizes come only from
// settings.Soft, which dragonboat reads from a dragonboat-soft-settings.json
// in the process's working directory and copies into these package
// variables at init; a server's working directory is not ours to use, so
// they are set here, after dragonboat's init (this package imports it).
//
// Measured (scripts/ab-cpu.sh, same binary, BENCHMARKS.md): bytes
// allocated per job 44 K → 21 K end to end, GC cycles per 1,000 jobs
// halved, enqueue CPU per 1,000 jobs 0.164 → 0.126 s.
//
// At 4 entries (session 16; it was 16) a slice is 320 bytes: with one
// entry in flight per shard, nearly every applied entry leaves the log
// empty and dragonboat makes a new slice then, whatever its size; a longer
// run of entries grows it by append. Bytes allocated per job one enqueue
// per request 8.3 K -> 7.8 K.
//
// This reaches into dragonboat's internals: the version is pinned in
// go.mod (ARCHITECTURE.md), and TestInMemEntrySliceOverride fails if the
// override stops reaching dragonboat's variables after an upgrade.

//go:linkname inMemEntrySliceSize github.com/lni/dragonboat/v4/internal/raft.entrySliceSize
var inMemEntrySliceSize uint64

//go:linkname inMemMinEntrySliceFree github.com/lni/dragonboat/v4/internal/raft.minEntrySliceSize
var inMemMinEntrySliceFree uint64

const (
	inMemEntrySlice     = 4
	inMemEntrySliceFree = 2
)

func init() { inMemEntrySliceSize, inMemMinEntrySliceFree = inMemEntrySlice, inMemEntrySliceFree }
