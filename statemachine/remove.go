package statemachine

// Removing jobs: taking a job out of its index and deleting its keys, shared
// by the sweep, job deletion and queue drops.

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
	a.dropUsage(j.ID, st)
	a.dropScores(j.ID, st)
	a.uncache(j)
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
