package statemachine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// wireRoutingScores is testdata/wire/routing-scores-v1.txt: model routing
// and scores as their first release wrote them.
const wireRoutingScores = "testdata/wire/routing-scores-v1.txt"

func routedJobV1() Job {
	j := minJobV1()
	j.Routing = &Routing{Strategy: RouteLowestCost, Models: []string{"big", "small"}, PriceNanos: []int64{3e9, 25e7}}
	return j
}

func routedStateV1() JobState {
	return JobState{State: StatePending, Attempt: 2, Errors: 1, LastError: "503", RouteIndex: 1, RouteFallbacks: 1, ScoreKeys: 2}
}

func scoreRecordV1() ScoreRecord {
	return ScoreRecord{N: 1, Queue: "q", At: 1_770_000_000_000_000_000,
		Score: Score{Scorer: "human:ann", Comment: "ok", Dims: []ScoreDim{{Name: "accuracy", Value: 0.92}, {Name: "tone", Value: -1}}}}
}

func routingOpsV1() []Op {
	v := JobView{Job: routedJobV1(), State: routedStateV1(), Errors: []JobError{}, Scores: []ScoreRecord{scoreRecordV1()}}
	return []Op{
		&EnqueueOp{Job: routedJobV1()},
		&FailOp{JobID: "job_0_01JEEEEEEEEEEEEEEEEEEEEEEE", Error: "503", ProviderError: true},
		&ScoreOp{JobID: "job_0_01JEEEEEEEEEEEEEEEEEEEEEEE", Score: scoreRecordV1().Score},
		&MoveInOp{v},
	}
}

func wireRecordsRoutingScores() map[string][]byte {
	j, st, sc := routedJobV1(), routedStateV1(), scoreRecordV1()
	e := Entry{ID: NewEntryID(1_770_000_000_000_000_000, 12), Now: 1_770_000_000_000_000_001, Ops: routingOpsV1()}
	return map[string][]byte{"job": j.appendTo(nil), "state": st.appendTo(nil), "score": sc.appendTo(nil), "routing.entry": e.Encode(nil)}
}

// TestWireFixtureRoutingScores: routed jobs, their states, score records
// and the ops that carry them keep decoding to the same values and
// encoding to the same bytes.
func TestWireFixtureRoutingScores(t *testing.T) {
	t.Parallel()
	old := checkWireFixture(t, wireRoutingScores, "# Model routing and scores as their first release wrote them.\n"+
		"# Frozen: never regenerate. Values: compat_routing_test.go.\n", wireRecordsRoutingScores())
	requireDecodes(t, old["job"], routedJobV1())
	requireDecodes(t, old["state"], routedStateV1())
	requireDecodes(t, old["score"], scoreRecordV1())
	require.Equal(t, routingOpsV1(), decodeWireOps(t, old["routing.entry"]))
}
