package statemachine

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"
)

func jobIDAt(tag string, at time.Time, rnd *rand.Rand) string {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(at))
	for i := 6; i < 16; i++ {
		u[i] = byte(rnd.Uint32())
	}
	return "job_" + tag + "_" + u.String()
}

func TestJobIDBucketIsTheULIDTime(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		at := time.UnixMilli(rnd.Int64N(1 << 47))
		b, ok := jobIDBucket([]byte(jobIDAt("12", at, rnd)))
		require.True(t, ok)
		require.Equal(t, at.UnixMilli()/jobIDBucketMs, b)
	}
	good := jobIDAt("3", time.Now(), rnd)
	for _, bad := range []string{
		"", "job_", "job_3_", "task_3_" + good[len("job_3_"):], "job__" + good[len("job_3_"):], "job_x_" + good[len("job_3_"):],
		good[:len(good)-1], good + "0", "job_3_" + string(bytes.ToLower([]byte(good[len("job_3_"):]))),
		"job_3_8" + good[len("job_3_")+1:], // beyond 48 bits
	} {
		_, ok := jobIDBucket([]byte(bad))
		require.False(t, ok, bad)
	}
}

func TestJobIDFilterAnswersOnlyWhatItHolds(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(7, 8))
	t0 := time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC)
	f := newJobIDFilter(jobIDBucketOfTime(t0.UnixNano()))
	var ids []string
	for i := range 3 * jobIDFirstCap { // one bucket's chain grows
		id := jobIDAt("1", t0.Add(time.Duration(i)*time.Microsecond), rnd)
		f.add([]byte(id))
		ids = append(ids, id)
	}
	for _, id := range ids {
		require.True(t, f.mayExist([]byte(id)))
	}
	// The chain of one bucket: filters for 4,096 and 8,192 IDs at half
	// and a quarter of bloomFP, ~11.0 and ~12.5 bits per ID.
	m0, _ := bloom.EstimateParameters(jobIDFirstCap, bloomFP/2)
	m1, _ := bloom.EstimateParameters(2*jobIDFirstCap, bloomFP/4)
	require.InDelta(t, float64(m0+m1)/8, float64(f.bytes), 64, "the filters' bytes: %d", f.bytes)
	require.InDelta(t, 11.0*jobIDFirstCap+12.5*2*jobIDFirstCap, float64(m0+m1), 0.02*float64(m0+m1))
	fp := 0
	for range 10000 {
		if f.mayExist([]byte(jobIDAt("1", t0, rnd))) {
			fp++
		}
	}
	require.Less(t, fp, 150, "false positives under bloomFP, not every lookup")
	require.True(t, f.mayExist([]byte(jobIDAt("1", t0.Add(-time.Minute), rnd))), "an ID before from is the DB's to answer")
	require.True(t, f.mayExist([]byte("custom-id")), "an ID of another shape is the DB's to answer")

	f.advance(t0.Add(jobIDKeep*jobIDBucketMs*time.Millisecond + time.Minute).UnixNano())
	require.Empty(t, f.buckets, "buckets more than jobIDKeep before now are forgotten")
	require.Zero(t, f.bytes, "and their bytes with them")
	require.True(t, f.mayExist([]byte(ids[0])), "and their IDs are the DB's to answer again")
	f.advance(t0.UnixNano())
	require.Greater(t, f.from, jobIDBucketOfTime(t0.UnixNano()), "from never goes back")
}

// An enqueue of an ID that exists changes nothing whether the filter was
// filled by the entries, rebuilt on reopen (the scan seeks past older
// jobs of every shard tag) or on a snapshot's restore, or has forgotten
// the ID's bucket.
func TestStateMachineExistingIDFoundThroughTheJobIDFilter(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var old, recent []string
	for _, tag := range []string{"0", "1", "10", "2"} {
		id := jobIDAt(tag, tb.now, tb.rnd)
		require.Equal(t, StatusOK, tb.one(&EnqueueOp{Job: Job{ID: id, Queue: "q", JobOptions: DefaultJobOptions()}}).Status)
		old = append(old, id)
	}
	tb.advance(10 * time.Minute)
	for _, tag := range []string{"0", "1", "10", "2"} {
		id := jobIDAt(tag, tb.now, tb.rnd)
		require.Equal(t, StatusOK, tb.one(&EnqueueOp{Job: Job{ID: id, Queue: "q", JobOptions: DefaultJobOptions()}}).Status)
		recent = append(recent, id)
	}
	again := func(tb *testBundle, what string) {
		t.Helper()
		tb.advance(time.Second)
		for _, id := range append(append([]string(nil), old...), recent...) {
			r := tb.one(&EnqueueOp{Job: Job{ID: id, Queue: "q", JobOptions: DefaultJobOptions()}})
			require.True(t, r.Existing, "%s: %s", what, id)
		}
		for _, id := range recent {
			require.True(t, tb.sm.jobIDs.mayExist([]byte(id)), "%s: %s", what, id)
		}
		for _, id := range old {
			b, _ := jobIDBucket([]byte(id))
			require.False(t, tb.sm.jobIDs.test(b, []byte(id)), "%s: the older jobs were not loaded: %s", what, id)
		}
		require.False(t, tb.sm.jobIDs.mayExist([]byte(jobIDAt("1", tb.now, tb.rnd))), "%s: a new ID is new", what)
		require.Equal(t, tb.sm.dedup.bytes+tb.sm.jobIDs.bytes, tb.sm.FilterBytes(), "%s: the gauge's figure", what)
	}
	again(tb, "as applied")
	require.Positive(t, tb.sm.jobIDs.bytes)
	tb.reopen()
	again(tb, "after a reopen")

	again(tb.restored(), "after a snapshot")

	tb.advance(time.Hour)
	tb.apply() // an entry an hour later: every bucket is forgotten
	require.Empty(t, tb.sm.jobIDs.buckets)
	require.Equal(t, tb.sm.dedup.bytes, tb.sm.FilterBytes(), "the job-ID filter holds nothing")
	again(tb, "an hour later")
}

// TestBloomChainFalsePositives: a bucket's chain of filters keeps its
// false-positive rate near bloomFP however long it grows. Every key
// absent from the bucket is tested against each filter of the chain; with
// every filter at bloomFP, a chain of 6 answered "maybe" for ~6 % of them.
func TestBloomChainFalsePositives(t *testing.T) {
	t.Parallel()
	d := newBloomBuckets(1024)
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte("key-"), uint64(i)) }
	const n = 1024 * 63 // 6 filters: 1,024 … 32,768 keys
	for i := range n {
		d.addKey(7, key(i))
	}
	require.Len(t, d.buckets[7], 6)
	for i := range n {
		require.True(t, d.test(7, key(i)), "key %d was added", i)
	}
	fp := 0
	const absent = 50000
	for i := range absent {
		if d.test(7, key(n+i)) {
			fp++
		}
	}
	// Its filters' rates add up to under bloomFP (1/2 + 1/4 + … of it);
	// measured with these keys: 1.08 %, ~2 standard deviations over the
	// 0.98 % a full chain of 6 gives.
	require.Less(t, float64(fp)/absent, 1.2*bloomFP, "%d of %d absent keys answered maybe", fp, absent)
	require.False(t, d.test(8, key(0)), "another bucket holds nothing")
}

// TestBloomBucketSizedFromTheLast: a bucket's first filter holds as many
// keys as the bucket before it took, so at a steady rate its chain stays
// one filter long (each extra filter costs every absent key's lookup).
func TestBloomBucketSizedFromTheLast(t *testing.T) {
	t.Parallel()
	d := newBloomBuckets(1024)
	key := func(b, i int) []byte { return binary.BigEndian.AppendUint64([]byte{byte(b)}, uint64(i)) }
	for i := range 3000 {
		d.addKey(1, key(1, i))
	}
	require.Len(t, d.buckets[1], 2, "1,024 then 2,048")
	for i := range 3000 {
		d.addKey(2, key(2, i))
	}
	require.Len(t, d.buckets[2], 1)
	require.Equal(t, uint(4096), d.buckets[2][0].limit, "the first power-of-two multiple of 1,024 over 3,000")
	d.addKey(4, key(4, 0)) // no bucket 3: the first capacity
	require.Equal(t, uint(1024), d.buckets[4][0].limit)
	for i := range 3000 {
		require.True(t, d.test(2, key(2, i)))
	}
}
