package statemachine

// Job management: the operator's actions on one job (retry, requeue,
// delete, move to another queue, change priority).

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
		st.Attempt, st.RouteFallbacks = 0, 0
	}
	st.RouteIndex = 0 // a routed job starts again from its first model
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
	if o.SetPriority && o.Priority > PriorityNormal {
		return Result{Status: StatusInvalid, Message: "unknown priority"}
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
	if o.SetPriority {
		j.Priority = o.Priority
	}
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
	if from == StateDead {
		a.setDead(&j, &st) // the list's value is its queue
	}
	if e := a.event(EventMoved, &j, &st); e != nil {
		e.FromQueue = j0.Queue
	}
	return Result{State: from, Queue: j.Queue}
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
