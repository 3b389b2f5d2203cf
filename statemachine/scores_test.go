package statemachine

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScores: scores are stored per job, several per job, in order, with
// the job's queue and the time; they reach the change events; a bad score
// or an unknown job changes nothing; a deleted job's scores go with it;
// a job moved to another shard carries them.
func TestScores(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("llm", PriorityNormal)
	r := tb.one(&ScoreOp{JobID: id, Score: Score{Scorer: "human:ann", Comment: "good", Dims: []ScoreDim{{"accuracy", 0.9}, {"relevance", 0.75}}}})
	require.Equal(t, StatusOK, r.Status)
	tb.advance(1e9)
	r = tb.one(&ScoreOp{JobID: id, Score: Score{Scorer: "auto:eval", Dims: []ScoreDim{{"accuracy", 0.5}}}})
	require.Equal(t, StatusOK, r.Status)
	v := tb.get(id)
	require.Equal(t, uint32(2), v.State.ScoreKeys)
	require.Len(t, v.Scores, 2)
	require.Equal(t, ScoreRecord{N: 0, Queue: "llm", At: tb.now.Add(-1e9).UnixNano(),
		Score: Score{Scorer: "human:ann", Comment: "good", Dims: []ScoreDim{{"accuracy", 0.9}, {"relevance", 0.75}}}}, v.Scores[0])
	require.Equal(t, uint32(1), v.Scores[1].N)
	require.Equal(t, StatePending, v.State.State, "a score changes no state")

	state := func() []string {
		var out []string
		for _, kv := range tb.dump() {
			if !strings.Contains(kv, "rq|") && !strings.Contains(kv, "m|applied") {
				out = append(out, kv)
			}
		}
		return out
	}
	before := state()
	for name, s := range map[string]Score{
		"no scorer":     {Dims: []ScoreDim{{"a", 1}}},
		"no dimensions": {Scorer: "s"},
		"NaN":           {Scorer: "s", Dims: []ScoreDim{{"a", math.NaN()}}},
		"Inf":           {Scorer: "s", Dims: []ScoreDim{{"a", math.Inf(1)}}},
		"huge":          {Scorer: "s", Dims: []ScoreDim{{"a", 1e13}}},
		"empty name":    {Scorer: "s", Dims: []ScoreDim{{"", 1}}},
		"long name":     {Scorer: "s", Dims: []ScoreDim{{strings.Repeat("x", MaxScoreName+1), 1}}},
		"twice":         {Scorer: "s", Dims: []ScoreDim{{"a", 1}, {"a", 2}}},
		"long comment":  {Scorer: "s", Comment: strings.Repeat("x", MaxScoreComment+1), Dims: []ScoreDim{{"a", 1}}},
	} {
		require.Equal(t, StatusInvalid, tb.one(&ScoreOp{JobID: id, Score: s}).Status, name)
	}
	require.Equal(t, StatusNotFound, tb.one(&ScoreOp{JobID: "job_0_nope", Score: Score{Scorer: "s", Dims: []ScoreDim{{"a", 1}}}}).Status)
	require.Equal(t, before, state(), "refused scores write nothing but the entries' dedup records")

	require.Equal(t, StatusOK, tb.one(&DeleteJobOp{JobID: id}).Status)
	for _, kv := range tb.dump() {
		require.NotContains(t, kv, "sj|", "a deleted job's scores go with it")
	}
}

func TestScoreOpRoundTrip(t *testing.T) {
	t.Parallel()
	e := Entry{Ops: []Op{&ScoreOp{JobID: "job_0_x", Score: Score{Scorer: "s", Comment: "c", Dims: []ScoreDim{{"a", -0.25}, {"b", 1e9}}}},
		&FailOp{JobID: "job_0_x", Error: "e", ProviderError: true}}}
	de, err := DecodeEntry(e.Encode(nil))
	require.NoError(t, err)
	require.Equal(t, e.Ops, de.Ops)
	// A fail without the flag is byte-identical to what earlier builds wrote.
	plain := (&FailOp{JobID: "job_0_x", Error: "e"}).appendBody(nil)
	flagged := (&FailOp{JobID: "job_0_x", Error: "e", ProviderError: true}).appendBody(nil)
	require.Equal(t, plain, flagged[:len(plain)])
	require.Len(t, flagged, len(plain)+2)
}

// TestScoresMoveWithTheirJob: a job moved to another shard lands with
// its scores.
func TestScoresMoveWithTheirJob(t *testing.T) {
	t.Parallel()
	src := setup(t)
	id := src.enqueue("llm", PriorityNormal)
	require.Equal(t, StatusOK, src.one(&ScoreOp{JobID: id, Score: Score{Scorer: "s", Dims: []ScoreDim{{"a", 0.5}}}}).Status)
	v := src.get(id)
	in := &MoveInOp{JobView{Job: v.Job, State: v.State, Scores: v.Scores}}
	in.Job.ID = "job_1_moved"
	dec, err := DecodeEntry((&Entry{Ops: []Op{in}}).Encode(nil))
	require.NoError(t, err)
	dst := setup(t)
	require.Equal(t, StatusOK, dst.one(dec.Ops[0]).Status)
	got := dst.get("job_1_moved")
	require.Equal(t, uint32(1), got.State.ScoreKeys)
	require.Equal(t, v.Scores, got.Scores)
}

// TestScoresPerJobCap: a job takes MaxScoresPerJob scores, then refuses
// more with a conflict.
func TestScoresPerJobCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("llm", PriorityNormal)
	ops := make([]Op, MaxScoresPerJob)
	for i := range ops {
		ops[i] = &ScoreOp{JobID: id, Score: Score{Scorer: "s", Dims: []ScoreDim{{Name: "a", Value: float64(i)}}}}
	}
	for _, r := range tb.apply(ops...) {
		require.Equal(t, StatusOK, r.Status)
	}
	r := tb.one(&ScoreOp{JobID: id, Score: Score{Scorer: "s", Dims: []ScoreDim{{Name: "a", Value: 1}}}})
	require.Equal(t, StatusConflict, r.Status)
	require.Len(t, tb.get(id).Scores, MaxScoresPerJob)
}
