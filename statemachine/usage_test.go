package statemachine

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func usageOf(in, out, cost int64, model string) *Usage {
	return &Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: in / 10, Model: model, Provider: "fake", CostNanos: cost, LatencyMs: 5}
}

// TestUsageHeartbeatsAndAck: heartbeat usage is cumulative per attempt
// (each report replaces the attempt's heartbeat record), an ack's and a
// fail's usage are records of their own, and a retried attempt's
// heartbeats start a new record; the job's total and the queue's day
// follow exactly.
func TestUsageHeartbeatsAndAck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("llm", PriorityNormal, func(j *Job) { j.MaxRetries = 3; j.Backoff = BackoffNone })
	require.Len(t, tb.fetch(1, "llm"), 1)

	hb := func(u *Usage) Result {
		return tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Attempt: 1, Usage: u}}})
	}
	r := hb(usageOf(100, 10, 1_000, "m1"))
	require.Equal(t, []HeartbeatStatus{HeartbeatOK}, r.Heartbeats)
	require.Len(t, r.Usage, 1)
	require.Equal(t, int64(100), r.Usage[0].InputTokens)
	r = hb(usageOf(250, 30, 2_500, "m1")) // cumulative: 150 more
	require.Len(t, r.Usage, 1)
	require.Equal(t, int64(150), r.Usage[0].InputTokens, "the change, not the report")
	require.Equal(t, int64(1_500), r.Usage[0].CostNanos)
	v := tb.get(id)
	require.Len(t, v.Usage, 1, "one heartbeat record per attempt")
	require.Equal(t, int64(250), v.Usage[0].InputTokens)
	require.Equal(t, int64(2_500), v.State.CostNanos)

	// The attempt fails with some more usage; the next one heartbeats and acks.
	r = tb.one(&FailOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 1}, Error: "429", Usage: usageOf(5, 0, 50, "m1")})
	require.Equal(t, StatusOK, r.Status, r.Message)
	require.Equal(t, PhaseFail, r.Usage[0].Phase)
	require.Len(t, tb.fetch(1, "llm"), 1)
	require.Len(t, hb(usageOf(1, 1, 1, "m2")).Usage, 0, "attempt 1's lease is gone")
	r = tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Attempt: 2, Usage: usageOf(40, 4, 400, "m2")}}})
	require.Len(t, r.Usage, 1)
	r = tb.one(&AckOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 2}, Result: []byte(`{}`), Usage: usageOf(60, 6, 600, "m2")})
	require.Equal(t, StatusOK, r.Status, r.Message)

	v = tb.get(id)
	require.Len(t, v.Usage, 4)
	var phases []UsagePhase
	for i, rec := range v.Usage {
		require.Equal(t, uint32(i+1), rec.N)
		phases = append(phases, rec.Phase)
	}
	require.Equal(t, []UsagePhase{PhaseHeartbeat, PhaseFail, PhaseHeartbeat, PhaseAck}, phases)
	require.Equal(t, []uint32{1, 1, 2, 2}, []uint32{v.Usage[0].Attempt, v.Usage[1].Attempt, v.Usage[2].Attempt, v.Usage[3].Attempt})
	tot := Sum(v.Usage)
	require.Equal(t, int64(250+5+40+60), tot.InputTokens)
	require.Equal(t, int64(2_500+50+400+600), tot.CostNanos)
	require.Equal(t, tot.CostNanos, v.State.CostNanos)

	days, err := tb.sm.Lookup(UsageDayQuery{Day: UsageDay(tb.now.UnixNano())})
	require.NoError(t, err)
	require.Equal(t, []QueueUsage{{Queue: "llm", UsageTotals: UsageTotals{InputTokens: tot.InputTokens, OutputTokens: tot.OutputTokens,
		CacheReadTokens: tot.CacheReadTokens, CostNanos: tot.CostNanos, Reports: 4}}}, days)

	// Deleting the job deletes its records.
	require.Equal(t, StatusOK, tb.one(&DeleteJobOp{JobID: id}).Status)
	for _, kv := range tb.dump() {
		require.False(t, bytes.HasPrefix([]byte(kv[1:]), []byte(pfxUsage)), kv)
	}
}

// TestUsageRefusedChangesNothing: a report the state machine refuses (a
// negative count) leaves the job active with no record.
func TestUsageRefusedChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("llm", PriorityNormal)
	require.Len(t, tb.fetch(1, "llm"), 1)
	before := tb.dump()
	r := tb.one(&AckOp{JobID: id, Usage: &Usage{InputTokens: -1}})
	require.Equal(t, StatusInvalid, r.Status)
	after := tb.dump()
	// Only the dedup record and the applied index differ.
	require.Equal(t, len(before)+1, len(after))
	v := tb.get(id)
	require.Equal(t, StateActive, v.State.State)
	require.Empty(t, v.Usage)
}

// TestUsageDaysRollAndPrune: usage counts on the UTC day it is reported,
// and the sweep drops days past the retention.
func TestUsageDaysRollAndPrune(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.now = time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	id := tb.enqueue("q", PriorityNormal)
	tb.fetch(1, "q")
	tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Usage: usageOf(10, 1, 100, "m")}}})
	tb.advance(2 * time.Minute) // the next UTC day
	tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Usage: usageOf(30, 3, 300, "m")}}})
	day := func(ts time.Time) []QueueUsage {
		v, err := tb.sm.Lookup(UsageDayQuery{Day: UsageDay(ts.UnixNano())})
		require.NoError(t, err)
		return v.([]QueueUsage)
	}
	require.Equal(t, int64(100), day(tb.now.Add(-time.Hour))[0].CostNanos)
	require.Equal(t, int64(200), day(tb.now)[0].CostNanos, "the change lands on the day it is reported")
	require.Equal(t, int64(0), day(tb.now)[0].Reports, "a replaced report is counted once, on its first day")

	tb.advance(usageDayRetention * 24 * time.Hour)
	tb.one(&SweepOp{})
	require.Len(t, day(tb.now.Add(-usageDayRetention*24*time.Hour)), 1, "the last day of the retention is kept")
	require.Empty(t, day(tb.now.Add(-(usageDayRetention+1)*24*time.Hour)), "the day before it is dropped")
}

// TestUsageMovesWithTheJob: a job moved to another shard takes its usage
// records along.
func TestUsageMovesWithTheJob(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal)
	tb.fetch(1, "q")
	tb.one(&AckOp{JobID: id, Usage: usageOf(7, 7, 70, "m")})
	out := tb.one(&MoveOutOp{JobID: id, NewID: "job_1_MOVED", Queue: "q2", Target: 1})
	require.Equal(t, StatusOK, out.Status, out.Message)
	v, err := tb.sm.Lookup(OutboxQuery{Limit: 10})
	require.NoError(t, err)
	recs := v.([]OutboxRecord)
	require.Len(t, recs, 1)
	in, ok := recs[0].Op.(*MoveInOp)
	require.True(t, ok)
	require.Len(t, in.Usage, 1)

	other := setup(t)
	require.Equal(t, StatusOK, other.one(in).Status)
	got := other.get("job_1_MOVED")
	require.Len(t, got.Usage, 1)
	require.Equal(t, int64(70), got.State.CostNanos)
	require.Equal(t, int64(7), got.Usage[0].InputTokens)
}

// TestAckNeedsSchemaCheck: an ack of a job with a result_schema applies
// only when the gateway says it validated the result; otherwise nothing
// changes and the job stays active.
func TestAckNeedsSchemaCheck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.ResultSchema = []byte(`{"type":"object"}`) })
	tb.fetch(1, "q")
	r := tb.one(&AckOp{JobID: id, Result: []byte(`{}`), Usage: usageOf(1, 1, 1, "m")})
	require.Equal(t, StatusSchemaRequired, r.Status)
	v := tb.get(id)
	require.Equal(t, StateActive, v.State.State)
	require.Empty(t, v.Usage)
	r = tb.one(&AckFetchOp{Ack: AckOp{JobID: id, Result: []byte(`{}`), SchemaChecked: true}, Fetch: FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 1}})
	require.Equal(t, StatusOK, r.Status, r.Message)
	require.Equal(t, StateCompleted, tb.get(id).State.State)
	require.Equal(t, []byte(`{"type":"object"}`), tb.get(id).Job.ResultSchema)
}
