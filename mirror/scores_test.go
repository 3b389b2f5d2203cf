package mirror

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

func dim(name string, v float64) statemachine.ScoreDim {
	return statemachine.ScoreDim{Name: name, Value: v}
}

func scoreRec(n uint32, queue, scorer string, at int64, dims ...statemachine.ScoreDim) statemachine.ScoreRecord {
	return statemachine.ScoreRecord{N: n, Queue: queue, At: at, Score: statemachine.Score{Scorer: scorer, Dims: dims}}
}

// TestMirrorScoreSummary: scores are summarised per dimension (mean,
// percentiles, count), filtered by period, queue, scorer and shard,
// grouped by a tag; a deleted job's scores go; a rebuild gives the same.
func TestMirrorScoreSummary(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	ctx := context.Background()
	a, b, c := view(1, "llm", "completed", `{}`), view(2, "llm", "completed", `{}`), view(3, "other", "completed", `{}`)
	a.Job.Tags = []byte(`{"prompt":"v1"}`)
	b.Job.Tags = []byte(`{"prompt":"v2"}`)
	c.Job.Tags = nil
	feed(t, m, 2,
		statemachine.JobChange{ID: a.Job.ID, Job: &a.Job, State: a.State, NewScores: []statemachine.ScoreRecord{
			scoreRec(0, "llm", "human", base, dim("accuracy", 0.5), dim("tone", 1)),
			scoreRec(1, "llm", "auto", base+1, dim("accuracy", 0.75))}},
		statemachine.JobChange{ID: b.Job.ID, Job: &b.Job, State: b.State, NewScores: []statemachine.ScoreRecord{scoreRec(0, "llm", "auto", base, dim("accuracy", 1))}},
		statemachine.JobChange{ID: c.Job.ID, Job: &c.Job, State: c.State, NewScores: []statemachine.ScoreRecord{scoreRec(0, "other", "auto", base-3600e9, dim("accuracy", 0.25))}})

	gs, err := m.ScoreSummary(ctx, ScoreFilter{Since: base - 7200e9})
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Nil(t, gs[0].Key)
	require.Equal(t, []string{"accuracy", "tone"}, []string{gs[0].Dims[0].Name, gs[0].Dims[1].Name})
	acc := gs[0].Dims[0]
	require.Equal(t, int64(4), acc.Count)
	require.Equal(t, []float64{0.25, 0.5, 0.75, 1}, acc.Samples)
	require.InDelta(t, 0.625, acc.Mean(), 1e-12)
	require.Equal(t, 0.5, acc.Quantile(0.5))
	require.Equal(t, 0.25, acc.Quantile(0.05))

	gs, err = m.ScoreSummary(ctx, ScoreFilter{Since: base - 60e9, Queue: "llm", Scorer: "auto"})
	require.NoError(t, err)
	require.Equal(t, []float64{0.75, 1}, gs[0].Dims[0].Samples)
	require.Len(t, gs[0].Dims, 1)

	gs, err = m.ScoreSummary(ctx, ScoreFilter{Since: 0, TagKey: "prompt"})
	require.NoError(t, err)
	require.Len(t, gs, 3)
	require.Equal(t, "v1", *gs[0].Key)
	require.Equal(t, []float64{0.5, 0.75}, gs[0].Dims[0].Samples)
	require.Equal(t, "v2", *gs[1].Key)
	require.Nil(t, gs[2].Key, "the jobs without the tag")

	_, err = m.ScoreSummary(ctx, ScoreFilter{TagKey: `a"b`})
	require.ErrorIs(t, err, ErrBadFilter)
	gs, err = m.ScoreSummary(ctx, ScoreFilter{Shards: []int{1}})
	require.NoError(t, err)
	require.Empty(t, gs, "shard 1 holds nothing")

	feed(t, m, 3, statemachine.JobChange{ID: a.Job.ID, Deleted: true})
	gs, err = m.ScoreSummary(ctx, ScoreFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(2), gs[0].Dims[0].Count)

	// A mirror rebuilt from Pebble summarises the same.
	b.Scores = []statemachine.ScoreRecord{scoreRec(0, "llm", "auto", base, dim("accuracy", 1))}
	c.Scores = []statemachine.ScoreRecord{scoreRec(0, "other", "auto", base-3600e9, dim("accuracy", 0.25))}
	r, err := Open(Config{Path: filepath.Join(t.TempDir(), "mirror.db"), Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	require.NoError(t, r.Start(fakeSource{jobs: []statemachine.JobView{*b, *c}}))
	r.RequestRebuild()
	waitCtx, cancel := context.WithTimeout(ctx, 10e9)
	defer cancel()
	require.NoError(t, r.Caught(waitCtx))
	gs2, err := r.ScoreSummary(ctx, ScoreFilter{})
	require.NoError(t, err)
	require.Equal(t, gs, gs2)
}

// TestScoreSketchMerge: small sets merge exactly; large ones keep the
// percentiles within a few ranks of the exact ones, whatever the split.
func TestScoreSketchMerge(t *testing.T) {
	t.Parallel()
	a, b := sketch("x", []float64{1, 3}), sketch("x", []float64{2, 4, 5})
	MergeScoreDims(&a, &b)
	require.Equal(t, []float64{1, 2, 3, 4, 5}, a.Samples)
	require.Equal(t, int64(5), a.Count)
	require.Equal(t, 3.0, a.Quantile(0.5))

	rnd := rand.New(rand.NewPCG(1, 2))
	var all []float64
	var parts []ScoreDim
	for _, n := range []int{3000, 700, 40, 5000} {
		vals := make([]float64, n)
		for i := range vals {
			vals[i] = rnd.Float64()
		}
		all = append(all, vals...)
		slices.Sort(vals)
		parts = append(parts, sketch("x", vals))
	}
	merged := parts[0]
	for i := 1; i < len(parts); i++ {
		MergeScoreDims(&merged, &parts[i])
	}
	slices.Sort(all)
	require.Equal(t, int64(len(all)), merged.Count)
	require.LessOrEqual(t, len(merged.Samples), ScoreSketchSize)
	for _, q := range []float64{0.05, 0.5, 0.95} {
		exact := all[int(q*float64(len(all)))-1]
		// Uniform values: a rank error of 1 % of the count is 0.01 in value.
		require.InDelta(t, exact, merged.Quantile(q), 0.01, "q=%v", q)
	}
}
