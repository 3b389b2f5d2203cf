package statemachine

import (
	"encoding/binary"
	"fmt"
)

// Import: what a restore (corvo restore) writes. An ImportOp carries one
// record a backup holds — a job with its state and error history, a batch,
// or a schedule — and writes it as it was, with the index keys its state
// needs, on the shard the restoring gateway routed it to (after giving it a
// new ID when the target cluster routes it elsewhere). It never overwrites:
// a record whose ID exists is answered StatusConflict "exists" and changes
// nothing, so running a restore twice duplicates nothing.
//
// It sends nothing to other shards: a held job's watches on its
// dependencies are asked for (DepWatchOp) by the restore once every job is
// written, or a dependency restored later would be reported missing.

// ImportOp writes one backed-up record: exactly one of its fields is set.
type ImportOp struct {
	Job      *JobExport
	Batch    *BatchExport
	Schedule *Schedule
}

const (
	importJob      = 1
	importBatch    = 2
	importSchedule = 3
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
	default:
		e.u8(0)
	}
	return e.b
}

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
	st.ScoreKeys = 0 // a backup does not carry score records
	a.set(stateKey(j.ID), st.appendTo(nil))
	if !st.State.Terminal() {
		a.s.jobs.add(&j, st)
	}
	switch st.State {
	case StatePending:
		a.addPending(&j)
	case StateScheduled, StateRetrying:
		a.set(timeIndexKey(pfxDue, st.DueAt, j.ID), nil)
	case StateHeld:
	default: // terminal
		a.set(timeIndexKey(pfxFinished, st.CompletedAt, j.ID), nil)
		if st.State == StateDead {
			a.set(timeIndexKey(pfxDead, st.CompletedAt, j.ID), nil)
		}
	}
	for _, dep := range in.Resolved {
		a.set(resolvedKey(j.ID, dep), nil)
	}
	if !st.State.Terminal() && j.ExpireAt > 0 {
		a.set(timeIndexKey(pfxExpire, j.ExpireAt, j.ID), nil)
	}
	a.importUnique(&j, &st)
	a.stats(j.Queue).Enqueued++
	a.move(j.Queue, 0, st.State)
	a.noteChange(&j, &st)
	return Result{State: st.State, Queue: j.Queue, JobID: j.ID}
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
