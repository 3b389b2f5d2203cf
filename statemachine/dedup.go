package statemachine

import (
	"encoding/binary"
	"fmt"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2"
)

// Every entry is checked against the dedup records of the entries applied
// before it (applyEntry), and nearly every check misses: an entry ID is new
// unless the proposer retried it. A miss in Pebble still walks the
// memtables and asks every SST's filter, which at one op per entry was 40 %
// of applying it (BenchmarkLifecycleOneJobOps/single). dedupFilter answers
// most misses from memory.
//
// It is a cache and only that: it holds every dedup key stored in the DB
// (it is filled from the DB in loadMeta, on Open and after a snapshot, and
// applyEntry adds each key it sets), so "not in the filter" means "not in
// the DB"; "maybe" is answered by the DB as before. Results never depend on
// it, so replicas stay deterministic whatever their filters hold.
//
// Entry IDs start with their proposal time, so the filter is split into
// buckets of dedupBucketNs by that time; PruneDedupOp drops the buckets
// wholly before its cut, the same keys its DeleteRange removes. A bucket
// grows by chaining a filter twice the size of the last when the last is
// full, so a burst never raises the false-positive rate past dedupFP.
type dedupFilter struct {
	buckets map[int64][]*dedupBloom
}

type dedupBloom struct {
	f        *bloom.BloomFilter
	n, limit uint
}

const (
	dedupBucketNs = int64(60e9)
	dedupFirstCap = 1 << 14
	dedupFP       = 0.01
)

func newDedupFilter() *dedupFilter {
	return &dedupFilter{buckets: make(map[int64][]*dedupBloom)}
}

func dedupBucket(id EntryID) int64 {
	return int64(binary.BigEndian.Uint64(id[:8])) / dedupBucketNs
}

func (d *dedupFilter) add(id EntryID) {
	b := dedupBucket(id)
	chain := d.buckets[b]
	if len(chain) == 0 || chain[len(chain)-1].n >= chain[len(chain)-1].limit {
		limit := uint(dedupFirstCap)
		if len(chain) > 0 {
			limit = chain[len(chain)-1].limit * 2
		}
		chain = append(chain, &dedupBloom{f: bloom.NewWithEstimates(limit, dedupFP), limit: limit})
		d.buckets[b] = chain
	}
	last := chain[len(chain)-1]
	last.f.Add(id[:])
	last.n++
}

// mayContain is false only when no dedup record of id is stored.
func (d *dedupFilter) mayContain(id EntryID) bool {
	for _, f := range d.buckets[dedupBucket(id)] {
		if f.f.Test(id[:]) {
			return true
		}
	}
	return false
}

// prune forgets the buckets whose every ID is before the cut (those
// PruneDedupOp deletes); a bucket the cut splits stays whole.
func (d *dedupFilter) prune(before EntryID) {
	cut := dedupBucket(before)
	for b := range d.buckets {
		if b < cut {
			delete(d.buckets, b)
		}
	}
}

// loadDedup fills the filter with every dedup record stored: at most
// DedupRetention's worth of entry IDs (the keys alone are read).
func (s *StateMachine) loadDedup() error {
	s.dedup = newDedupFilter()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxDedup), UpperBound: prefixEnd([]byte(pfxDedup))})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(pfxDedup)+len(EntryID{}) {
			return fmt.Errorf("corrupt dedup key %q", k)
		}
		s.dedup.add(EntryID(k[len(pfxDedup):]))
	}
	return it.Error()
}
