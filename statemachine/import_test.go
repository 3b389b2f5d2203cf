package statemachine

import (
	"math/rand/v2"
	"strings"
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
	require.Equal(tb.t, len(out), n.Queues+n.Schedules+n.Jobs+n.Batches+n.Caches+n.UsageDays)
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

// TestRandomLogImports: the random op log of the determinism tests
// imports every record kind, and some of the imports write.
func TestRandomLogImports(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.rnd = rand.New(rand.NewPCG(1, 7919))
	randomLog(tb, 600)
	kinds := map[string]int{}
	for _, cmd := range tb.log {
		e, err := DecodeEntry(cmd)
		require.NoError(t, err)
		for _, op := range e.Ops {
			if o, ok := op.(*ImportOp); ok {
				switch {
				case o.Job != nil && len(o.Job.View.Usage) > 0:
					kinds["job with usage"]++
				case o.Job != nil:
					kinds["job"]++
				case o.Budget != nil:
					kinds["budget"]++
				case o.Cache != nil:
					kinds["cache"]++
				case o.UsageDay != nil:
					kinds["usage day"]++
				}
			}
		}
	}
	for _, k := range []string{"job with usage", "budget", "cache", "usage day"} {
		require.Positive(t, kinds[k], k)
	}
}

// TestStateMachineExportImportAIRecords: an export carries a job's usage
// records, scores, routing and cache options, the result-cache entries,
// the queues' daily usage totals and (Budgets) the budgets with their
// daily spends; importing them into a fresh shard brings each back as it
// was: the job's cost and counts follow its records, the cache serves a
// hit, the budget's spend counts on the same UTC day, the route continues
// where it was. Two fresh shards given the same imports end alike.
func TestStateMachineExportImportAIRecords(t *testing.T) {
	t.Parallel()
	src := setup(t)
	src.now = time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC)
	require.Equal(t, StatusOK, src.one(&SetBudgetOp{Budget: Budget{Queue: "llm", DailyNanos: 5e9, PerJobNanos: 2e9, OnExceed: BudgetActionHold}}).Status)
	require.Equal(t, StatusOK, src.one(&SetBudgetOp{Budget: Budget{Namespace: "acme", TagKey: "t", TagValue: "x", DailyNanos: 1e9, OnExceed: BudgetActionReject}}).Status)

	// A cached job: heartbeat and ack usage, a cache entry, two scores.
	cachedJob := src.enqueue("llm", PriorityNormal, func(j *Job) {
		j.CacheKey, j.CacheTTLms, j.ResultSchema = "k1", time.Hour.Milliseconds(), []byte(`{"type":"object"}`)
	})
	require.Len(t, src.fetch(1, "llm"), 1)
	hb := src.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: cachedJob, Attempt: 1, Usage: usageOf(100, 5, 3e8, "m1")}}})
	require.Equal(t, HeartbeatOK, hb.Heartbeats[0])
	require.Equal(t, StatusOK, src.one(&AckOp{JobID: cachedJob, Result: []byte(`{"a":1}`), Usage: usageOf(50, 20, 2e8, "m1"), SchemaChecked: true}).Status)
	for _, s := range []Score{{Scorer: "ann", Dims: []ScoreDim{{Name: "accuracy", Value: 0.75}, {Name: "tone", Value: -1}}}, {Scorer: "bob", Comment: "ok", Dims: []ScoreDim{{Name: "accuracy", Value: 1}}}} {
		require.Equal(t, StatusOK, src.one(&ScoreOp{JobID: cachedJob, Score: s}).Status)
	}
	// A routed job moved to its second model by a provider error.
	routed := src.enqueue("llm", PriorityNormal, func(j *Job) {
		j.Routing = &Routing{Strategy: RouteFallbackOnError, Models: []string{"big", "small", "tiny"}}
	})
	require.Len(t, src.fetch(1, "llm"), 1)
	require.Equal(t, StatePending, src.one(&FailOp{JobID: routed, Error: "503", ProviderError: true, Usage: usageOf(10, 0, 1e8, "big")}).State)
	src.advance(time.Minute)

	srcJob, srcRouted := src.get(cachedJob), src.get(routed)
	require.Len(t, srcJob.Usage, 2)
	require.Len(t, srcJob.Scores, 2)
	require.Equal(t, uint32(1), srcRouted.State.RouteIndex)
	recs := append(src.exportAll(false), src.exportAll(true)...)
	var budgets []*BudgetExport
	v, err := src.sm.Lookup(ExportQuery{Budgets: true, Namespace: func(ns string) bool { return ns == "" }, Emit: func(r ExportRecord) error {
		budgets = append(budgets, r.Budget)
		return nil
	}})
	require.NoError(t, err)
	require.Equal(t, 1, v.(ExportCounts).Budgets, "the namespace filter leaves acme's budget out")
	require.Equal(t, []DaySpend{{Day: UsageDay(src.now.UnixNano()), Nanos: 6e8}}, budgets[0].Spend)
	var caches, days int
	for _, r := range recs {
		if r.Cache != nil {
			caches++
			require.Equal(t, CacheExport{Queue: "llm", Key: "k1", Entry: CacheEntry{JobID: cachedJob, CompletedAt: src.now.Add(-time.Minute).UnixNano(),
				ExpiresAt: src.now.Add(59 * time.Minute).UnixNano(), CostNanos: 5e8}}, *r.Cache)
		}
		if r.UsageDay != nil {
			days++
			require.Equal(t, "llm", r.UsageDay.Queue)
			require.Equal(t, int64(6e8), r.UsageDay.CostNanos)
			require.Equal(t, int64(3), r.UsageDay.Reports)
		}
	}
	require.Equal(t, 1, caches)
	require.Equal(t, 1, days)

	ops := importOps(recs)
	ops = append(ops, &ImportOp{Budget: budgets[0]})
	for _, r := range recs {
		if r.Cache != nil {
			ops = append(ops, &ImportOp{Cache: r.Cache})
		}
		if r.UsageDay != nil {
			ops = append(ops, &ImportOp{UsageDay: r.UsageDay})
		}
	}
	dst, again := setup(t), setup(t)
	for _, tb := range []*testBundle{dst, again} {
		tb.now = src.now.Add(time.Minute) // the same UTC day
		for _, r := range tb.apply(ops...) {
			require.Equal(t, StatusOK, r.Status, r.Message)
		}
	}
	require.Equal(t, dst.dump(), again.dump(), "deterministic")

	got := dst.get(cachedJob)
	require.Equal(t, srcJob.Usage, got.Usage)
	require.Equal(t, srcJob.Scores, got.Scores)
	require.Equal(t, srcJob.State.CostNanos, got.State.CostNanos)
	require.Equal(t, int64(5e8), got.State.CostNanos)
	require.Equal(t, srcJob.Job.JobOptions, got.Job.JobOptions)
	gotRouted := dst.get(routed)
	require.Equal(t, srcRouted.Job.Routing, gotRouted.Job.Routing)
	require.Equal(t, uint32(1), gotRouted.State.RouteIndex)
	require.Equal(t, uint32(1), gotRouted.State.RouteFallbacks)
	jobs := dst.fetch(1, "llm")
	require.Len(t, jobs, 1)
	require.Equal(t, routed, jobs[0].Job.ID)
	require.Equal(t, "small", jobs[0].Job.Routing.Target(jobs[0].State.RouteIndex), "the route goes on at its second model")

	bs := dst.budgets()
	require.Len(t, bs, 1)
	require.Equal(t, int64(6e8), bs[0].SpentNanos, "today's spend, on the same UTC day")
	dv, err := dst.sm.Lookup(UsageDayQuery{Day: UsageDay(dst.now.UnixNano())})
	require.NoError(t, err)
	require.Equal(t, int64(6e8), dv.([]QueueUsage)[0].CostNanos)

	// The cache entry serves a hit with the restored job's result.
	j := Job{ID: dst.newID(), Queue: "llm", Payload: []byte(`{}`), JobOptions: DefaultJobOptions()}
	j.CacheKey, j.CacheTTLms = "k1", time.Hour.Milliseconds()
	r := dst.one(&EnqueueOp{Job: j})
	require.Equal(t, StateCompleted, r.State)
	require.Equal(t, cachedJob, r.CachedFrom)
	require.Equal(t, int64(5e8), dst.get(j.ID).Job.SavedNanos)

	// Again: every record exists. An expired cache entry is not written.
	for _, r := range again.apply(ops[len(ops)-3:]...) {
		require.Equal(t, StatusConflict, r.Status)
		require.True(t, r.Existing, r.Message)
	}
	late := setup(t)
	late.now = src.now.Add(2 * time.Hour)
	exp := *ops[len(ops)-2].(*ImportOp).Cache
	r = late.one(&ImportOp{Cache: &exp})
	require.Equal(t, StatusOK, r.Status)
	require.Zero(t, r.Count, "expired: not written")
	for _, kv := range late.dump() {
		require.NotContains(t, kv, "ck|")
	}
}

// TestImportOpRecordsRefused: bad usage, scores, budgets, cache entries
// and daily totals are refused and change nothing; an import of a job
// without usage or scores encodes as before the lists existed.
func TestImportOpRecordsRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	job := func(f func(v *JobView)) *ImportOp {
		v := JobView{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: DefaultJobOptions()}, State: JobState{State: StatePending}, Errors: []JobError{}}
		f(&v)
		return &ImportOp{Job: &JobExport{View: v}}
	}
	for name, op := range map[string]*ImportOp{
		"usage phase":  job(func(v *JobView) { v.Usage = []UsageRecord{{Phase: 9}} }),
		"usage cost":   job(func(v *JobView) { v.Usage = []UsageRecord{{Phase: PhaseAck, Usage: Usage{CostNanos: -1}}} }),
		"score":        job(func(v *JobView) { v.Scores = []ScoreRecord{{Score: Score{Scorer: "s", Dims: []ScoreDim{{Name: ""}}}}} }),
		"budget":       {Budget: &BudgetExport{Budget: Budget{Queue: "q", OnExceed: BudgetActionHold}}},
		"budget day":   {Budget: &BudgetExport{Budget: Budget{Queue: "q", DailyNanos: 1, OnExceed: BudgetActionHold}, Spend: []DaySpend{{Day: -1, Nanos: 1}}}},
		"cache queue":  {Cache: &CacheExport{Queue: "", Key: "k", Entry: CacheEntry{JobID: "j", ExpiresAt: 1 << 62}}},
		"cache key":    {Cache: &CacheExport{Queue: "q", Entry: CacheEntry{JobID: "j", ExpiresAt: 1 << 62}}},
		"usage totals": {UsageDay: &UsageDayExport{Day: 1 << 40, QueueUsage: QueueUsage{Queue: "q"}}},
	} {
		e, err := DecodeEntry(tb.entry(op))
		require.NoError(t, err, name)
		require.Equal(t, op, e.Ops[0], name)
		require.Equal(t, StatusInvalid, tb.one(op).Status, name)
	}
	for _, kv := range tb.dump() {
		require.True(t, strings.HasPrefix(kv, `"m|applied"`) || strings.HasPrefix(kv, `"rq|`), "only dedup records were written: %s", kv)
	}

	plain := job(func(*JobView) {})
	withLists := *plain.Job
	withLists.View.Usage = []UsageRecord{{N: 1, Phase: PhaseAck, Usage: Usage{Model: "m"}}}
	require.Equal(t, plain.appendBody(nil), (&ImportOp{Job: &withLists}).appendBody(nil)[:len(plain.appendBody(nil))],
		"the lists are appended after what an import wrote before")
}

// TestImportBehindTheScans: a job imported due, finished or expiring in
// the past, after the promote, purge and expiry scans have gone past that
// time, is still promoted, purged and expired (every replica alike, a
// restarted one or not).
func TestImportBehindTheScans(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.one(&PromoteOp{})
	tb.one(&SweepOp{PurgeBefore: tb.now.UnixNano()})
	past := tb.now.Add(-time.Hour).UnixNano()
	tb.advance(time.Second)
	imp := func(st JobState, f func(*Job)) string {
		j := Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: DefaultJobOptions(), CreatedAt: past}
		if f != nil {
			f(&j)
		}
		require.Equal(t, StatusOK, tb.one(&ImportOp{Job: &JobExport{View: JobView{Job: j, State: st}}}).Status)
		return j.ID
	}
	due := imp(JobState{State: StateRetrying, Attempt: 1, DueAt: past}, nil)
	done := imp(JobState{State: StateCompleted, CompletedAt: past}, nil)
	expiring := imp(JobState{State: StatePending}, func(j *Job) { j.ExpireAt = past })
	require.Equal(t, uint32(1), tb.one(&PromoteOp{}).Count)
	require.Equal(t, StatePending, tb.get(due).State.State)
	r := tb.one(&SweepOp{PurgeBefore: tb.now.UnixNano()})
	require.Nil(t, tb.get(done), "purged")
	require.Equal(t, StateDead, tb.get(expiring).State.State, "expired")
	require.Equal(t, uint32(2), r.Count)
}
