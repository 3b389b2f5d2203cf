package statemachine

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (tb *testBundle) budgets() []BudgetSpend {
	v, err := tb.sm.Lookup(BudgetsQuery{Day: UsageDay(tb.now.UnixNano())})
	require.NoError(tb.t, err)
	return v.([]BudgetSpend)
}

// TestBudgetVerdicts: an enqueue stamped hold enters held (reason
// budget) and an approve releases it; one stamped alert is pending and
// records a budget_exceeded event; a job with dependencies stays held for
// them.
func TestBudgetVerdicts(t *testing.T) {
	t.Parallel()
	tb, rec := setupEvents(t)
	enq := func(v BudgetVerdict, mut ...func(*Job)) (string, Result) {
		j := Job{ID: tb.newID(), Queue: "llm", Payload: []byte(`{}`), JobOptions: DefaultJobOptions()}
		for _, m := range mut {
			m(&j)
		}
		return j.ID, tb.one(&EnqueueOp{Job: j, Budget: v})
	}
	held, r := enq(BudgetHold)
	require.Equal(t, StateHeld, r.State)
	require.Equal(t, HoldBudget, tb.get(held).State.Reason)
	require.Empty(t, tb.fetch(1, "llm"), "a held job is not fetched")

	alerted, r := enq(BudgetAlert)
	require.Equal(t, StatePending, r.State)
	require.Equal(t, []string{"budget_exceeded/pending", "enqueued/pending"}, eventTypes(rec.events, alerted))

	dep, r := enq(BudgetHold, func(j *Job) { j.DependsOn = []Dep{{ID: alerted}} })
	require.Equal(t, StateHeld, r.State)
	require.Equal(t, HoldDependencies, tb.get(dep).State.Reason)

	require.Equal(t, StatusOK, tb.one(&ReleaseOp{JobID: held, Approve: true}).Status)
	got := tb.fetch(2, "llm")
	require.Len(t, got, 2)
	require.ElementsMatch(t, []string{held, alerted}, []string{got[0].Job.ID, got[1].Job.ID})
}

// TestBudgetSpendAndRollover: usage moves the day's spend of every budget
// with a daily limit that covers the job (queue, tag, global; not another
// namespace's), by the change a cumulative heartbeat makes; the next UTC
// day starts from zero at midnight of the entries' time; delete drops the
// budget and its spends, and a bad budget changes nothing.
func TestBudgetSpendAndRollover(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.now = time.Date(2026, 2, 11, 23, 59, 0, 0, time.UTC)
	set := func(b Budget) {
		r := tb.one(&SetBudgetOp{Budget: b})
		require.Equal(t, StatusOK, r.Status, r.Message)
	}
	set(Budget{Queue: "llm", DailyNanos: 5e9, OnExceed: BudgetActionHold})
	set(Budget{TagKey: "tenant", TagValue: "acme", DailyNanos: 5e9, OnExceed: BudgetActionReject})
	set(Budget{DailyNanos: 9e9, OnExceed: BudgetActionAlertOnly})
	set(Budget{Namespace: "other", DailyNanos: 9e9, OnExceed: BudgetActionAlertOnly})
	require.Equal(t, StatusInvalid, tb.one(&SetBudgetOp{Budget: Budget{Queue: "llm", OnExceed: BudgetActionHold}}).Status, "no limit")
	require.Equal(t, StatusInvalid, tb.one(&SetBudgetOp{Budget: Budget{Queue: "other/llm", DailyNanos: 1, OnExceed: BudgetActionHold}}).Status,
		"a queue of another namespace")

	spent := func() map[string]int64 {
		m := map[string]int64{}
		for _, b := range tb.budgets() {
			m[b.Namespace+"|"+b.Scope()] = b.SpentNanos
		}
		return m
	}
	acme := tb.enqueue("llm", PriorityNormal, func(j *Job) { j.Tags = []byte(`{"tenant":"acme"}`) })
	plain := tb.enqueue("other-q", PriorityNormal)
	require.Len(t, tb.fetch(2, "llm", "other-q"), 2)
	hb := func(id string, cost int64) {
		r := tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Attempt: 1, Usage: usageOf(1, 1, cost, "m")}}})
		require.Equal(t, HeartbeatOK, r.Heartbeats[0])
	}
	hb(acme, 1e9)
	hb(acme, 3e9) // cumulative: 2e9 more
	hb(plain, 1e9)
	require.Equal(t, map[string]int64{"|queue:llm": 3e9, "|tag:tenant=acme": 3e9, "|global": 4e9, "other|global": 0}, spent())

	// 23:59:30 → 00:00:30: the report lands on the new day.
	tb.advance(90 * time.Second)
	require.Equal(t, map[string]int64{"|queue:llm": 0, "|tag:tenant=acme": 0, "|global": 0, "other|global": 0}, spent(), "a new UTC day")
	hb(acme, 3.5e9)
	require.Equal(t, map[string]int64{"|queue:llm": 5e8, "|tag:tenant=acme": 5e8, "|global": 5e8, "other|global": 0}, spent())
	v, err := tb.sm.Lookup(BudgetsQuery{Day: UsageDay(tb.now.Add(-24 * time.Hour).UnixNano())})
	require.NoError(t, err)
	require.Equal(t, "global", v.([]BudgetSpend)[0].Scope())
	require.Equal(t, int64(4e9), v.([]BudgetSpend)[0].SpentNanos, "yesterday's spend is kept")

	require.Equal(t, StatusOK, tb.one(&SetBudgetOp{Budget: Budget{TagKey: "tenant", TagValue: "acme"}, Delete: true}).Status)
	require.Equal(t, StatusNotFound, tb.one(&SetBudgetOp{Budget: Budget{TagKey: "tenant", TagValue: "acme"}, Delete: true}).Status)
	require.Len(t, tb.budgets(), 3)
	for _, k := range tb.dump() {
		require.NotContains(t, k, "tag:tenant=acme", "the deleted budget's spends are gone")
	}
}

// TestBudgetPerJob: a heartbeat of a job whose cost is past a per-job
// budget covering it answers budget_exceeded (and extends the lease), on
// that heartbeat and every later one; a job under it, or not covered,
// gets ok. The budgets survive a reopen and a snapshot restore.
func TestBudgetPerJob(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.Equal(t, StatusOK, tb.one(&SetBudgetOp{Budget: Budget{TagKey: "tenant", TagValue: "acme", PerJobNanos: 2e9, OnExceed: BudgetActionHold}}).Status)
	over := tb.enqueue("llm", PriorityNormal, func(j *Job) { j.Tags = []byte(`{"tenant":"acme"}`) })
	other := tb.enqueue("llm", PriorityNormal, func(j *Job) { j.Tags = []byte(`{"tenant":"beta"}`) })
	require.Len(t, tb.fetch(2, "llm"), 2)
	hb := func(u *Usage) []HeartbeatStatus {
		return tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: over, Attempt: 1, Usage: u}, {JobID: other, Attempt: 1, Usage: u}}}).Heartbeats
	}
	require.Equal(t, []HeartbeatStatus{HeartbeatOK, HeartbeatOK}, hb(usageOf(1, 1, 2e9, "m")), "at the limit, not past it")
	require.Equal(t, []HeartbeatStatus{HeartbeatBudgetExceeded, HeartbeatOK}, hb(usageOf(1, 1, 2e9+1, "m")))
	lease := tb.get(over).State.LeaseExpiresAt
	tb.advance(time.Second)
	tb.reopen()
	require.Equal(t, []HeartbeatStatus{HeartbeatBudgetExceeded, HeartbeatOK}, hb(nil), "the next heartbeat too, after a reopen")
	require.Greater(t, tb.get(over).State.LeaseExpiresAt, lease, "the lease is extended")

	// A snapshot of this state restored into another state machine keeps
	// the budget.
	b := setup(t)
	restoreInto(t, tb, b)
	require.Equal(t, tb.budgets(), b.budgets())
	b.now = tb.now
	r := b.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: over, Attempt: 1}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatBudgetExceeded}, r.Heartbeats)
}

// restoreInto saves a snapshot of from and recovers to from it.
func restoreInto(t *testing.T, from, to *testBundle) {
	ctx, err := from.sm.PrepareSnapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, from.sm.SaveSnapshot(ctx, &buf, nil))
	require.NoError(t, to.sm.RecoverFromSnapshot(&buf, nil))
	to.index = to.sm.Applied()
}
