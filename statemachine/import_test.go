package statemachine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exportAll reads everything an export hands out.
func (tb *testBundle) exportAll(batches bool) []ExportRecord {
	tb.t.Helper()
	var out []ExportRecord
	v, err := tb.sm.Lookup(ExportQuery{Batches: batches, Emit: func(r ExportRecord) error {
		out = append(out, r)
		return nil
	}})
	require.NoError(tb.t, err)
	n := v.(ExportCounts)
	require.Equal(tb.t, len(out), n.Queues+n.Schedules+n.Jobs+n.Batches)
	return out
}

// importOps turns exported records into import ops (queue settings go
// through the ops that set them, as the restore does).
func importOps(recs []ExportRecord) []Op {
	var ops []Op
	for _, r := range recs {
		switch {
		case r.Queue != nil:
			c := r.Queue.Config
			ops = append(ops, &SetLimitsOp{Queue: r.Queue.Name, SetConcurrency: true, MaxConcurrency: c.MaxConcurrency,
				SetThrottle: true, RateLimit: c.RateLimit, RateWindowMs: c.RateWindowMs})
			if c.Paused {
				ops = append(ops, &PauseQueueOp{Queue: r.Queue.Name})
			}
		case r.Job != nil:
			ops = append(ops, &ImportOp{Job: r.Job})
		case r.Batch != nil:
			ops = append(ops, &ImportOp{Batch: r.Batch})
		case r.Schedule != nil:
			ops = append(ops, &ImportOp{Schedule: r.Schedule})
		}
	}
	return ops
}

func TestStateMachineExportImport(t *testing.T) {
	t.Parallel()
	src := setup(t)
	// pending, scheduled, active, retrying with history, dead, completed
	// with a result, cancelled, held on a dependency, a unique key.
	pending := src.enqueue("q", PriorityHigh, func(j *Job) { j.UniqueKey = "u1"; j.Tags = []byte(`{"a":"b"}`) })
	scheduled := src.enqueue("q", PriorityNormal, func(j *Job) { j.ScheduledAt = src.now.Add(time.Hour).UnixNano() })
	active := src.enqueue("work", PriorityNormal)
	retrying := src.enqueue("work2", PriorityNormal)
	dead := src.enqueue("work3", PriorityNormal, func(j *Job) { j.MaxRetries = 1 })
	completed := src.enqueue("work4", PriorityNormal)
	cancelled := src.enqueue("q", PriorityNormal)
	held := src.enqueue("q", PriorityNormal, func(j *Job) { j.DependsOn = []Dep{{ID: completed}, {ID: active}} })
	require.Len(t, src.fetch(1, "work"), 1)
	require.Len(t, src.fetch(1, "work2"), 1)
	require.Equal(t, StateRetrying, src.one(&FailOp{JobID: retrying, Error: "boom", Backtrace: "at x"}).State)
	require.Len(t, src.fetch(1, "work3"), 1)
	require.Equal(t, StateDead, src.one(&FailOp{JobID: dead, Error: "fatal"}).State)
	require.Len(t, src.fetch(1, "work4"), 1)
	require.Equal(t, StateCompleted, src.one(&AckOp{JobID: completed, Result: []byte(`{"ok":true}`)}).State)
	require.Equal(t, StateCancelled, src.one(&CancelOp{JobID: cancelled}).State)
	require.Equal(t, StatusOK, src.one(&SetLimitsOp{Queue: "q", SetConcurrency: true, MaxConcurrency: 3, SetThrottle: true, RateLimit: 10, RateWindowMs: 1000}).Status)
	require.Equal(t, StatusOK, src.one(&PauseQueueOp{Queue: "work4"}).Status)
	require.Equal(t, StatusOK, src.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_A", Name: "nightly", Queue: "q", Cron: "0 3 * * *", Timezone: "UTC", Payload: []byte(`{"x":1}`)}}).Status)
	require.Equal(t, StatusOK, src.one(&BatchCreateOp{Batch: Batch{ID: "batch_0_B", Total: 2, CallbackQueue: "q", CallbackJobID: "job_0_01J00000000000000000000000"}}).Status)
	require.Equal(t, StatusOK, src.one(&BatchDoneOp{BatchID: "batch_0_B", JobID: completed, OK: true}).Status)
	src.advance(time.Minute)

	recs := append(src.exportAll(false), src.exportAll(true)...)
	ops := importOps(recs)

	// Two fresh shards given the same entry end byte-identical.
	dst, again := setup(t), setup(t)
	for _, tb := range []*testBundle{dst, again} {
		tb.now = src.now.Add(time.Hour)
		for _, r := range tb.apply(ops...) {
			require.Equal(t, StatusOK, r.Status, r.Message)
		}
	}
	require.Equal(t, dst.dump(), again.dump(), "deterministic")

	byID := map[string]ExportRecord{}
	for _, r := range recs {
		if r.Job != nil {
			byID[r.Job.View.Job.ID] = r
		}
	}
	require.Len(t, byID, 8)
	for id, r := range byID {
		got, want := dst.get(id), src.get(id)
		require.NotNil(t, got, id)
		want.Job.Seq, got.Job.Seq = 0, 0
		if id == active {
			// The lease died with the old cluster: pending, the attempt kept.
			require.Equal(t, StateActive, want.State.State)
			require.Equal(t, StatePending, got.State.State)
			require.Equal(t, uint32(1), got.State.Attempt)
			require.Empty(t, got.State.WorkerID)
			want.State.State, want.State.WorkerID, want.State.Hostname, want.State.LeaseExpiresAt = StatePending, "", "", 0
		}
		require.Equal(t, want, got, id)
		require.Equal(t, r.Job.View.Errors, got.Errors)
	}
	require.Equal(t, []string{completed}, byID[held].Job.Resolved, "the reported dependency travels")
	require.Equal(t, "boom", src.get(retrying).Errors[0].Error)
	require.Equal(t, StateScheduled, dst.get(scheduled).State.State)

	// The indexes follow the states: the pending jobs are fetchable in
	// priority order, the old active one with its attempt; the retrying
	// one comes back at its due time; the dead one is a dead letter.
	got := dst.fetch(5, "q", "work")
	require.Len(t, got, 2)
	require.Equal(t, pending, got[0].Job.ID)
	require.Equal(t, active, got[1].Job.ID)
	require.Equal(t, uint32(2), got[1].State.Attempt)
	v, err := dst.sm.Lookup(DeadQuery{Limit: 10})
	require.NoError(t, err)
	require.Len(t, v.(DeadPage).Jobs, 1)
	require.Equal(t, dead, v.(DeadPage).Jobs[0].Job.ID)
	require.Empty(t, dst.fetch(1, "work4"), "the queue stays paused")
	dst.advance(time.Hour)
	require.Equal(t, uint32(2), dst.one(&PromoteOp{}).Count, "the retrying and the scheduled job")
	require.Len(t, dst.fetch(1, "work2"), 1)

	// The unique key is held again by the restored job.
	dup := dst.one(&EnqueueOp{Job: Job{ID: dst.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{UniqueKey: "u1"}}})
	require.True(t, dup.Existing)
	require.Equal(t, pending, dup.JobID)

	// Queue settings, schedules and batches.
	qs, err := dst.sm.Lookup(ListQueuesQuery{})
	require.NoError(t, err)
	cfg := map[string]QueueConfig{}
	for _, q := range qs.([]QueueInfo) {
		cfg[q.Name] = q.Config
	}
	require.Equal(t, QueueConfig{MaxConcurrency: 3, RateLimit: 10, RateWindowMs: 1000}, cfg["q"])
	require.True(t, cfg["work4"].Paused)
	sv, err := dst.sm.Lookup(SchedulesQuery{})
	require.NoError(t, err)
	require.Len(t, sv.([]Schedule), 1)
	ss, ds := src.schedules(), sv.([]Schedule)[0]
	require.Equal(t, ss[0].CreatedAt, ds.CreatedAt)
	require.Equal(t, ss[0].Payload, ds.Payload)
	bv, err := dst.sm.Lookup(BatchQuery{ID: "batch_0_B"})
	require.NoError(t, err)
	require.Equal(t, uint32(1), bv.(*Batch).Succeeded)
	require.Equal(t, StatusOK, dst.one(&BatchDoneOp{BatchID: "batch_0_B", JobID: completed, OK: true}).Status)
	bv, _ = dst.sm.Lookup(BatchQuery{ID: "batch_0_B"})
	require.Equal(t, uint32(1), bv.(*Batch).Succeeded, "a job already counted is not counted twice")

	// Importing again changes nothing and says which records exist.
	before := again.dump()
	var recOps []Op
	for _, op := range ops {
		if _, ok := op.(*ImportOp); ok {
			recOps = append(recOps, op)
		}
	}
	for _, r := range again.apply(recOps...) {
		require.Equal(t, StatusConflict, r.Status)
		require.True(t, r.Existing)
		require.Contains(t, r.Message, "exists")
	}
	after := again.dump()
	require.Equal(t, len(before)+1, len(after), "only the entry's dedup record was added")
}

func (tb *testBundle) schedules() []Schedule {
	v, err := tb.sm.Lookup(SchedulesQuery{})
	require.NoError(tb.t, err)
	return v.([]Schedule)
}

func TestImportOpRoundTripAndRefusals(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	op := &ImportOp{Job: &JobExport{View: JobView{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: DefaultJobOptions()},
		State: JobState{State: StateDead, CompletedAt: 5}, Errors: []JobError{{Attempt: 1, Error: "x"}}}}}
	e, err := DecodeEntry(tb.entry(op))
	require.NoError(t, err)
	require.Equal(t, op.Job.View.Job.ID, e.Ops[0].(*ImportOp).Job.View.Job.ID)
	require.Equal(t, op.Job.View.Errors, e.Ops[0].(*ImportOp).Job.View.Errors)

	bad := *op.Job
	bad.View.State.State = 42
	require.Equal(t, StatusInvalid, tb.one(&ImportOp{Job: &bad}).Status)
	_, err = DecodeEntry(tb.entry(&ImportOp{}))
	require.Error(t, err, "an import of nothing does not decode")
	require.Equal(t, StatusInvalid, tb.one(&ImportOp{Schedule: &Schedule{ID: "sched_0_X", Queue: "q", Cron: "nope"}}).Status)
	require.Nil(t, tb.get(op.Job.View.Job.ID))
}
