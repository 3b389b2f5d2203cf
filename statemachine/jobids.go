package statemachine

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

// An enqueue first makes sure its job ID names no job yet (applier.enqueue:
// the guard against an op applied twice), and nearly always it names
// none: the gateway has just made it. In Pebble that miss walks the
// memtables and asks every SST's filter, ~10 µs, which was 62 % of
// applying an enqueue and 7 % of the server's CPU when enqueueing one job
// per request. jobIDFilter answers most of those misses from memory.
//
// Like dedupFilter it is a cache and only that. A job ID ("job_{shard}_
// {ULID}", router.JobID) carries the time it was made; the filter holds
// every job ID stored whose time falls in a bucket at or after from (it
// is filled from the DB in loadMeta, and applier.set adds every job key
// written), so for such an ID "not in the filter" means "no job record";
// "maybe", an ID from before from, or one of another shape is answered
// by the DB as before. Results never depend on it, so replicas stay
// deterministic whatever their filters hold.
//
// Only the last jobIDKeep buckets are kept (advance, as entries apply):
// a new job's ID is nearly always made by the node that proposes it,
// milliseconds before its entry's time (a retry resends the same entry),
// so 20-30 s of IDs covers them and the filter stays small (~1.2-2.4
// bytes per job of that window). An older ID (a bulk request proposed in
// chunks, a job moved from another shard) asks Pebble, as before.
type jobIDFilter struct {
	bloomBuckets
	from int64 // the first bucket whose every stored job ID is in the filter
}

const (
	jobIDBucketMs = 10_000
	jobIDKeep     = 2 // buckets: 20-30 s of IDs
	jobIDFirstCap = 1 << 12
)

func newJobIDFilter(from int64) *jobIDFilter {
	return &jobIDFilter{bloomBuckets: newBloomBuckets(jobIDFirstCap), from: from}
}

// jobIDBucket is the bucket of a job ID's time; false for an ID that is
// not "job_{digits}_{ULID}" (the filter never answers for those).
func jobIDBucket(id []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(id, []byte("job_"))
	if !ok {
		return 0, false
	}
	tag, u, ok := bytes.Cut(rest, []byte("_"))
	if !ok || len(tag) == 0 || len(u) != ulid.EncodedSize {
		return 0, false
	}
	for _, c := range tag {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	// The ULID's first 10 characters are its time in milliseconds, in
	// Crockford's base 32, upper case as Corvo writes it: their byte order
	// is the time's order (loadJobIDs seeks by it).
	var ms int64
	for i, c := range u[:10] {
		d := crockford[c]
		if d < 0 || i == 0 && d > 7 { // beyond 48 bits
			return 0, false
		}
		ms = ms<<5 | int64(d)
	}
	return ms / jobIDBucketMs, true
}

// crockford maps an upper-case base-32 digit of a ULID to its value, else -1.
var crockford = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, c := range ulid.Encoding {
		t[c] = int8(i)
	}
	return t
}()

func jobIDBucketOfTime(unixNano int64) int64 { return unixNano / 1e6 / jobIDBucketMs }

// add notes a job ID written to the DB.
func (f *jobIDFilter) add(id []byte) {
	if b, ok := jobIDBucket(id); ok && b >= f.from {
		f.addKey(b, id)
	}
}

// mayExist is false only when no job record of id is stored.
func (f *jobIDFilter) mayExist(id []byte) bool {
	b, ok := jobIDBucket(id)
	if !ok || b < f.from {
		return true
	}
	return f.test(b, id)
}

// advance forgets the buckets more than jobIDKeep before now's.
func (f *jobIDFilter) advance(now int64) {
	if cut := jobIDBucketOfTime(now) - jobIDKeep; cut > f.from {
		f.dropBefore(cut)
		f.from = cut
	}
}

// loadJobIDs fills the filter with the stored job IDs of the last
// jobIDKeep buckets before now (the last entry's time: the entries that
// follow advance it; 0 on a new DB, which holds no job). Job keys sort by shard tag, then by the
// ULID's time: the scan seeks past each tag's older jobs.
func (s *StateMachine) loadJobIDs(now int64) error {
	f := newJobIDFilter(max(jobIDBucketOfTime(now)-jobIDKeep, 0))
	s.jobIDs = f
	var from ulid.ULID
	if err := from.SetTime(uint64(f.from * jobIDBucketMs)); err != nil {
		return err
	}
	fromText := from.String()[:10] // the time part
	pfx := []byte(pfxJob + "job_")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		id := it.Key()[len(pfxJob):]
		b, ok := jobIDBucket(id)
		switch {
		case !ok: // not an ID the filter answers for
			valid = it.Next()
		case b < f.from: // seek to this tag's first ID at from
			tagEnd := bytes.IndexByte(id[len("job_"):], '_') + len("job_") + 1
			seek := append(append(append([]byte(pfxJob), id[:tagEnd]...), fromText...), "0000000000000000"...)
			if bytes.Compare(seek, it.Key()) <= 0 { // cannot be: the time's order is the keys'
				valid = it.Next()
			} else {
				valid = it.SeekGE(seek)
			}
		default:
			f.addKey(b, id)
			valid = it.Next()
		}
	}
	return it.Error()
}
