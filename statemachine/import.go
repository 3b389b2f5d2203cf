package statemachine

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/corvohq/corvo/router"
)

// Import: what a restore (corvo restore) writes. An ImportOp carries one
// record a backup holds — a job with its state, error history, usage
// records and scores, a batch, a schedule, a budget with its daily spend,
// a result-cache entry or a queue's usage totals of a day — and writes it
// as it was, with the index keys its state needs, on the shard the
// restoring gateway routed it to (after giving it a new ID when the target
// cluster routes it elsewhere; a budget goes to every shard). It never
// overwrites: a record whose ID (or key) exists is answered
// StatusConflict "exists" and changes nothing, so running a restore twice
// duplicates nothing.
//
// It sends nothing to other shards: a held job's watches on its
// dependencies are asked for (DepWatchOp) by the restore once every job is
// written, or a dependency restored later would be reported missing.

// ImportOp writes one backed-up record: exactly one of its fields is set.
type ImportOp struct {
	Job      *JobExport
	Batch    *BatchExport
	Schedule *Schedule
	Budget   *BudgetExport
	Cache    *CacheExport
	UsageDay *UsageDayExport
}

// What an ImportOp carries (its first byte). Values are in Raft logs:
// append, never renumber.
const (
	importJob      = 1
	importBatch    = 2
	importSchedule = 3
	importBudget   = 4
	importCache    = 5
	importUsageDay = 6
)

// Code implements Op.
func (*ImportOp) Code() OpCode { return OpImport }

func (o *ImportOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	switch {
	case o.Job != nil:
		e.u8(importJob)
		e.b = o.Job.View.appendTo(e.b)
		e.uvarint(uint64(len(o.Job.Resolved)))
		for _, id := range o.Job.Resolved {
			e.str(id)
		}
		appendUsageScores(&e, o.Job.View.Usage, o.Job.View.Scores)
	case o.Batch != nil:
		e.u8(importBatch)
		e.bytes(o.Batch.Batch.appendTo(nil))
		e.uvarint(uint64(len(o.Batch.Counted)))
		for _, id := range o.Batch.Counted {
			e.str(id)
		}
	case o.Schedule != nil:
		e.u8(importSchedule)
		e.bytes(o.Schedule.appendTo(nil))
	case o.Budget != nil:
		e.u8(importBudget)
		be := enc{}
		o.Budget.Budget.appendTo(&be)
		e.bytes(be.b)
		e.uvarint(uint64(len(o.Budget.Spend)))
		for _, s := range o.Budget.Spend {
			e.varint(s.Day)
			e.varint(s.Nanos)
		}
	case o.Cache != nil:
		e.u8(importCache)
		e.str(o.Cache.Queue)
		e.str(o.Cache.Key)
		e.bytes(o.Cache.Entry.appendTo(nil))
	case o.UsageDay != nil:
		e.u8(importUsageDay)
		e.varint(o.UsageDay.Day)
		e.str(o.UsageDay.Queue)
		e.bytes(o.UsageDay.UsageTotals.appendTo(nil))
	default:
		e.u8(0)
	}
	return e.b
}

// maxImportDays bounds the daily spends an imported budget carries (the
// retention keeps 62 days; a backup sums every shard's).
const maxImportDays = 1 << 12

func (o *ImportOp) decode(d *dec) {
	ids := func() []string {
		n := d.uvarint()
		if n > 1<<20 || n > uint64(len(d.b)) {
			d.fail()
			return nil
		}
		var out []string
		for i := uint64(0); i < n && d.err == nil; i++ {
			out = append(out, d.str())
		}
		return out
	}
	switch d.u8() {
	case importJob:
		o.Job = &JobExport{}
		o.Job.View.decode(d)
		o.Job.Resolved = ids()
		o.Job.View.Usage, o.Job.View.Scores = decodeUsageScores(d)
	case importBatch:
		o.Batch = &BatchExport{}
		bd := dec{b: d.bytes()}
		o.Batch.Batch.decode(&bd)
		if bd.err != nil {
			d.fail()
			return
		}
		o.Batch.Counted = ids()
	case importSchedule:
		o.Schedule = &Schedule{}
		sd := dec{b: d.bytes()}
		o.Schedule.decode(&sd)
		if sd.err != nil {
			d.fail()
		}
	case importBudget:
		o.Budget = &BudgetExport{}
		bd := dec{b: d.bytes()}
		o.Budget.Budget.decode(&bd)
		n := d.uvarint()
		if bd.err != nil || n > maxImportDays || n > uint64(len(d.b)) {
			d.fail()
			return
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			o.Budget.Spend = append(o.Budget.Spend, DaySpend{Day: d.varint(), Nanos: d.varint()})
		}
	case importCache:
		o.Cache = &CacheExport{Queue: d.str(), Key: d.str()}
		cd := dec{b: d.bytes()}
		o.Cache.Entry.decode(&cd)
		if cd.err != nil {
			d.fail()
		}
	case importUsageDay:
		o.UsageDay = &UsageDayExport{Day: d.varint()}
		o.UsageDay.Queue = d.str()
		td := dec{b: d.bytes()}
		o.UsageDay.UsageTotals.decode(&td)
		if td.err != nil {
			d.fail()
		}
	default:
		d.fail()
	}
}

func (a *applier) importRecord(o *ImportOp) Result {
	switch {
	case o.Job != nil:
		return a.importJob(o.Job)
	case o.Batch != nil:
		return a.importBatch(o.Batch)
	case o.Schedule != nil:
		return a.importSchedule(o.Schedule)
	case o.Budget != nil:
		return a.importBudget(o.Budget)
	case o.Cache != nil:
		return a.importCache(o.Cache)
	case o.UsageDay != nil:
		return a.importUsageDay(o.UsageDay)
	}
	return Result{Status: StatusInvalid, Message: "an import holds no record"}
}

// exists is the answer to an import whose ID is taken.
func exists(what, id string) Result {
	return Result{Status: StatusConflict, Existing: true, JobID: id, Message: what + " " + id + " exists"}
}

// importJob writes a job as it was backed up. An active job's lease died
// with the cluster it was leased in: it comes back pending, its attempt
// kept (the attempt in flight counts as made). Its FIFO sequence is this
// entry's; its creation time, attempts, results and errors are kept.
func (a *applier) importJob(in *JobExport) Result {
	j := cloneJob(in.View.Job)
	st := cloneState(in.View.State)
	switch {
	case j.ID == "" || j.Queue == "":
		return Result{Status: StatusInvalid, Message: "job id and queue are required"}
	case j.Priority > PriorityNormal:
		return Result{Status: StatusInvalid, Message: "unknown priority"}
	case st.State < StatePending || st.State > StateHeld:
		return Result{Status: StatusInvalid, Message: "unknown job state"}
	}
	if msg := checkJobRecords(&in.View); msg != "" {
		return Result{Status: StatusInvalid, Message: "job " + j.ID + ": " + msg}
	}
	if _, ok := a.get(jobKey(j.ID)); ok {
		return exists("job", j.ID)
	}
	if st.State == StateActive {
		st.State = StatePending
		st.WorkerID, st.Hostname, st.LeaseExpiresAt, st.CancelRequested = "", "", 0, false
	}
	if j.LeaseSeconds == 0 {
		j.LeaseSeconds = DefaultLeaseSeconds
	}
	j.Seq = a.nextSeq()
	a.set(jobKey(j.ID), j.appendTo(nil))
	for i := range in.View.Errors {
		a.storeError(j.ID, uint32(i+1), &in.View.Errors[i])
	}
	st.Errors = uint32(len(in.View.Errors))
	a.importJobRecords(&j, &st, &in.View)
	a.set(stateKey(j.ID), st.appendTo(nil))
	if !st.State.Terminal() {
		a.s.jobs.add(&j, st)
	}
	switch st.State {
	case StatePending:
		a.addPending(&j)
	case StateScheduled, StateRetrying:
		a.set(timeIndexKey(pfxDue, st.DueAt, j.ID), nil)
		a.rewind(&a.s.dueCursor, st.DueAt)
	case StateHeld:
	default: // terminal
		a.set(timeIndexKey(pfxFinished, st.CompletedAt, j.ID), nil)
		a.rewind(&a.s.purgeCursor, st.CompletedAt)
		if st.State == StateDead {
			a.setDead(&j, &st)
		}
	}
	for _, dep := range in.Resolved {
		a.set(resolvedKey(j.ID, dep), nil)
	}
	if !st.State.Terminal() && j.ExpireAt > 0 {
		a.set(timeIndexKey(pfxExpire, j.ExpireAt, j.ID), nil)
		a.rewind(&a.s.expireCursor, j.ExpireAt)
	}
	a.importUnique(&j, &st)
	a.stats(j.Queue).Enqueued++
	a.move(j.Queue, 0, st.State)
	a.noteChange(&j, &st)
	return Result{State: st.State, Queue: j.Queue, JobID: j.ID}
}

// rewind sends a time index's scan back to the index's start when a key
// at time at (not after now) was just written: the key may sit behind the
// scan's cursor (an imported or moved job due, finished or expiring in
// the past), where this replica's scans would not see it until a restart
// while a replica that restarted would act on it. The cursors live in
// memory only; starting a scan from the start finds what it would have.
func (a *applier) rewind(cursor *[]byte, at int64) {
	if at <= a.now {
		*cursor = nil
	}
}

// checkJobRecords says what is wrong with an imported job's usage records
// and scores ("": nothing).
func checkJobRecords(v *JobView) string {
	for i := range v.Usage {
		u := &v.Usage[i]
		if u.Phase < PhaseHeartbeat || u.Phase > PhaseFail {
			return "a usage record has an unknown phase"
		}
		if err := u.Usage.Check(); err != nil {
			return err.Error()
		}
	}
	if len(v.Scores) > MaxScoresPerJob {
		return fmt.Sprintf("more than %d scores", MaxScoresPerJob)
	}
	for i := range v.Scores {
		if err := v.Scores[i].Check(); err != nil {
			return "score: " + err.Error()
		}
	}
	return ""
}

// importJobRecords writes an imported job's usage records and scores,
// numbered from the start as a move numbers them, and sets the state's
// counts from them: the job's cost is the sum of its records, as
// addUsage keeps it. Neither the queue's daily totals nor a budget's
// spend move: they travel as records of their own.
func (a *applier) importJobRecords(j *Job, st *JobState, v *JobView) {
	st.UsageKeys, st.CostNanos = 0, 0
	for i := range v.Usage {
		rec := v.Usage[i]
		rec.N = uint32(i + 1)
		a.set(usageKey(j.ID, rec.N), rec.appendTo(nil))
		st.UsageKeys, st.CostNanos = rec.N, st.CostNanos+rec.CostNanos
		if a.newUsage != nil {
			a.newUsage[j.ID] = append(a.newUsage[j.ID], rec)
		}
	}
	st.ScoreKeys = 0
	for i := range v.Scores {
		rec := v.Scores[i]
		rec.N = uint32(i)
		rec.Dims = append([]ScoreDim(nil), rec.Dims...)
		a.set(scoreKey(j.ID, rec.N), rec.appendTo(nil))
		st.ScoreKeys = rec.N + 1
		if a.newScores != nil {
			a.newScores[j.ID] = append(a.newScores[j.ID], rec)
		}
	}
}

// importUnique takes the job's unique key again when it would still hold
// it: a live job without a period holds it until it finishes; one with a
// period holds it until created_at + unique_period. A key another job
// already holds here stays that job's.
func (a *applier) importUnique(j *Job, st *JobState) {
	if j.UniqueKey == "" {
		return
	}
	var exp int64
	if j.UniquePeriod > 0 {
		exp = j.CreatedAt + j.UniquePeriod*1e9
		if exp <= a.now {
			return
		}
	} else if st.State.Terminal() {
		return
	}
	if _, held := a.uniqueHolder(j.Queue, j.UniqueKey); held {
		return
	}
	if exp != 0 {
		a.set(uniqueXKey(exp, j.Queue, j.UniqueKey), nil)
	}
	a.set(uniqueKey(j.Queue, j.UniqueKey), binary.BigEndian.AppendUint64([]byte(j.ID), uint64(exp)))
}

// importBatch writes a batch record with its counted jobs.
func (a *applier) importBatch(in *BatchExport) Result {
	if in.Batch.ID == "" {
		return Result{Status: StatusInvalid, Message: "batch id is required"}
	}
	if _, ok := a.get(batchKey(in.Batch.ID)); ok {
		return exists("batch", in.Batch.ID)
	}
	b := in.Batch
	b.CallbackPayload = cloneBytes(b.CallbackPayload)
	a.set(batchKey(b.ID), b.appendTo(nil))
	for _, id := range in.Counted {
		a.set(batchJobKey(b.ID, id), nil)
	}
	return Result{}
}

// importSchedule writes a schedule with its history (created, updated,
// last run). Its next run is computed from now: the runs the old cluster
// would have fired while it was being restored are not fired.
func (a *applier) importSchedule(in *Schedule) Result {
	if in.ID == "" || in.Queue == "" {
		return Result{Status: StatusInvalid, Message: "schedule id and queue are required"}
	}
	if in.Priority > PriorityNormal {
		return Result{Status: StatusInvalid, Message: "unknown priority"}
	}
	if _, ok := a.loadSchedule(in.ID); ok {
		return exists("schedule", in.ID)
	}
	next, err := NextRun(in.Cron, in.Timezone, a.now)
	if err != nil {
		return Result{Status: StatusInvalid, Message: fmt.Sprintf("schedule %s: %v", in.ID, err)}
	}
	s := *in
	s.Payload = cloneBytes(s.Payload)
	s.NextRun = next
	if s.Paused { // restored paused: it fires once resumed
		s.NextRun = 0
	}
	a.set(scheduleKey(s.ID), s.appendTo(nil))
	if !s.Paused {
		a.set(timeIndexKey(pfxScheduleX, s.NextRun, s.ID), nil)
	}
	a.s.schedules++
	a.s.nextCronStale = true
	return Result{NextAttemptAt: s.NextRun}
}

// importBudget writes a budget with the daily spends it carries (the
// restore sends the budget to every shard, and its spend, summed over the
// backed-up cluster's shards, to one). A day keeps its UTC day: its spend
// counts against the budget on that day, and goes with the retention.
func (a *applier) importBudget(in *BudgetExport) Result {
	b := in.Budget
	if err := b.Check(); err != nil {
		return Result{Status: StatusInvalid, Message: "budget " + b.Scope() + ": " + err.Error()}
	}
	for _, s := range in.Spend {
		if s.Day < 0 || s.Day > math.MaxUint32 || s.Nanos < -MaxUsageCostNanos*maxImportDays || s.Nanos > MaxUsageCostNanos*maxImportDays {
			return Result{Status: StatusInvalid, Message: "budget " + b.Scope() + ": a daily spend out of range"}
		}
	}
	id := b.ID()
	if _, ok := a.get(budgetKey(id)); ok {
		return exists("budget", b.Scope())
	}
	e := enc{}
	b.appendTo(&e)
	a.set(budgetKey(id), e.b)
	for _, s := range in.Spend {
		if s.Nanos != 0 {
			a.set(budgetDayKey(s.Day, id), binary.AppendVarint(nil, s.Nanos))
		}
	}
	return Result{}
}

// importCache writes a result-cache entry with its expiry. One already
// expired is not written (Count 0): its index key would sit behind the
// sweep's cursor.
func (a *applier) importCache(in *CacheExport) Result {
	c := in.Entry
	switch {
	case in.Key == "" || c.JobID == "":
		return Result{Status: StatusInvalid, Message: "a cache entry needs its key and job"}
	case router.ValidateStoredQueue(in.Queue) != nil:
		return Result{Status: StatusInvalid, Message: "cache entry of queue " + strconv.Quote(in.Queue) + ": not a queue name"}
	}
	if c.ExpiresAt <= a.now {
		return Result{Queue: in.Queue, Message: "expired"}
	}
	if _, ok := a.cacheEntry(in.Queue, in.Key); ok {
		return exists("cache entry of", in.Queue)
	}
	a.set(cacheKey(in.Queue, in.Key), c.appendTo(nil))
	a.set(cacheIndexKey(c.ExpiresAt, in.Queue, in.Key), nil)
	return Result{Queue: in.Queue, Count: 1}
}

// importUsageDay writes a queue's usage totals of a UTC day.
func (a *applier) importUsageDay(in *UsageDayExport) Result {
	switch {
	case router.ValidateStoredQueue(in.Queue) != nil:
		return Result{Status: StatusInvalid, Message: "usage totals of queue " + strconv.Quote(in.Queue) + ": not a queue name"}
	case in.Day < 0 || in.Day > math.MaxUint32:
		return Result{Status: StatusInvalid, Message: "usage totals: day out of range"}
	}
	k := usageDayKey(in.Day, in.Queue)
	if _, ok := a.get(k); ok {
		return exists("usage totals of", in.Queue)
	}
	a.set(k, in.UsageTotals.appendTo(nil))
	return Result{Queue: in.Queue}
}
