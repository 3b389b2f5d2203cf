package statemachine

import (
	"fmt"
)

// Result caching (issue 20). A job enqueued with a cache key (JobOptions:
// the gateway hashes the payload, or the payload fields it names) leaves,
// when an ack completes it, a cache entry ck|{queue}\x00{key} naming it,
// its completion time, its cost and when the entry expires (its TTL). An
// enqueue with the same queue and key finds the entry, and when the entry
// is younger than the new job's own TTL, the new job is created completed
// with the cached job's result (CachedFrom, SavedNanos on its record): it
// never reaches a worker. Entries expire by the proposer's time (the
// entry's time index cx| is swept) and go when the job they name is
// deleted.

// CacheEntry is a queue's cached result for one key.
type CacheEntry struct {
	JobID       string
	CompletedAt int64
	ExpiresAt   int64
	CostNanos   int64 // what the job's usage cost: a hit's saving
}

func (c *CacheEntry) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.str(c.JobID)
	e.varint(c.CompletedAt)
	e.varint(c.ExpiresAt)
	e.varint(c.CostNanos)
	return e.b
}

func (c *CacheEntry) decode(d *dec) {
	c.JobID = d.str()
	c.CompletedAt = d.varint()
	c.ExpiresAt = d.varint()
	c.CostNanos = d.varint()
}

func cacheKey(queue, key string) []byte {
	k := make([]byte, 0, len(pfxCache)+len(queue)+1+len(key))
	k = append(k, pfxCache...)
	k = append(k, queue...)
	k = append(k, 0)
	return append(k, key...)
}

// cacheIndexKey is cx|{expires:8BE}{queue}\x00{key}.
func cacheIndexKey(expires int64, queue, key string) []byte {
	return timeIndexKey(pfxCacheX, expires, queue+"\x00"+key)
}

func (a *applier) cacheEntry(queue, key string) (CacheEntry, bool) {
	v, ok := a.get(cacheKey(queue, key))
	if !ok {
		return CacheEntry{}, false
	}
	var c CacheEntry
	d := dec{b: v}
	c.decode(&d)
	if d.err != nil {
		a.fail(fmt.Errorf("corrupt cache entry of %s: %w", queue, d.err))
		return CacheEntry{}, false
	}
	return c, true
}

// cacheHit looks for a fresh entry for a job being enqueued: one that has
// not expired and is younger than the job's own TTL, naming a completed
// job that still exists. It returns that job's state.
func (a *applier) cacheHit(j *Job) (CacheEntry, JobState, bool) {
	if j.CacheKey == "" || len(j.DependsOn) > 0 || j.ScheduledAt > a.now {
		return CacheEntry{}, JobState{}, false
	}
	c, ok := a.cacheEntry(j.Queue, j.CacheKey)
	if !ok || c.ExpiresAt <= a.now || c.CompletedAt < a.now-j.CacheTTLms*1e6 {
		return CacheEntry{}, JobState{}, false
	}
	if _, ok := a.loadJob(c.JobID); !ok {
		return CacheEntry{}, JobState{}, false
	}
	st := a.loadState(c.JobID)
	if st.State != StateCompleted {
		return CacheEntry{}, JobState{}, false
	}
	return c, st, true
}

// enqueueCached creates j completed with the cached job's result.
func (a *applier) enqueueCached(j *Job, c CacheEntry, from JobState) Result {
	j.CachedFrom, j.SavedNanos = c.JobID, c.CostNanos
	a.scratch = j.appendTo(a.scratch[:0])
	a.set(jobKey(j.ID), a.scratch)
	a.stats(j.Queue).Enqueued++
	a.event(EventEnqueued, j, &JobState{State: StatePending})
	st := JobState{State: StateCompleted, CompletedAt: a.now, Result: from.Result}
	a.finish(j, &st)
	a.move(j.Queue, 0, StateCompleted)
	return Result{State: StateCompleted, CachedFrom: c.JobID}
}

// cacheResult records the entry of a job with a cache key that an ack just
// completed (a job completed from the cache leaves none: its entry is the
// one it came from).
func (a *applier) cacheResult(j *Job, st *JobState) {
	if j.CacheKey == "" || j.CachedFrom != "" {
		return
	}
	if old, ok := a.cacheEntry(j.Queue, j.CacheKey); ok {
		a.del(cacheIndexKey(old.ExpiresAt, j.Queue, j.CacheKey))
	}
	c := CacheEntry{JobID: j.ID, CompletedAt: a.now, ExpiresAt: a.now + max(j.CacheTTLms, 1)*1e6, CostNanos: st.CostNanos}
	a.set(cacheKey(j.Queue, j.CacheKey), c.appendTo(nil))
	a.set(cacheIndexKey(c.ExpiresAt, j.Queue, j.CacheKey), nil)
}

// uncache drops the entry naming a job that is being deleted.
func (a *applier) uncache(j *Job) {
	if j.CacheKey == "" || j.CachedFrom != "" {
		return
	}
	if c, ok := a.cacheEntry(j.Queue, j.CacheKey); ok && c.JobID == j.ID {
		a.del(cacheKey(j.Queue, j.CacheKey))
		a.del(cacheIndexKey(c.ExpiresAt, j.Queue, j.CacheKey))
	}
}

// pruneCache deletes up to limit expired entries.
func (a *applier) pruneCache(limit int) int {
	n := 0
	for _, k := range a.scanTimeIndex(pfxCacheX, &a.s.cacheCursor, limit) {
		a.del(k)
		at, qk, ok := splitTimeIndexKey(pfxCacheX, k)
		if !ok {
			continue
		}
		ck := append([]byte(pfxCache), qk...)
		if v, ok := a.get(ck); ok {
			var c CacheEntry
			d := dec{b: v}
			c.decode(&d)
			if d.err == nil && c.ExpiresAt == at {
				a.del(ck)
				n++
			}
		}
	}
	return n
}
