package statemachine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCacheHitMissAndExpiry: a completed job with a cache key serves the
// next enqueue with that key in its queue, within the new job's TTL and
// the entry's: the new job is completed at once with the result (never
// fetchable) and says what it saved; another queue, a stale entry, an
// expired one or a deleted job is a miss.
func TestCacheHitMissAndExpiry(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	cached := func(key string, ttl time.Duration) func(*Job) {
		return func(j *Job) { j.CacheKey, j.CacheTTLms = key, ttl.Milliseconds() }
	}
	first := tb.enqueue("llm", PriorityNormal, cached("k1", time.Hour))
	require.Len(t, tb.fetch(1, "llm"), 1)
	r := tb.one(&AckOp{JobID: first, Result: []byte(`{"answer":"Paris"}`), Usage: usageOf(100, 10, 12_345, "m")})
	require.Equal(t, StatusOK, r.Status)

	tb.advance(time.Minute)
	j := Job{ID: tb.newID(), Queue: "llm", Payload: []byte(`{}`), JobOptions: DefaultJobOptions()}
	j.CacheKey, j.CacheTTLms = "k1", time.Hour.Milliseconds()
	r = tb.one(&EnqueueOp{Job: j})
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, StateCompleted, r.State)
	require.Equal(t, first, r.CachedFrom)
	v := tb.get(j.ID)
	require.Equal(t, StateCompleted, v.State.State)
	require.JSONEq(t, `{"answer":"Paris"}`, string(v.State.Result))
	require.Equal(t, first, v.Job.CachedFrom)
	require.Equal(t, int64(12_345), v.Job.SavedNanos)
	require.Empty(t, tb.fetch(1, "llm"), "a cache hit never reaches a worker")

	miss := func(q, key string, ttl time.Duration) {
		t.Helper()
		id := tb.enqueue(q, PriorityNormal, cached(key, ttl))
		require.Equal(t, StatePending, tb.get(id).State.State, "%s %s", q, key)
		require.Empty(t, tb.get(id).Job.CachedFrom)
		jobs := tb.fetch(1, q)
		require.Len(t, jobs, 1)
		require.Equal(t, StatusOK, tb.one(&AckOp{JobID: id, Result: []byte(`{}`)}).Status)
	}
	miss("other", "k1", time.Hour)    // another queue
	miss("llm", "k2", time.Hour)      // another key
	miss("llm", "k1", 30*time.Second) // the entry (now that of the first) is older than this job accepts
	// That miss completed and replaced the entry (TTL 30 s): after it
	// expires, a job accepting any age misses, and the sweep drops it.
	tb.advance(31 * time.Second)
	tb.one(&SweepOp{})
	for _, kv := range tb.dump() {
		require.NotContains(t, kv, `"ck|llm\x00k1`, "the expired entry is swept")
	}
	miss("llm", "k1", time.Hour)

	// Deleting the job an entry names drops the entry.
	id := tb.enqueue("del", PriorityNormal, cached("k", time.Hour))
	tb.fetch(1, "del")
	tb.one(&AckOp{JobID: id, Result: []byte(`1`)})
	require.Equal(t, StatusOK, tb.one(&DeleteJobOp{JobID: id}).Status)
	miss("del", "k", time.Hour)
}
