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
// buckets of dedupBucketNs by that time (bloomBuckets); PruneDedupOp drops
// the buckets wholly before its cut, the same keys its DeleteRange removes.
type dedupFilter struct{ bloomBuckets }

const (
	dedupBucketNs = int64(60e9)
	dedupFirstCap = 1 << 14
)

func newDedupFilter() *dedupFilter { return &dedupFilter{newBloomBuckets(dedupFirstCap)} }

func dedupBucket(id EntryID) int64 {
	return int64(binary.BigEndian.Uint64(id[:8])) / dedupBucketNs
}

func (d *dedupFilter) add(id EntryID) { d.addKey(dedupBucket(id), id[:]) }

// mayContain is false only when no dedup record of id is stored.
func (d *dedupFilter) mayContain(id EntryID) bool { return d.test(dedupBucket(id), id[:]) }

// prune forgets the buckets whose every ID is before the cut (those
// PruneDedupOp deletes); a bucket the cut splits stays whole.
func (d *dedupFilter) prune(before EntryID) { d.dropBefore(dedupBucket(before)) }

// bloomBuckets is a set of keys in bloom filters, split into buckets by a
// time the caller derives from each key, so that a whole bucket can be
// forgotten at once. A bucket's first filter is sized for as many keys as
// the bucket before it holds, and a bucket grows by chaining a filter
// twice the size of the last when the last is full. A key that is not in
// a bucket is tested against every filter of its chain, so the chain's
// false positives add up: each new filter gets half the rate of the one
// before (bloomFP/2, bloomFP/4, …: one more hash, ~1.4 more bits a key),
// and a bucket's rate stays near bloomFP however long its chain grows
// (1.08 % for a full chain of 6: TestBloomChainFalsePositives). With every
// filter at bloomFP, a 10 s burst of 700,000 job IDs (a chain of 8) sent
// 8 % of new IDs to Pebble (BENCHMARKS.md, session 35).
type bloomBuckets struct {
	buckets  map[int64][]*bucketBloom
	firstCap uint
	bytes    int64 // the filters' bit arrays (MemoryUsage)
}

type bucketBloom struct {
	f        *bloom.BloomFilter
	n, limit uint
}

// bloomFP bounds the false-positive rate of one bucket's chain.
const bloomFP = 0.01

func newBloomBuckets(firstCap uint) bloomBuckets {
	return bloomBuckets{buckets: make(map[int64][]*bucketBloom), firstCap: firstCap}
}

func (d *bloomBuckets) addKey(b int64, key []byte) {
	chain := d.buckets[b]
	if len(chain) == 0 || chain[len(chain)-1].n >= chain[len(chain)-1].limit {
		limit, fp := d.firstCap, bloomFP/2
		if len(chain) == 0 {
			// A bucket's first filter holds what the bucket before it
			// took: at a steady rate the chain stays one filter long, one
			// hash and a probe or two for a key it lacks.
			var prev uint
			for _, l := range d.buckets[b-1] {
				prev += l.n
			}
			for limit < prev {
				limit *= 2
			}
		}
		for _, l := range chain {
			limit, fp = l.limit*2, fp/2
		}
		f := bloom.NewWithEstimates(limit, fp)
		d.bytes += bloomBytes(f)
		chain = append(chain, &bucketBloom{f: f, limit: limit})
		d.buckets[b] = chain
	}
	last := chain[len(chain)-1]
	last.f.Add(key)
	last.n++
}

// test is false only when key was never added to bucket b. The key is
// hashed once for a chain of several filters: a filter's locations are
// the first K of the same sequence whatever its size (bloom.Locations,
// which allocates them).
func (d *bloomBuckets) test(b int64, key []byte) bool {
	chain := d.buckets[b]
	switch len(chain) {
	case 0:
		return false
	case 1: // the steady state (addKey): no locations to share, none to allocate
		return chain[0].f.Test(key)
	}
	k := uint(0)
	for _, l := range chain {
		k = max(k, l.f.K())
	}
	locs := bloom.Locations(key, k)
	for _, l := range chain {
		if l.f.TestLocations(locs[:l.f.K()]) {
			return true
		}
	}
	return false
}

// dropBefore forgets the buckets before cut.
func (d *bloomBuckets) dropBefore(cut int64) {
	for b, chain := range d.buckets {
		if b < cut {
			for _, f := range chain {
				d.bytes -= bloomBytes(f.f)
			}
			delete(d.buckets, b)
		}
	}
}

// bloomBytes is the size of f's bit array.
func bloomBytes(f *bloom.BloomFilter) int64 { return int64(f.Cap()+63) / 64 * 8 }

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
