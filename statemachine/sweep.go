package statemachine

// Housekeeping: the periodic sweep expires jobs, frees expired unique
// locks and purges old terminal jobs, a bounded step at a time.

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
	a.pruneUsageDays()
	a.pruneBudgetDays()
	n += a.pruneCache(limit)
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
