package statemachine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// applier applies the entries of one Update to one indexed batch.
type applier struct {
	s     *StateMachine
	b     *pebble.Batch
	index uint64
	pos   int
	now   int64
	// The entry being applied and the results of its ops so far (an
	// AcksFetchOp reads the acks before it).
	ops     []Op
	results []Result
	err     error // first storage error: fatal for the Update

	dirty map[string]struct{} // queues whose stats changed
	ready map[string]struct{} // queues that gained fetchable jobs

	// The mirror's feed (EmitChanges): each job touched, with its latest
	// record and state, or its deletion, in the order first touched (noted
	// indexes them by ID); the errors, usage and scores recorded are
	// gathered apart and joined by changeList.
	changes   []JobChange
	noted     map[string]int
	newErrors map[string][]JobError
	newUsage  map[string][]UsageRecord
	newScores map[string][]ScoreRecord

	// Lifecycle events (EmitEvents), in apply order; evPos numbers them
	// within the entry.
	events []JobEvent
	evPos  uint32

	// inFetch is set while a fetch runs; fetchAdds are the pending keys
	// added meanwhile (fetch).
	inFetch   bool
	fetchAdds [][]byte

	rateSeq uint32 // tiebreak of rate-window keys within one entry
	ackStep string // the step_status of the ack being applied (chains)
	outSeq  uint32 // numbers outbox records within one entry
	jobSeq  uint32 // numbers the jobs created within one entry

	// scratch holds a record being encoded for set (the batch copies it);
	// kbuf a key only set, deleted or read with (tmp), dk the entry's
	// dedup key.
	scratch []byte
	kbuf    []byte
	dk      [len(pfxDedup) + len(EntryID{})]byte
}

// tmp keeps key k's buffer for the next key built in a.kbuf: for a key
// the batch copies (set, del, get), never one that is kept.
func (a *applier) tmp(k []byte) []byte {
	a.kbuf = k
	return k
}

// newApplier returns the applier of an Update: the previous Update's,
// whose maps and scratch buffers it kept, emptied (done; six maps an
// Update were a seventh of the objects an Update of one op allocated).
// Everything else starts zero, and what it hands out (changes, events,
// results) is made anew.
func newApplier(s *StateMachine, b *pebble.Batch) *applier {
	a := s.spare
	if a == nil {
		a = &applier{}
		s.spare = a
	}
	a.s, a.b = s, b
	a.dirty, a.ready = orNew(a.dirty), orNew(a.ready)
	if s.cfg.EmitChanges {
		a.noted, a.newErrors, a.newUsage, a.newScores = orNew(a.noted), orNew(a.newErrors), orNew(a.newUsage), orNew(a.newScores)
	}
	return a
}

// done ends the Update: the applier keeps its maps, emptied, and its
// scratch buffers for the next one, and lets go of everything else at
// once, so an idle shard holds nothing of its last Update (the records
// its changes point to, a large payload's buffer).
func (a *applier) done() {
	keep := applier{dirty: emptied(a.dirty), ready: emptied(a.ready), noted: emptied(a.noted),
		newErrors: emptied(a.newErrors), newUsage: emptied(a.newUsage), newScores: emptied(a.newScores)}
	if cap(a.scratch) <= reuseScratchMax && cap(a.kbuf) <= reuseScratchMax {
		keep.scratch, keep.kbuf = a.scratch[:0], a.kbuf[:0]
	}
	if cap(a.fetchAdds) <= reuseMapMax {
		clear(a.fetchAdds[:cap(a.fetchAdds)]) // the keys they held
		keep.fetchAdds = a.fetchAdds[:0]
	}
	*a = keep
}

// What an applier keeps for the next Update at most: a large Update's
// maps and buffers are left to the GC.
const (
	reuseMapMax     = 256
	reuseScratchMax = 64 << 10
)

// emptied clears m for the next Update, or drops it when it held more
// than reuseMapMax entries (clear keeps the buckets).
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > reuseMapMax {
		return nil
	}
	clear(m)
	return m
}

func orNew[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return make(map[K]V)
	}
	return m
}

// noteChange records a job's latest state for the mirror. A job read from
// the job cache is shared as it is (the cache's records are never
// modified: loadJob); any other is copied, since it may alias the entry or
// the apply buffers. The state is always copied (an op's result or
// progress aliases the entry).
func (a *applier) noteChange(j *Job, st *JobState) {
	if a.noted == nil {
		return
	}
	cj := a.s.jobs.get(j.ID)
	a.noteChangeOf(j, st, cj != nil && cj.job == j)
}

// noteChangeOf is noteChange for a caller that knows whether j is the job
// cache's copy (enqueue has just put it there): one map lookup less a job.
func (a *applier) noteChangeOf(j *Job, st *JobState, cached bool) {
	if a.noted == nil {
		return
	}
	c := JobChange{ID: j.ID, Job: j, State: cloneState(*st)}
	if !cached {
		own := cloneJob(*j)
		c.Job = &own
	}
	a.note(c)
}

// noteDeleted records that a job is gone; what the Update recorded for it
// is dropped.
func (a *applier) noteDeleted(id string) {
	if a.noted == nil {
		return
	}
	delete(a.newErrors, id)
	delete(a.newUsage, id)
	delete(a.newScores, id)
	a.note(JobChange{ID: id, Deleted: true})
}

// note puts c in the change list, in place of what the Update noted
// before for the same job.
func (a *applier) note(c JobChange) {
	if i, ok := a.noted[c.ID]; ok {
		a.changes[i] = c
		return
	}
	a.noted[c.ID] = len(a.changes)
	a.changes = append(a.changes, c)
}

// changeList is the Update's changes, each job's new errors, usage and
// scores joined to it.
func (a *applier) changeList() []JobChange {
	for i := range a.changes {
		c := &a.changes[i]
		if !c.Deleted {
			c.NewErrors, c.NewUsage, c.NewScores = a.newErrors[c.ID], a.newUsage[c.ID], a.newScores[c.ID]
		}
	}
	return a.changes
}

// nextSeq is the FIFO sequence of a job created now: entry order, then
// creation order within the entry (an op may create several jobs).
func (a *applier) nextSeq() uint64 {
	a.jobSeq++
	return a.index<<24 | uint64(a.jobSeq)
}

func (a *applier) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

// applyEntry applies one Raft entry and returns its encoded results (none
// with a Handoff, which takes them to the entry's proposer), or false when
// the entry cannot be decoded (it then changes nothing).
func (a *applier) applyEntry(cmd []byte) ([]byte, bool) {
	e, err := decodeEntry(cmd, &a.s.names)
	if err != nil {
		a.s.cfg.Logger.Error().Err(err).Uint64("index", a.index).Msg("rejecting undecodable entry")
		return nil, false
	}
	// Time never goes backwards inside the state machine, whatever the
	// proposer's clock did.
	if e.Now > a.s.lastNow {
		a.s.lastNow = e.Now
	}
	a.now = a.s.lastNow
	a.s.jobIDs.advance(a.now)
	a.rateSeq, a.outSeq, a.jobSeq, a.evPos = 0, 0, 0, 0 // per entry, so keys never depend on how entries were batched

	// Every entry is checked against the ones applied, not only retries: a
	// retry can commit before its first attempt (the first was still on
	// its way to a leader that lost leadership, and reached the new one
	// after the retry), and a first attempt applied after its retry must
	// not apply its ops again (an enqueue would reset a finished job).
	dk := appendDedupKey(a.dk[:0], e.ID)
	h := a.s.cfg.Handoff
	if a.s.dedup.mayContain(e.ID) {
		if prev, ok := a.get(dk); ok {
			if h == nil {
				return encodeResults(nil, a.replayResults(prev), false), true
			}
			if h.waiting(e.ID) {
				h.deliver(e.ID, a.replayResults(prev))
			}
			return nil, true
		}
	}
	results := make([]Result, len(e.Ops))
	a.ops, a.results = e.Ops, results
	// About an event and a change a job an op touches: the lists grow
	// once an entry, not doubling from one element.
	touched := jobsTouched(e.Ops)
	if a.s.cfg.EmitEvents {
		a.events = slices.Grow(a.events, touched)
	}
	if a.noted != nil {
		a.changes = slices.Grow(a.changes, touched)
	}
	defer func() { a.ops, a.results = nil, nil }()
	for i, op := range e.Ops {
		a.pos = i
		results[i] = a.apply(op)
		if a.err != nil {
			return nil, false
		}
	}
	// Both encodings go through one buffer kept from entry to entry: the
	// batch copies the compact one, the full one (without a Handoff)
	// leaves as an exact-size copy (encoding into a nil slice grew it a
	// doubling at a time).
	a.s.encScratch = encodeResults(a.s.encScratch[:0], results, true)
	a.set(dk, a.s.encScratch)
	a.s.dedup.add(e.ID)
	var out []byte
	if h != nil {
		h.deliver(e.ID, results)
	} else {
		a.s.encScratch = encodeResults(a.s.encScratch[:0], results, false)
		out = bytes.Clone(a.s.encScratch)
	}
	if cap(a.s.encScratch) > 256<<10 {
		a.s.encScratch = nil // a rare large entry's buffer is not kept
	}
	return out, true
}

// jobsTouched estimates how many jobs ops change: one an op, a fetch's
// count (up to 64, as the fetch sizes its answer), and an ack that carries
// a fetch its job and its fetch's.
func jobsTouched(ops []Op) int {
	n := 0
	for _, op := range ops {
		switch o := op.(type) {
		case *FetchOp:
			n += fetchTouches(o)
		case *AckFetchOp:
			n += 1 + fetchTouches(&o.Fetch)
		case *AcksFetchOp: // the acks travel as ops of their own
			n += fetchTouches(&o.Fetch)
		default:
			n++
		}
	}
	return n
}

func fetchTouches(f *FetchOp) int { return int(min(max(f.Count, 1), 64)) }

// replayResults answers a duplicate proposal with the results of the first
// one, reloading fetched jobs (their records were stored by ID only).
func (a *applier) replayResults(stored []byte) []Result {
	rs, _, err := decodeResults(stored)
	if err != nil {
		a.fail(fmt.Errorf("corrupt dedup record: %w", err))
		return nil
	}
	for i := range rs {
		for j := range rs[i].Jobs {
			if v, ok := a.view(rs[i].Jobs[j].Job.ID); ok {
				rs[i].Jobs[j] = *v
			}
		}
	}
	return rs
}

// ackedBefore reports whether one of the n ops before the current one in
// its entry is an ack that applied.
func (a *applier) ackedBefore(n int) bool {
	for k := max(0, a.pos-n); k < a.pos && k < len(a.ops); k++ {
		if _, ok := a.ops[k].(*AckOp); ok && a.results[k].Status == StatusOK {
			return true
		}
	}
	return false
}

func (a *applier) apply(op Op) Result {
	switch o := op.(type) {
	case *EnqueueOp:
		return a.enqueue(o)
	case *FetchOp:
		return a.fetch(o)
	case *AckOp:
		return a.ack(o)
	case *UnclaimOp:
		return a.unclaim(o)
	case *SetBudgetOp:
		return a.setBudget(o)
	case *SetProviderOp:
		return a.setProvider(o)
	case *LinkProviderOp:
		return a.linkProvider(o)
	case *ProviderMemberOp:
		return a.providerMember(o)
	case *ProviderShareOp:
		return a.providerShare(o)
	case *AckFetchOp:
		r := a.ack(&o.Ack)
		if r.Status != StatusOK {
			return r
		}
		r.Jobs = a.fetch(&o.Fetch).Jobs
		return r
	case *AcksFetchOp:
		if !a.ackedBefore(int(o.Acks)) {
			return Result{Status: StatusOK}
		}
		return a.fetch(&o.Fetch)
	case *FailOp:
		return a.failJob(o)
	case *ScoreOp:
		return a.score(o)
	case *HeartbeatOp:
		return a.heartbeat(o)
	case *CancelOp:
		return a.cancel(o)
	case *PromoteOp:
		return a.promote(o)
	case *ReclaimOp:
		return a.reclaim(o)
	case *PauseQueueOp:
		return a.setPaused(o.Queue, true)
	case *ResumeQueueOp:
		return a.setPaused(o.Queue, false)
	case *PruneDedupOp:
		return a.pruneDedup(o)
	case *SetLimitsOp:
		return a.setLimits(o)
	case *SweepOp:
		return a.sweep(o)
	case *RetryJobOp:
		return a.retryJob(o)
	case *DeleteJobOp:
		return a.deleteJob(o)
	case *MoveJobOp:
		return a.moveJob(o)
	case *DropQueueOp:
		return a.dropQueue(o)
	case *MoveOutOp:
		return a.moveOut(o)
	case *MoveInOp:
		return a.moveIn(o)
	case *OutboxAckOp:
		return a.outboxAck(o)
	case *BatchCreateOp:
		return a.batchCreate(o)
	case *BatchDoneOp:
		return a.batchDone(o)
	case *DepWatchOp:
		return a.depWatch(o)
	case *DepDoneOp:
		return a.depDone(o)
	case *ReleaseOp:
		return a.release(o)
	case *ScheduleOp:
		return a.schedule(o)
	case *CronTickOp:
		return a.cronTick(o)
	case *RequeueOp:
		return a.requeue(o)
	case *PriorityOp:
		return a.changePriority(o)
	case *AuditOp:
		return a.audit(o)
	case *PruneAuditOp:
		return a.pruneAudit(o)
	case *ImportOp:
		return a.importRecord(o)
	}
	return Result{Status: StatusInvalid, Message: fmt.Sprintf("op %d not supported", op.Code())}
}

// ---- storage helpers ----

func (a *applier) get(k []byte) ([]byte, bool) {
	v, closer, err := a.b.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		a.fail(err)
		return nil, false
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, true
}

func (a *applier) set(k, v []byte) {
	if err := a.b.Set(k, v, nil); err != nil {
		a.fail(err)
	}
	if len(k) > len(pfxJob) && k[0] == pfxJob[0] && k[1] == pfxJob[1] {
		a.s.jobIDs.add(k[len(pfxJob):])
	}
}

func (a *applier) del(k []byte) {
	if err := a.b.Delete(k, nil); err != nil {
		a.fail(err)
	}
}

// eachKey calls f with each key under prefix pfx and its value, in key
// order, through the batch (so writes earlier in the same Update count).
// k and v are valid only during the call: f copies what it keeps. It stops
// early when f says so; an iterator error fails the entry.
func (a *applier) eachKey(pfx []byte, f func(k, v []byte) bool) {
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		a.fail(err)
		return
	}
	defer func() {
		if err := it.Close(); err != nil {
			a.fail(err)
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		if !f(it.Key(), it.Value()) {
			return
		}
	}
}

// loadJob reads a job record. The result is shared with the job cache:
// callers must not modify it.
func (a *applier) loadJob(id string) (*Job, bool) {
	if c := a.s.jobs.get(id); c != nil {
		return c.job, true
	}
	v, ok := a.get(jobKey(id))
	if !ok {
		return nil, false
	}
	j := &Job{}
	d := dec{b: v}
	j.decode(&d)
	if d.err != nil {
		a.fail(fmt.Errorf("corrupt job %s: %w", id, d.err))
		return nil, false
	}
	return j, true
}

// loadState reads a job's state record; a job without one is pending.
func (a *applier) loadState(id string) JobState {
	if c := a.s.jobs.get(id); c != nil {
		return c.st
	}
	v, ok := a.get(a.tmp(appendStateKey(a.kbuf[:0], id)))
	if !ok {
		return JobState{State: StatePending}
	}
	var st JobState
	d := dec{b: v}
	st.decode(&d)
	if d.err != nil {
		a.fail(fmt.Errorf("corrupt job state %s: %w", id, d.err))
	}
	return st
}

// putState writes a job's state record.
func (a *applier) putState(j *Job, st *JobState) {
	a.scratch = st.appendTo(a.scratch[:0])
	a.set(a.tmp(appendStateKey(a.kbuf[:0], j.ID)), a.scratch)
	a.noteChange(j, st) // first: a terminal state takes the job out of the cache
	a.s.jobs.update(j.ID, st)
}

// finish writes the state of a job that just reached a terminal state: it
// enters the retention index, releases its unique key, and tells its batch
// and its chain.
func (a *applier) finish(j *Job, st *JobState) {
	switch st.State {
	case StateCompleted:
		a.event(EventCompleted, j, st)
	case StateDead:
		a.event(EventDead, j, st)
	case StateCancelled:
		a.event(EventCancelled, j, st)
	}
	a.putState(j, st)
	a.set(a.tmp(appendTimeIndexKey(a.kbuf[:0], pfxFinished, st.CompletedAt, j.ID)), nil)
	if st.State == StateDead {
		a.setDead(j, st)
	}
	a.releaseUnique(j)
	a.afterFinish(j, st)
}

// setDead files a dead job in the dead-letter list under its death time,
// with its queue as the value: a list by queue skips other queues' jobs
// without loading them (entries written before the value was, "", are
// loaded).
func (a *applier) setDead(j *Job, st *JobState) {
	a.set(timeIndexKey(pfxDead, st.CompletedAt, j.ID), []byte(j.Queue))
}

func (a *applier) view(id string) (*JobView, bool) {
	j, ok := a.loadJob(id)
	if !ok {
		return nil, false
	}
	return &JobView{Job: *j, State: a.loadState(id)}, true
}

func (a *applier) stats(q string) *QueueStats {
	if st, ok := a.s.stats[q]; ok {
		return st
	}
	st := &QueueStats{}
	if v, ok := a.get(a.tmp(appendQueueStatsKey(a.kbuf[:0], q))); ok {
		d := dec{b: v}
		st.decode(&d)
		if d.err != nil {
			a.fail(fmt.Errorf("corrupt stats of queue %s: %w", q, d.err))
		}
	}
	a.s.stats[q] = st
	return st
}

// knownQueue reports whether the queue ever had a job, without creating it.
func (a *applier) knownQueue(q string) bool {
	if _, ok := a.s.stats[q]; ok {
		return true
	}
	_, ok := a.get(a.tmp(appendQueueStatsKey(a.kbuf[:0], q)))
	if ok {
		a.stats(q)
	}
	return ok
}

func (a *applier) config(q string) *QueueConfig {
	if c, ok := a.s.configs[q]; ok {
		return c
	}
	c := &QueueConfig{}
	if v, ok := a.get(queueCfgKey(q)); ok {
		d := dec{b: v}
		c.decode(&d)
		if d.err != nil {
			a.fail(fmt.Errorf("corrupt config of queue %s: %w", q, d.err))
		}
	}
	a.s.configs[q] = c
	return c
}

// move shifts one job of queue q between state counts.
func (a *applier) move(q string, from, to State) {
	st := a.stats(q)
	if from != 0 {
		st.Counts[from]--
		a.s.total(from, -1)
		if from == StateActive && a.config(q).MaxConcurrency > 0 {
			a.ready[q] = struct{}{} // a slot opened under the cap
		}
	}
	if to != 0 {
		st.Counts[to]++
		a.s.total(to, 1)
	}
	a.dirty[q] = struct{}{}
	switch to {
	case StateCompleted:
		st.Completed++
	case StateDead:
		st.Dead++
	}
}

// flushStats writes every touched queue's stats into the batch and returns
// the signals for the listener.
func (a *applier) flushStats() []QueueSignal {
	a.refreshNextCron()
	if len(a.dirty) == 0 {
		return nil
	}
	sigs := make([]QueueSignal, 0, len(a.dirty))
	for q := range a.dirty {
		st := a.stats(q)
		a.scratch = st.appendTo(a.scratch[:0])
		a.set(a.tmp(appendQueueStatsKey(a.kbuf[:0], q)), a.scratch)
		_, ready := a.ready[q]
		sig := QueueSignal{Queue: q, Pending: st.Counts[StatePending], Paused: a.config(q).Paused, Ready: ready}
		if sig.Pending > 0 {
			sig.Head = a.head(q)
			sig.BlockedUntil = a.blockedUntil(q)
			if sig.BlockedUntil != 0 && sig.BlockedUntil != math.MaxInt64 && a.providerBlockedUntil(q) == sig.BlockedUntil {
				sig.Provider = a.config(q).Provider
			}
		}
		sigs = append(sigs, sig)
	}
	// slices.SortFunc: sort.Slice allocated its swapper and closure every
	// Update.
	slices.SortFunc(sigs, func(x, y QueueSignal) int { return strings.Compare(x.Queue, y.Queue) })
	return sigs
}

// head returns a queue's first pending job, from the head cache or, when
// that is unknown, by seeking in the batch.
func (a *applier) head(q string) QueueHead {
	pfx := pendingPrefix(q)
	k := a.s.heads[q]
	if k == nil {
		it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: a.s.cursor(q), UpperBound: prefixEnd(pfx)})
		if err != nil {
			a.fail(err)
			return QueueHead{Queue: q}
		}
		if it.First() {
			k = append([]byte(nil), it.Key()...)
			a.s.heads[q] = k
		}
		if err := it.Close(); err != nil {
			a.fail(err)
		}
	}
	h := QueueHead{Queue: q}
	if k != nil {
		h.Priority, h.CreatedAt, h.OK = pendingSuffix(k[len(pfx):])
	}
	return h
}

func (a *applier) addPending(j *Job) {
	k := pendingKey(j.Queue, j.Priority, j.CreatedAt, j.Seq)
	a.set(k, []byte(j.ID))
	a.s.lowerCursor(j.Queue, k)
	if a.inFetch {
		a.fetchAdds = append(a.fetchAdds, k)
	}
	a.ready[j.Queue] = struct{}{}
	// The head cache stays exact: a first pending job is the head, and a
	// new key before the known head replaces it.
	wasEmpty := a.stats(j.Queue).Counts[StatePending] == 0
	if h := a.s.heads[j.Queue]; (h == nil && wasEmpty) || (h != nil && bytes.Compare(k, h) < 0) {
		a.s.heads[j.Queue] = k
	}
	a.s.winAdd(j.Queue, k, j.ID, wasEmpty)
}

func (a *applier) delPending(j *Job) {
	// Nothing keeps the key: the batch copies it, the head and the window
	// compare it.
	k := a.tmp(appendPendingKey(appendPendingPrefix(a.kbuf[:0], j.Queue), j.Priority, j.CreatedAt, j.Seq))
	a.del(k)
	if h := a.s.heads[j.Queue]; h != nil && bytes.Equal(h, k) {
		delete(a.s.heads, j.Queue) // unknown until the next seek
	}
	a.s.winDel(j.Queue, k)
}

// addError records a failed attempt of an active job: the returned record
// is written by storeError once the caller knows what follows (its
// RetryAt), so each failure still costs one key.
func (a *applier) addError(j *Job, st *JobState, msg, backtrace string) *JobError {
	je := &JobError{Attempt: st.Attempt, Error: msg, Backtrace: backtrace, At: a.now, StartedAt: st.StartedAt, WorkerID: st.WorkerID}
	st.Errors++ // error records are numbered, so a retried job keeps its history
	st.LastError = msg
	st.FailedAt = a.now
	if e := a.event(EventFailed, j, st); e != nil {
		e.Error = truncUTF8(msg, eventErrorMax)
	}
	return je
}

// storeError writes the record addError made, as error number n.
func (a *applier) storeError(id string, n uint32, je *JobError) {
	a.set(errorKey(id, n), je.appendTo(nil))
	if a.newErrors != nil {
		a.newErrors[id] = append(a.newErrors[id], *je)
	}
}

// releaseLease removes an active job's lease index key.
func (a *applier) releaseLease(id string, st *JobState) {
	a.del(a.tmp(appendTimeIndexKey(a.kbuf[:0], pfxLease, st.LeaseExpiresAt, id)))
	st.LeaseExpiresAt = 0
}

func (a *applier) expired(j *Job) bool { return j.ExpireAt > 0 && a.now >= j.ExpireAt }

// ---- ops ----

func (a *applier) enqueue(o *EnqueueOp) Result {
	j := &o.Job
	if j.ID == "" || j.Queue == "" {
		return Result{Status: StatusInvalid, Message: "job id and queue are required"}
	}
	if j.Priority > PriorityNormal {
		return Result{Status: StatusInvalid, Message: "unknown priority"}
	}
	// A job ID names one job for good: the gateway makes a new one for
	// every job it proposes, so an enqueue of an ID that exists is that
	// job's proposal applied a second time, never a new job. It changes
	// nothing, whatever IfAbsent says: the dedup record of its entry
	// (applyEntry) is the first guard, this is the second, and without it
	// a duplicate would put a finished job back to pending and run it
	// again.
	if a.s.jobIDs.mayExist([]byte(j.ID)) {
		if _, exists := a.get(jobKey(j.ID)); exists {
			return Result{State: a.loadState(j.ID).State, Existing: true, JobID: j.ID}
		}
	}
	j.CreatedAt = a.now
	j.Seq = a.nextSeq()
	if j.LeaseSeconds == 0 { // an op that did not start from DefaultJobOptions
		j.LeaseSeconds = DefaultLeaseSeconds
	}
	if j.UniqueKey != "" {
		if holder, ok := a.uniqueHolder(j.Queue, j.UniqueKey); ok {
			r := Result{Existing: true, JobID: holder, State: StatePending}
			if hj, ok := a.loadJob(holder); ok {
				r.State = a.loadState(hj.ID).State
			}
			return r
		}
		a.lockUnique(j)
	}
	j.CachedFrom, j.SavedNanos = "", 0 // the state machine's to set
	if c, from, ok := a.cacheHit(j); ok {
		return a.enqueueCached(j, c, from)
	}
	if j.ExpireAfterMs > 0 {
		j.ExpireAt = a.now + j.ExpireAfterMs*1e6
		a.set(timeIndexKey(pfxExpire, j.ExpireAt, j.ID), nil)
	}
	st := a.stats(j.Queue)
	if j.Routing != nil {
		j.Routing.Start = 0 // the state machine's to set
		if j.Routing.Strategy == RouteRoundRobin && len(j.Routing.Models) > 0 {
			j.Routing.Start = uint32(uint64(st.Enqueued) % uint64(len(j.Routing.Models)))
		}
	}
	a.scratch = j.appendTo(a.scratch[:0])
	a.set(jobKey(j.ID), a.scratch)
	st.Enqueued++
	cached := false
	if cj := a.s.jobs.add(j, JobState{State: StatePending}); cj != nil {
		j, cached = cj, true // the cache's copy: the mirror's feed shares it (noteChange)
	}
	if o.Budget == BudgetAlert {
		a.event(EventBudgetExceeded, j, &JobState{State: StatePending, Reason: HoldBudget})
	}
	if o.Budget == BudgetHold && len(j.DependsOn) == 0 {
		// Held until approved (POST /jobs/{id}/approve) or rejected; a
		// job with dependencies is held for them already.
		js := JobState{State: StateHeld, Reason: HoldBudget}
		a.putState(j, &js)
		a.move(j.Queue, 0, StateHeld)
		a.event(EventHeld, j, &js)
		return Result{State: StateHeld}
	}
	if len(j.DependsOn) > 0 {
		js := JobState{State: StateHeld, Reason: HoldDependencies}
		a.putState(j, &js)
		a.move(j.Queue, 0, StateHeld)
		a.event(EventHeld, j, &js)
		for _, d := range j.DependsOn {
			a.send(d.Shard, &DepWatchOp{Dep: d.ID, Dependent: j.ID, DependentShard: a.selfShard()})
		}
		return Result{State: StateHeld}
	}
	if j.ScheduledAt > a.now {
		js := JobState{State: StateScheduled, DueAt: j.ScheduledAt}
		a.putState(j, &js)
		a.set(timeIndexKey(pfxDue, j.ScheduledAt, j.ID), nil)
		a.move(j.Queue, 0, StateScheduled)
		a.event(EventScheduled, j, &js)
		return Result{State: StateScheduled}
	}
	a.addPending(j)
	a.move(j.Queue, 0, StatePending)
	a.noteChangeOf(j, &JobState{State: StatePending}, cached)
	a.event(EventEnqueued, j, &JobState{State: StatePending})
	return Result{State: StatePending}
}

type fetchHead struct {
	queue  string
	prefix int
	// key is no greater than the queue's first pending key: its cached
	// head until the queue is picked, then the source's position (exact).
	key  []byte
	src  pendSource // open once the queue is picked, or when its head is unknown
	room int        // jobs the queue may still hand out (limits)
	prov *int       // jobs its provider's queues may still hand out (nil: no provider)
}

// fetch claims up to Count pending jobs over its queues, lowest (priority,
// time, seq) first, ties to the earlier queue. A queue whose head is cached
// opens no iterator unless it is picked: a one-job fetch over 8 queues costs
// one seek, not 8. Picking by a cached key gives the same jobs as seeking
// every queue: the key is a lower bound of the queue's first pending key,
// so a picked queue whose seek lands further is put back and the pick is
// made again.
func (a *applier) fetch(o *FetchOp) Result {
	a.touchWorker(o.WorkerID, o.Hostname, o.Queues)
	want := int(o.Count)
	if want <= 0 {
		want = 1
	}
	// The heads live in one array that never grows past the queue count,
	// so pointers into it stay valid; the pointer list starts on the stack.
	store := make([]fetchHead, 0, len(o.Queues))
	var ptrs [8]*fetchHead
	heads := ptrs[:0]
	// A claim can add pending jobs (an expired job dies, and its chain's
	// on_failure handler is enqueued here): the positions this fetch
	// leaves as heads and cursors do not see them, so they are applied
	// again once it has (this defer runs last).
	a.inFetch, a.fetchAdds = true, a.fetchAdds[:0]
	defer func() {
		a.inFetch = false
		for _, k := range a.fetchAdds {
			q, _ := pendingQueue(k)
			a.s.lowerCursor(q, k)
			if h := a.s.heads[q]; h != nil && bytes.Compare(k, h) < 0 {
				a.s.heads[q] = k
			}
		}
		a.fetchAdds = a.fetchAdds[:0]
	}()
	defer func() {
		for _, h := range heads {
			h.src.close()
		}
	}()
	seen := make(map[string]struct{}, len(o.Queues))
	var provRooms map[string]*int
	for _, q := range o.Queues {
		if _, dup := seen[q]; dup {
			continue
		}
		seen[q] = struct{}{}
		if !a.knownQueue(q) || a.stats(q).Counts[StatePending] <= 0 || a.config(q).Paused {
			continue
		}
		room := a.fetchRoom(q)
		// Queues linked to one provider share its room in this fetch.
		var prov *int
		if id, r := a.linkedProvider(q); r != nil {
			if prov = provRooms[id]; prov == nil {
				if provRooms == nil {
					provRooms = map[string]*int{}
				}
				prov = new(int)
				*prov = a.providerRoom(id, r)
				provRooms[id] = prov
			}
			if *prov == 0 {
				room = 0
			}
		}
		if room == 0 {
			a.dirty[q] = struct{}{} // its signal then says until when it is blocked
			continue
		}
		plen := len(pfxPending) + len(q) + 1 // pendingPrefix(q), made only to seek
		if k := a.s.heads[q]; k != nil {
			store = append(store, fetchHead{queue: q, prefix: plen, key: k, room: room, prov: prov})
			heads = append(heads, &store[len(store)-1])
			continue
		}
		store = append(store, fetchHead{queue: q, prefix: plen, room: room, prov: prov})
		h := &store[len(store)-1]
		ok := a.openPending(q, a.s.cursor(q), &h.src)
		if a.err != nil {
			return Result{}
		}
		if !ok {
			store = store[:len(store)-1]
			continue
		}
		h.key = h.src.key()
		heads = append(heads, h)
	}
	// Whatever the heads stop on is each queue's new head (the batch has
	// no pending inserts the iterators cannot see: fetch adds none); a
	// queue read through an iterator gets a window from there.
	defer func() {
		for _, h := range heads {
			if h.src.open {
				a.s.heads[h.queue] = append([]byte(nil), h.key...)
				// Not when the fetch added pending jobs (an expired job's
				// on_failure): the iterator may not see them, below its
				// lower bound or made after it.
				if h.src.it != nil && a.err == nil && len(a.fetchAdds) == 0 {
					a.s.fillWin(h.queue, h.src.it)
				}
			}
		}
	}()
	res := Result{}
	for len(res.Jobs) < want && len(heads) > 0 {
		best := 0
		for i := 1; i < len(heads); i++ {
			if bytes.Compare(heads[i].key[heads[i].prefix:], heads[best].key[heads[best].prefix:]) < 0 {
				best = i
			}
		}
		h := heads[best]
		if !h.src.open {
			ok := a.openPending(h.queue, h.key, &h.src)
			if a.err != nil {
				return Result{}
			}
			if !ok {
				heads = append(heads[:best], heads[best+1:]...)
				delete(a.s.heads, h.queue)
				continue
			}
			moved := !bytes.Equal(h.src.key(), h.key)
			h.key = h.src.key()
			if moved {
				continue // the cached head was below the first key: pick again
			}
		}
		a.s.setCursor(h.queue, h.key) // copied: the source moves on
		id := h.src.id()
		if a.nextPending(h.queue, &h.src) {
			h.key = h.src.key()
		} else {
			if a.err != nil {
				return Result{}
			}
			heads = append(heads[:best], heads[best+1:]...)
			delete(a.s.heads, h.queue)
		}
		if v, ok := a.claim(id, o); ok {
			if res.Jobs == nil {
				// Sized for the claim at its first job (a JobView is ~700
				// bytes: growing the slice one append at a time was
				// about a tenth of the bytes the server allocated in an
				// SDK end-to-end run). The
				// gateway asks for the jobs it reserved, so want is what
				// it expects to find; up to 64, so a large count over
				// queues holding a few jobs allocates little for jobs it
				// will not find.
				res.Jobs = make([]JobView, 0, min(want, 64))
			}
			res.Jobs = append(res.Jobs, v)
			a.recordFetch(h.queue)
			h.room--
			if h.prov != nil {
				*h.prov--
			}
			if h.room == 0 || h.prov != nil && *h.prov == 0 {
				// The queue, or its provider's share, reached a limit:
				// the queue (every queue of the provider) leaves this
				// fetch, an iterator's position still being its head.
				spent, kept := h.prov, heads[:0]
				for _, x := range heads {
					if x == h || spent != nil && *spent == 0 && x.prov == spent {
						if x.src.open {
							a.s.heads[x.queue] = append([]byte(nil), x.key...)
							x.src.close()
						}
						a.dirty[x.queue] = struct{}{}
						continue
					}
					kept = append(kept, x)
				}
				heads = kept
			}
		}
		if a.err != nil {
			return Result{}
		}
	}
	return res
}

// pendingIter opens an iterator over a queue's pending keys from lower and
// positions it on the first; false (iterator closed) when there is none.
func (a *applier) pendingIter(lower, pfx []byte) (*pebble.Iterator, bool) {
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(pfx)})
	if err != nil {
		a.fail(err)
		return nil, false
	}
	if !it.First() {
		if err := it.Close(); err != nil {
			a.fail(err)
		}
		return nil, false
	}
	return it, true
}

// openPending opens src on queue q's pending keys from lower, positioned on
// the first; false (src closed) when there is none. It reads the queue's
// window when it has one (and the window's snapshot is what src sees, as
// an iterator sees the batch as of its creation), else a Pebble iterator.
func (a *applier) openPending(q string, lower []byte, src *pendSource) bool {
	*src = pendSource{open: true, since: len(a.fetchAdds)}
	if w := a.s.wins[q]; w.usable() {
		src.keys, src.ids, src.all = w.keys, w.ids, w.all
		for src.pos < len(src.keys) && bytes.Compare(src.keys[src.pos], lower) < 0 {
			src.pos++
		}
		if src.pos < len(src.keys) {
			return true
		}
		if src.all {
			src.open = false
			return false
		}
		// Every key the window holds is below lower: the rest is in Pebble.
	} else if w != nil {
		delete(a.s.wins, q) // emptied: filled again from the iterator below
	}
	src.keys, src.ids = nil, nil
	it, ok := a.pendingIter(lower, pendingPrefix(q))
	if !ok {
		src.open = false
		return false
	}
	src.it = it
	return true
}

// nextPending moves src to its queue's next pending key; false (src
// closed) past the last. Past its window's snapshot it goes on in an
// iterator from after the snapshot's last key, skipping what was added
// since the snapshot (an iterator made at the snapshot would not see it).
func (a *applier) nextPending(q string, src *pendSource) bool {
	if src.it == nil {
		src.pos++
		if src.pos < len(src.keys) {
			return true
		}
		if src.all {
			src.close()
			return false
		}
		it, ok := a.pendingIter(append(bytes.Clone(src.keys[len(src.keys)-1]), 0), pendingPrefix(q))
		src.keys, src.ids = nil, nil
		if !ok {
			src.close()
			return false
		}
		src.it = it
		if !a.addedSince(src.since, it.Key()) {
			return true
		}
	}
	for src.it.Next() {
		if !a.addedSince(src.since, src.it.Key()) {
			return true
		}
	}
	src.close()
	return false
}

// addedSince reports whether this fetch added pending key k after its
// fetchAdds held since keys.
func (a *applier) addedSince(since int, k []byte) bool {
	for _, x := range a.fetchAdds[since:] {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// claim makes a pending job active for the fetching worker. An expired job
// goes to dead instead (DECISIONS.md: never handed out past expire_after).
func (a *applier) claim(id string, o *FetchOp) (JobView, bool) {
	j, ok := a.loadJob(id)
	if !ok {
		a.fail(fmt.Errorf("pending index points at missing job %s", id))
		return JobView{}, false
	}
	st := a.loadState(id)
	a.delPending(j)
	if a.expired(j) {
		st.State, st.Reason, st.CompletedAt = StateDead, "expired", a.now
		a.finish(j, &st)
		a.move(j.Queue, StatePending, StateDead)
		return JobView{}, false
	}
	st.State = StateActive
	st.Attempt++
	st.WorkerID, st.Hostname = o.WorkerID, o.Hostname
	st.StartedAt = a.now
	st.DueAt = 0
	st.CancelRequested = false
	st.LeaseExpiresAt = a.now + int64(j.LeaseSeconds)*1e9
	a.putState(j, &st)
	a.set(a.tmp(appendTimeIndexKey(a.kbuf[:0], pfxLease, st.LeaseExpiresAt, id)), nil)
	a.move(j.Queue, StatePending, StateActive)
	a.event(EventStarted, j, &st)
	return JobView{Job: *j, State: st}, true
}

// ReasonUndelivered is the reason of the retrying event of an unclaimed
// job.
const ReasonUndelivered = "undelivered"

// unclaim undoes claim for a job whose fetch answer was never delivered,
// or that its worker gave back unstarted: the lease released, the attempt
// and the worker taken back, pending again. The job record keeps no trace
// of the claim (no attempt, no error); the event stream has its started
// event and then a retrying one with reason "undelivered". A job whose
// cancel came while it was claimed is cancelled instead, as a fail or a
// heartbeat would have it.
func (a *applier) unclaim(o *UnclaimOp) Result {
	if o.Holder.WorkerID == "" || o.Holder.Attempt == 0 {
		return Result{Status: StatusInvalid, Message: "an unclaim names the worker and attempt of the claim"}
	}
	j, st, r, ok := a.held(o.JobID, o.Holder)
	if !ok {
		return r
	}
	a.releaseLease(j.ID, &st)
	if st.CancelRequested {
		a.cancelNow(j, &st)
		return Result{State: StateCancelled, Queue: j.Queue}
	}
	st.State = StatePending
	st.Attempt--
	st.WorkerID, st.Hostname = "", ""
	st.StartedAt = 0
	st.CancelRequested = false
	a.addPending(j)
	if e := a.event(EventRetrying, j, &st); e != nil {
		e.Reason = ReasonUndelivered
	}
	a.putState(j, &st)
	a.move(j.Queue, StateActive, StatePending)
	return Result{State: StatePending, Queue: j.Queue}
}

// cancelNow ends an active job whose cancel was requested while it was
// claimed and whose lease is already released: cancelled, done.
func (a *applier) cancelNow(j *Job, st *JobState) {
	st.State, st.Reason, st.CompletedAt = StateCancelled, "cancelled", a.now
	st.CancelRequested = false
	a.finish(j, st)
	a.move(j.Queue, StateActive, StateCancelled)
}

// held loads an active job and checks that the caller holds its lease.
func (a *applier) held(id string, h Holder) (*Job, JobState, Result, bool) {
	j, ok := a.loadJob(id)
	if !ok {
		return nil, JobState{}, Result{Status: StatusNotFound, Message: "job not found"}, false
	}
	st := a.loadState(id)
	switch {
	case st.State != StateActive:
		return j, st, Result{Status: StatusConflict, State: st.State, Message: "job is " + st.State.String() + ", not active"}, false
	case h.WorkerID != "" && h.WorkerID != st.WorkerID:
		return j, st, Result{Status: StatusConflict, State: st.State, Message: "job is held by another worker"}, false
	case h.Attempt != 0 && h.Attempt != st.Attempt:
		return j, st, Result{Status: StatusConflict, State: st.State, Message: fmt.Sprintf("the lease of attempt %d is gone (job is on attempt %d)", h.Attempt, st.Attempt)}, false
	}
	return j, st, Result{}, true
}

func (a *applier) ack(o *AckOp) Result {
	if o.Usage != nil {
		if err := o.Usage.Check(); err != nil {
			return Result{Status: StatusInvalid, Message: err.Error()}
		}
	}
	j, st, r, ok := a.held(o.JobID, o.Holder)
	if !ok {
		return r
	}
	if len(j.ResultSchema) > 0 && !o.SchemaChecked {
		return Result{Status: StatusSchemaRequired, State: StateActive, Queue: j.Queue, Message: "the job's result must be validated against its result_schema"}
	}
	var used []UsageRecord
	if o.Usage != nil {
		used = []UsageRecord{a.addUsage(j, &st, PhaseAck, o.Usage)}
	}
	a.releaseLease(j.ID, &st)
	st.State = StateCompleted
	st.CompletedAt = a.now
	st.Result = o.Result
	st.CancelRequested = false
	a.ackStep = o.StepStatus
	a.cacheResult(j, &st)
	a.finish(j, &st)
	a.ackStep = ""
	a.move(j.Queue, StateActive, StateCompleted)
	return Result{State: StateCompleted, Queue: j.Queue, Usage: used}
}

func (a *applier) failJob(o *FailOp) Result {
	if o.Usage != nil {
		if err := o.Usage.Check(); err != nil {
			return Result{Status: StatusInvalid, Message: err.Error()}
		}
	}
	j, st, r, ok := a.held(o.JobID, o.Holder)
	if !ok {
		return r
	}
	var used []UsageRecord
	if o.Usage != nil {
		used = []UsageRecord{a.addUsage(j, &st, PhaseFail, o.Usage)}
	}
	a.releaseLease(j.ID, &st)
	je := a.addError(j, &st, o.Error, o.Backtrace)
	if o.Checkpoint != nil {
		st.Checkpoint = o.Checkpoint
	}
	a.stats(j.Queue).Failed++
	var routedOn bool
	if o.ProviderError {
		r, routedOn = a.routeFallback(j, &st, je)
	}
	if !routedOn {
		r = a.afterFailure(j, &st, je)
	}
	r.Queue = j.Queue
	r.Usage = used
	return r
}

// afterFailure decides what follows a failed attempt of an active job whose
// lease is already released: cancelled, dead (expired or out of attempts),
// or another attempt after the backoff. It stores the attempt's error
// record je with the time of the next attempt.
func (a *applier) afterFailure(j *Job, st *JobState, je *JobError) Result {
	view := JobView{Job: *j, State: *st}
	remaining := view.AttemptsRemaining()
	switch {
	case st.CancelRequested:
		st.State, st.Reason, st.CompletedAt = StateCancelled, "cancelled", a.now
		st.CancelRequested = false
	case a.expired(j):
		st.State, st.Reason, st.CompletedAt = StateDead, "expired", a.now
	case remaining == 0:
		st.State, st.Reason, st.CompletedAt = StateDead, "max_retries", a.now
	}
	if st.State != StateActive {
		a.storeError(j.ID, st.Errors, je)
		a.finish(j, st)
		a.move(j.Queue, StateActive, st.State)
		return Result{State: st.State, AttemptsRemaining: 0}
	}
	// Another attempt: a routed job starts again from its first model.
	st.RouteIndex = 0
	delay := BackoffDelayMs(j.Backoff, j.BaseDelayMs, j.MaxDelayMs, st.Attempt-min(st.Attempt, st.RouteFallbacks))
	if delay <= 0 {
		st.State, st.DueAt = StatePending, 0
		je.RetryAt = a.now
		a.storeError(j.ID, st.Errors, je)
		a.putState(j, st)
		a.addPending(j)
		a.move(j.Queue, StateActive, StatePending)
		a.event(EventRetrying, j, st)
		return Result{State: StatePending, NextAttemptAt: a.now, AttemptsRemaining: remaining}
	}
	st.State, st.DueAt = StateRetrying, a.now+delay*1e6
	je.RetryAt = st.DueAt
	a.storeError(j.ID, st.Errors, je)
	a.event(EventRetrying, j, st)
	a.putState(j, st)
	a.set(timeIndexKey(pfxDue, st.DueAt, j.ID), nil)
	a.move(j.Queue, StateActive, StateRetrying)
	return Result{State: StateRetrying, NextAttemptAt: st.DueAt, AttemptsRemaining: remaining}
}

func (a *applier) heartbeat(o *HeartbeatOp) Result {
	a.touchWorker(o.WorkerID, "", nil)
	res := Result{Heartbeats: make([]HeartbeatStatus, len(o.Jobs))}
	for i := range o.Jobs {
		hj := &o.Jobs[i]
		j, st, r, ok := a.held(hj.JobID, Holder{WorkerID: o.WorkerID, Attempt: hj.Attempt})
		if !ok {
			if r.Status == StatusNotFound {
				res.Heartbeats[i] = HeartbeatNotFound
			} else if st.State == StateCancelled {
				res.Heartbeats[i] = HeartbeatCancel
			} else {
				res.Heartbeats[i] = HeartbeatLost
			}
			continue
		}
		if hj.Progress != nil {
			st.Progress = hj.Progress
			st.ProgressAt = a.now
			if e := a.event(EventProgress, j, &st); e != nil && len(hj.Progress) <= eventProgressMax {
				e.Progress = append([]byte(nil), hj.Progress...)
			}
		}
		if hj.Checkpoint != nil {
			st.Checkpoint = hj.Checkpoint
		}
		if hj.Usage != nil && hj.Usage.Check() == nil { // the gateway refuses a bad one
			res.Usage = append(res.Usage, a.addUsage(j, &st, PhaseHeartbeat, hj.Usage))
		}
		a.releaseLease(j.ID, &st)
		over := st.CostNanos > 0 && a.overJobBudget(j, st.CostNanos)
		if st.CancelRequested {
			// The worker hears about the cancel now; the job is done.
			a.cancelNow(j, &st)
			res.Heartbeats[i] = HeartbeatCancel
			continue
		}
		st.LeaseExpiresAt = a.now + int64(j.LeaseSeconds)*1e9
		a.set(a.tmp(appendTimeIndexKey(a.kbuf[:0], pfxLease, st.LeaseExpiresAt, j.ID)), nil)
		a.putState(j, &st)
		res.Heartbeats[i] = HeartbeatOK
		if over {
			res.Heartbeats[i] = HeartbeatBudgetExceeded
		}
	}
	return res
}

func (a *applier) cancel(o *CancelOp) Result {
	j, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j.ID)
	from := st.State
	switch from {
	case StatePending:
		a.delPending(j)
	case StateScheduled, StateRetrying:
		a.del(timeIndexKey(pfxDue, st.DueAt, j.ID))
		st.DueAt = 0
	case StateHeld:
	case StateActive:
		// Delivered on the worker's next heartbeat; the job stays active
		// (and its lease valid) until then.
		if !st.CancelRequested {
			st.CancelRequested = true
			a.putState(j, &st)
		}
		return Result{State: StateActive}
	default:
		return Result{Status: StatusConflict, State: from, Message: "job is " + from.String() + " and cannot be cancelled"}
	}
	st.State, st.Reason, st.CompletedAt = StateCancelled, "cancelled", a.now
	a.finish(j, &st)
	a.move(j.Queue, from, StateCancelled)
	return Result{State: StateCancelled}
}

// promote moves due scheduled and retrying jobs to pending, oldest first.
func (a *applier) promote(o *PromoteOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 10000
	}
	keys := a.scanTimeIndex(pfxDue, &a.s.dueCursor, limit)
	n := uint32(0)
	for _, k := range keys {
		_, id, _ := splitTimeIndexKey(pfxDue, k)
		a.del(k)
		j, ok := a.loadJob(id)
		if !ok {
			continue
		}
		st := a.loadState(id)
		if (st.State != StateScheduled && st.State != StateRetrying) || st.DueAt > a.now {
			continue // a stale index key
		}
		from := st.State
		st.State, st.DueAt = StatePending, 0
		a.putState(j, &st)
		a.addPending(j)
		a.move(j.Queue, from, StatePending)
		a.event(EventEnqueued, j, &st)
		n++
	}
	return Result{Count: n}
}

// reclaim returns jobs whose lease expired to pending (or dead when no
// attempt remains, or cancelled when a cancel was pending), keeping their
// checkpoint. The lost attempt is recorded as an error.
func (a *applier) reclaim(o *ReclaimOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 10000
	}
	keys := a.scanTimeIndex(pfxLease, &a.s.leaseCursor, limit)
	n := uint32(0)
	for _, k := range keys {
		_, id, _ := splitTimeIndexKey(pfxLease, k)
		j, ok := a.loadJob(id)
		if !ok {
			a.del(k)
			continue
		}
		st := a.loadState(id)
		if st.State != StateActive || st.LeaseExpiresAt > a.now {
			a.del(k) // stale
			continue
		}
		a.releaseLease(id, &st)
		je := a.addError(j, &st, fmt.Sprintf("lease expired: worker %q stopped heartbeating", st.WorkerID), "")
		a.stats(j.Queue).Failed++
		a.afterReclaim(j, &st, je)
		n++
	}
	return Result{Count: n}
}

func (a *applier) afterReclaim(j *Job, st *JobState, je *JobError) {
	view := JobView{Job: *j, State: *st}
	switch {
	case st.CancelRequested:
		st.State, st.Reason, st.CompletedAt = StateCancelled, "cancelled", a.now
		st.CancelRequested = false
	case a.expired(j):
		st.State, st.Reason, st.CompletedAt = StateDead, "expired", a.now
	case view.AttemptsRemaining() == 0:
		st.State, st.Reason, st.CompletedAt = StateDead, "lease_expired", a.now
	default:
		st.State = StatePending
		st.WorkerID, st.Hostname = "", ""
		je.RetryAt = a.now
		a.addPending(j)
	}
	a.storeError(j.ID, st.Errors, je)
	if st.State.Terminal() {
		a.finish(j, st)
	} else {
		a.event(EventRetrying, j, st)
		a.putState(j, st)
	}
	a.move(j.Queue, StateActive, st.State)
}

// scanTimeIndex returns up to limit keys of a time index due at or before
// now, starting at the index's cursor; the caller deletes every key it is
// given, so the cursor then moves past them.
func (a *applier) scanTimeIndex(pfx string, cursor *[]byte, limit int) [][]byte {
	return a.scanTimeIndexUntil(pfx, cursor, a.now, limit)
}

// scanTimeIndexUntil is scanTimeIndex up to and including time until; keys
// are never inserted at or before until after the scan (their times are
// later), so the cursor stays valid.
func (a *applier) scanTimeIndexUntil(pfx string, cursor *[]byte, until int64, limit int) [][]byte {
	lower := *cursor
	if lower == nil {
		lower = []byte(pfx)
	}
	upper := timeIndexUpper(pfx, until)
	if bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		a.fail(err)
		return nil
	}
	defer it.Close()
	var keys [][]byte
	for it.First(); it.Valid() && len(keys) < limit; it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Error(); err != nil {
		a.fail(err)
		return nil
	}
	if len(keys) < limit {
		*cursor = upper
	} else {
		*cursor = keys[len(keys)-1]
	}
	return keys
}

func (a *applier) setPaused(q string, paused bool) Result {
	c := a.config(q)
	if c.Paused == paused {
		return Result{}
	}
	c.Paused = paused
	a.set(queueCfgKey(q), c.appendTo(nil))
	a.stats(q)
	a.dirty[q] = struct{}{}
	if !paused {
		a.ready[q] = struct{}{}
	}
	return Result{}
}

func (a *applier) pruneDedup(o *PruneDedupOp) Result {
	upper := NewEntryID(o.Before, 0)
	if err := a.b.DeleteRange([]byte(pfxDedup), dedupKey(upper), nil); err != nil {
		a.fail(err)
	}
	a.s.dedup.prune(upper)
	return Result{}
}
