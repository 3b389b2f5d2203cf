package statemachine

// JobCacheBytesDefault bounds each shard's cache of live jobs.
const JobCacheBytesDefault = 64 << 20

// jobCache keeps the records of live jobs (enqueued, then fetched) in
// memory so the hot path — a fetch claiming a job enqueued moments ago, an
// ack of a job fetched moments ago — reads no Pebble keys. It is written
// through: every record in it equals what Pebble holds, so results never
// depend on what is cached. A job leaves when it reaches a terminal state;
// when the cache is full new jobs are simply not cached. Owned by the apply
// goroutine.
type jobCache struct {
	max   int64
	bytes int64
	m     map[string]*cachedJob
}

// cachedJob holds the cache's own copy of a record. The job is its own
// allocation: together with the state the record would be one 624-byte
// object, over the 512 bytes up to which Go's collector scans objects span
// by span, and a bulk enqueue's collections cost more than the allocation
// saved.
type cachedJob struct {
	job  *Job
	st   JobState
	size int64
}

func newJobCache(max int64) *jobCache {
	if max == 0 {
		max = JobCacheBytesDefault
	}
	return &jobCache{max: max, m: make(map[string]*cachedJob)}
}

// recordOverhead is what a cached record holds beyond its fields' bytes:
// the Job and the cachedJob (Go's 384- and 288-byte size classes) and its
// slot in the map. The memory plan sizes the caches by this account, so it
// must be the heap's: TestJobSizeIsTheHeaps measures it (it was 256 until
// session 37, and a full cache held 1.3–2.4 times its budget).
const recordOverhead = 720

func jobSize(j *Job, st *JobState) int64 {
	return int64(recordOverhead + len(j.ID) + len(j.Queue) + len(j.Payload) + len(j.Tags) + len(j.UniqueKey) +
		len(st.Progress) + len(st.Checkpoint) + len(st.Result) + len(st.LastError) + len(st.WorkerID))
}

func (c *jobCache) get(id string) *cachedJob {
	if c == nil {
		return nil
	}
	return c.m[id]
}

// add caches a job that was just written with state st, and returns the
// cache's copy of the record (nil: not cached).
func (c *jobCache) add(j *Job, st JobState) *Job {
	if c == nil || c.max < 0 {
		return nil
	}
	size := jobSize(j, &st)
	if c.bytes+size > c.max {
		return nil
	}
	// Own copies: decoded ops alias Raft entry buffers that dragonboat
	// reuses after Update returns.
	own := cloneJob(*j)
	e := &cachedJob{job: &own, st: cloneState(st), size: size}
	c.m[j.ID] = e
	c.bytes += size
	return e.job
}

// update follows a state write; terminal jobs leave the cache.
func (c *jobCache) update(id string, st *JobState) {
	e := c.get(id)
	if e == nil {
		return
	}
	c.bytes -= e.size
	if st.State.Terminal() {
		delete(c.m, id)
		return
	}
	e.st = cloneState(*st)
	e.size = jobSize(e.job, st)
	c.bytes += e.size
}

// drop forgets a job (deleted or re-filed).
func (c *jobCache) drop(id string) {
	if e := c.get(id); e != nil {
		c.bytes -= e.size
		delete(c.m, id)
	}
}
