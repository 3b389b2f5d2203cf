package statemachine

import (
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
)

// ---- unique keys ----

func uniqueKey(q, key string) []byte {
	k := make([]byte, 0, len(pfxUnique)+len(q)+1+len(key))
	k = append(k, pfxUnique...)
	k = append(k, q...)
	k = append(k, 0)
	return append(k, key...)
}

func uniqueXKey(exp int64, q, key string) []byte {
	k := timeIndexKey(pfxUniqueX, exp, q)
	k = append(k, 0)
	return append(k, key...)
}

// uniqueHolder returns the job holding a live lock on (queue, key).
func (a *applier) uniqueHolder(q, key string) (string, bool) {
	v, ok := a.get(uniqueKey(q, key))
	if !ok || len(v) < 8 {
		return "", false
	}
	id, exp := string(v[:len(v)-8]), int64(binary.BigEndian.Uint64(v[len(v)-8:]))
	if exp != 0 && exp <= a.now {
		return "", false // expired: the next enqueue takes it over
	}
	return id, true
}

// lockUnique takes (queue, key) for j, for its unique_period (0: until the
// job finishes).
func (a *applier) lockUnique(j *Job) {
	var exp int64
	if j.UniquePeriod > 0 {
		exp = a.now + j.UniquePeriod*1e9
		a.set(uniqueXKey(exp, j.Queue, j.UniqueKey), nil)
	}
	v := append([]byte(j.ID), make([]byte, 8)...)
	binary.BigEndian.PutUint64(v[len(j.ID):], uint64(exp))
	a.set(uniqueKey(j.Queue, j.UniqueKey), v)
}

// releaseUnique frees j's unique key when j still holds it.
func (a *applier) releaseUnique(j *Job) {
	if j.UniqueKey == "" {
		return
	}
	k := uniqueKey(j.Queue, j.UniqueKey)
	if v, ok := a.get(k); ok && len(v) >= 8 && string(v[:len(v)-8]) == j.ID {
		a.del(k)
	}
}

// ---- housekeeping ----

func (a *applier) sweep(o *SweepOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 5000
	}
	a.forgetWorkers(limit)
	n := a.expireJobs(limit) + a.cleanUnique(limit)
	if o.PurgeBefore > 0 {
		n += a.purge(o.PurgeBefore, limit)
	}
	return Result{Count: uint32(n)}
}

// expireJobs makes jobs past expire_at dead unless they are active (a lease
// is then running; the job dies if it fails or its lease expires) or done.
func (a *applier) expireJobs(limit int) int {
	n := 0
	for _, k := range a.scanTimeIndex(pfxExpire, &a.s.expireCursor, limit) {
		a.del(k)
		_, id, _ := splitTimeIndexKey(pfxExpire, k)
		j, ok := a.loadJob(id)
		if !ok {
			continue
		}
		st := a.loadState(id)
		if !a.unindex(j, &st) {
			continue // active, or already finished
		}
		from := st.State
		st.State, st.Reason, st.CompletedAt = StateDead, "expired", a.now
		a.finish(j, &st)
		a.move(j.Queue, from, StateDead)
		n++
	}
	return n
}

// unindex removes a waiting job (pending, scheduled, retrying, held) from
// its index; false for active and terminal jobs.
func (a *applier) unindex(j *Job, st *JobState) bool {
	switch st.State {
	case StatePending:
		a.delPending(j)
	case StateScheduled, StateRetrying:
		a.del(timeIndexKey(pfxDue, st.DueAt, j.ID))
		st.DueAt = 0
	case StateHeld:
	default:
		return false
	}
	return true
}

func (a *applier) cleanUnique(limit int) int {
	n := 0
	for _, k := range a.scanTimeIndex(pfxUniqueX, &a.s.uniqueCursor, limit) {
		a.del(k)
		exp, rest, _ := splitTimeIndexKey(pfxUniqueX, k)
		for i := 0; i < len(rest); i++ {
			if rest[i] == 0 {
				uk := uniqueKey(rest[:i], rest[i+1:])
				if v, ok := a.get(uk); ok && len(v) >= 8 && int64(binary.BigEndian.Uint64(v[len(v)-8:])) == exp {
					a.del(uk)
					n++
				}
				break
			}
		}
	}
	return n
}

// purge deletes terminal jobs that finished before 'before'.
func (a *applier) purge(before int64, limit int) int {
	n := 0
	for _, k := range a.scanTimeIndexUntil(pfxFinished, &a.s.purgeCursor, before-1, limit) {
		a.del(k)
		_, id, _ := splitTimeIndexKey(pfxFinished, k)
		j, ok := a.loadJob(id)
		if !ok {
			continue
		}
		st := a.loadState(id)
		if !st.State.Terminal() || st.CompletedAt >= before {
			continue // retried since, or a stale key
		}
		a.dropJob(j, &st)
		n++
	}
	return n
}

// forgetFromBatch counts an unfinished batch job that is being deleted as
// failed, so its batch still completes, and tells the jobs waiting on it.
func (a *applier) forgetFromBatch(j *Job, st *JobState) {
	if st.State.Terminal() {
		return
	}
	if j.BatchID != "" {
		a.send(j.BatchShard, &BatchDoneOp{BatchID: j.BatchID, JobID: j.ID, OK: false})
	}
	a.notifyWatchers(j.ID, false, "deleted")
}

// dropJob deletes every key of a job that is out of every index.
func (a *applier) dropJob(j *Job, st *JobState) {
	a.event(EventDeleted, j, st)
	a.dropKeys(j, st)
}

// dropKeys is dropJob without the deleted event (a job moving to another
// shard is not deleted).
func (a *applier) dropKeys(j *Job, st *JobState) {
	if st.State == StateDead {
		a.del(timeIndexKey(pfxDead, st.CompletedAt, j.ID))
	}
	a.del(jobKey(j.ID))
	a.del(stateKey(j.ID))
	if st.Errors > 0 {
		pfx := errorPrefix(j.ID)
		if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
			a.fail(err)
		}
	}
	if len(j.DependsOn) > 0 {
		pfx := append(append([]byte(pfxDepDone), j.ID...), 0)
		if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
			a.fail(err)
		}
	}
	a.s.jobs.drop(j.ID)
	a.releaseUnique(j)
	a.move(j.Queue, st.State, 0)
	a.noteDeleted(j.ID)
}

// ---- job management ----

func (a *applier) retryJob(o *RetryJobOp) Result {
	return a.reopen(o.JobID, true, false)
}

// requeue: a dead job back to pending, attempts and history kept.
func (a *applier) requeue(o *RequeueOp) Result {
	return a.reopen(o.JobID, false, true)
}

// reopen sends a finished job back to pending.
func (a *applier) reopen(id string, resetAttempts, deadOnly bool) Result {
	j, ok := a.loadJob(id)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j.ID)
	if !st.State.Terminal() || (deadOnly && st.State != StateDead) {
		return Result{Status: StatusConflict, State: st.State, Message: "job is " + st.State.String() + "; not a finished job it can send back"}
	}
	from := st.State
	a.del(timeIndexKey(pfxFinished, st.CompletedAt, j.ID))
	if from == StateDead {
		a.del(timeIndexKey(pfxDead, st.CompletedAt, j.ID))
	}
	st.State, st.Reason = StatePending, ""
	if resetAttempts {
		st.Attempt = 0
	}
	st.CompletedAt, st.WorkerID, st.Hostname, st.Result = 0, "", "", nil
	st.CancelRequested = false
	a.putState(j, &st)
	a.addPending(j)
	a.move(j.Queue, from, StatePending)
	a.event(EventEnqueued, j, &st)
	return Result{State: StatePending, Queue: j.Queue}
}

func (a *applier) deleteJob(o *DeleteJobOp) Result {
	j, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j.ID)
	switch {
	case st.State == StateActive:
		a.releaseLease(j.ID, &st)
	case st.State.Terminal():
		a.del(timeIndexKey(pfxFinished, st.CompletedAt, j.ID))
	default:
		a.unindex(j, &st)
	}
	a.forgetFromBatch(j, &st)
	a.dropJob(j, &st)
	return Result{State: st.State, Queue: j.Queue}
}

// moveJob re-files a job under another queue of this shard. The job record
// is rewritten (its queue changes); its ID, history and place in time stay.
func (a *applier) moveJob(o *MoveJobOp) Result {
	j0, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j0.ID)
	switch st.State {
	case StatePending, StateScheduled, StateRetrying, StateDead, StateCompleted, StateCancelled, StateHeld:
	default:
		return Result{Status: StatusConflict, State: st.State, Message: "an active job cannot be moved"}
	}
	if o.Queue == j0.Queue {
		return Result{State: st.State, Queue: j0.Queue}
	}
	j := *j0 // never modify a cached record in place
	from := st.State
	if from == StatePending {
		a.delPending(&j)
	}
	a.releaseUnique(&j)
	a.move(j.Queue, from, 0)
	j.Queue = o.Queue
	if j.UniqueKey != "" {
		j.UniqueKey, j.UniquePeriod = "", 0 // the lock belonged to the old queue
	}
	if o.ResetAttempt {
		st.Attempt = 0
	}
	a.set(jobKey(j.ID), j.appendTo(nil))
	a.s.jobs.drop(j.ID)
	a.putState(&j, &st)
	a.stats(j.Queue)
	if from == StatePending {
		a.addPending(&j)
	}
	a.move(j.Queue, 0, from)
	if e := a.event(EventMoved, &j, &st); e != nil {
		e.FromQueue = j0.Queue
	}
	return Result{State: from, Queue: j.Queue}
}

// dropQueue deletes the queue's jobs in one index, a bounded step at a time.
func (a *applier) dropQueue(o *DropQueueOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 2000
	}
	if o.Index == DropConfig {
		st := a.stats(o.Queue)
		for _, n := range st.Counts {
			if n != 0 {
				return Result{Status: StatusConflict, Message: "the queue still has jobs"}
			}
		}
		a.del(queueCfgKey(o.Queue))
		a.del(queueStatsKey(o.Queue))
		delete(a.s.stats, o.Queue)
		delete(a.s.configs, o.Queue)
		delete(a.dirty, o.Queue)
		pfx := ratePrefix(o.Queue)
		if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
			a.fail(err)
		}
		delete(a.s.rates, o.Queue)
		return Result{}
	}
	var lower, upper []byte
	switch o.Index {
	case DropPending:
		lower = pendingPrefix(o.Queue)
	case DropDue:
		lower = []byte(pfxDue)
	case DropActive:
		lower = []byte(pfxLease)
	case DropFinished:
		lower = []byte(pfxFinished)
	default:
		return Result{Status: StatusInvalid, Message: "unknown index"}
	}
	upper = prefixEnd(lower)
	if o.After != nil {
		lower = append(append([]byte(nil), o.After...), 0) // the next key after After
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		a.fail(err)
		return Result{}
	}
	type hit struct {
		key []byte
		id  string
	}
	var hits []hit
	var last []byte
	examined := 0
	for it.First(); it.Valid() && examined < limit; it.Next() {
		examined++
		last = append(last[:0], it.Key()...)
		var id string
		if o.Index == DropPending {
			id = string(it.Value())
		} else {
			pfx := pfxDue
			if o.Index == DropActive {
				pfx = pfxLease
			} else if o.Index == DropFinished {
				pfx = pfxFinished
			}
			_, id, _ = splitTimeIndexKey(pfx, it.Key())
		}
		hits = append(hits, hit{key: append([]byte(nil), it.Key()...), id: id})
	}
	more := it.Valid()
	if err := it.Close(); err != nil {
		a.fail(err)
		return Result{}
	}
	n := 0
	for _, h := range hits {
		j, ok := a.loadJob(h.id)
		if !ok || j.Queue != o.Queue {
			continue
		}
		st := a.loadState(h.id)
		switch o.Index {
		case DropPending:
			if st.State != StatePending {
				continue
			}
			a.delPending(j)
		case DropDue:
			if (st.State != StateScheduled && st.State != StateRetrying) || timeIndexKeyMismatch(pfxDue, h.key, st.DueAt) {
				continue
			}
			a.del(h.key)
		case DropActive:
			if st.State != StateActive || timeIndexKeyMismatch(pfxLease, h.key, st.LeaseExpiresAt) {
				continue
			}
			a.del(h.key)
		case DropFinished:
			if !st.State.Terminal() || timeIndexKeyMismatch(pfxFinished, h.key, st.CompletedAt) {
				continue
			}
			a.del(h.key)
		}
		a.forgetFromBatch(j, &st)
		a.dropJob(j, &st)
		n++
	}
	r := Result{Count: uint32(n), Queue: o.Queue}
	if more {
		r.Cursor = last
	}
	return r
}

// timeIndexKeyMismatch reports a stale index key: its time is not the
// job's current one.
func timeIndexKeyMismatch(pfx string, k []byte, at int64) bool {
	t, _, ok := splitTimeIndexKey(pfx, k)
	return !ok || t != at
}

// changePriority re-files a pending or scheduled job under another tier.
func (a *applier) changePriority(o *PriorityOp) Result {
	j0, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	if o.Priority > PriorityNormal {
		return Result{Status: StatusInvalid, Message: "unknown priority"}
	}
	st := a.loadState(j0.ID)
	if st.State != StatePending && st.State != StateScheduled {
		return Result{Status: StatusConflict, State: st.State, Message: "only pending or scheduled jobs change priority"}
	}
	if j0.Priority == o.Priority {
		return Result{State: st.State, Queue: j0.Queue}
	}
	j := *j0 // never modify a cached record in place
	if st.State == StatePending {
		a.delPending(&j)
	}
	j.Priority = o.Priority
	a.set(jobKey(j.ID), j.appendTo(nil))
	a.s.jobs.drop(j.ID)
	a.putState(&j, &st)
	if st.State == StatePending {
		a.addPending(&j)
	}
	return Result{State: st.State, Queue: j.Queue}
}
