package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestAPIScores: scores posted to jobs appear in their documents and in
// the summary (per dimension: mean, p50, p5, count) and the comparison by
// tag; a bad score or an unknown job changes nothing.
func TestAPIScores(t *testing.T) {
	t.Parallel()
	q := uq("llm-scores")
	scorer := "eval-" + t.Name()
	var v1, v2 []string
	for i := range 4 {
		v1 = append(v1, enqueue(t, map[string]any{"queue": q, "tags": map[string]string{"prompt": "v1"}, "payload": map[string]any{"i": i}}))
		v2 = append(v2, enqueue(t, map[string]any{"queue": q, "tags": map[string]string{"prompt": "v2"}, "payload": map[string]any{"i": i}}))
	}
	score := func(id string, dims map[string]any) {
		t.Helper()
		code, body := call(t, "POST", "/api/v1/jobs/"+id+"/score", map[string]any{"dimensions": dims, "scorer": scorer, "comment": "ok"})
		require.Equal(t, 201, code, string(body))
		require.Equal(t, corvo.Scored{JobID: id, Status: "pending"}, mustJSON[corvo.Scored](t, body))
	}
	for i, id := range v1 {
		score(id, map[string]any{"accuracy": 0.5 + 0.1*float64(i)}) // .5 .6 .7 .8
	}
	for i, id := range v2 {
		score(id, map[string]any{"accuracy": 0.9, "tone": float64(i)}) // .9 ×4; tone 0 1 2 3
	}
	score(v1[0], map[string]any{"accuracy": 0.1}) // a second score of the same job

	code, body := call(t, "GET", "/api/v1/jobs/"+v1[0], nil)
	require.Equal(t, 200, code)
	doc := mustJSON[corvo.Job](t, body)
	require.Len(t, doc.Scores, 2)
	require.Equal(t, scorer, doc.Scores[0].Scorer)
	require.Equal(t, map[string]float64{"accuracy": 0.5}, doc.Scores[0].Dimensions)
	require.Equal(t, map[string]float64{"accuracy": 0.1}, doc.Scores[1].Dimensions)

	code, body = call(t, "GET", "/api/v1/scores/summary?period=24h&queue="+q+"&scorer="+scorer, nil)
	require.Equal(t, 200, code, string(body))
	sum := mustJSON[corvo.ScoresSummary](t, body)
	acc := sum.Dimensions["accuracy"]
	require.Equal(t, int64(9), acc.Count)
	require.InDelta(t, (0.1+0.5+0.6+0.7+0.8+4*0.9)/9, acc.Mean, 1e-9)
	require.Equal(t, 0.8, acc.P50, "the 5th of 9 sorted values")
	require.Equal(t, 0.1, acc.P5)
	require.Equal(t, corvo.ScoreStats{Mean: 1.5, P50: 1, P5: 0, Count: 4}, sum.Dimensions["tone"])

	code, body = call(t, "GET", "/api/v1/scores/compare?period=24h&group_by=tag:prompt&queue="+q, nil)
	require.Equal(t, 200, code, string(body))
	cmp := mustJSON[corvo.ScoresComparison](t, body)
	require.Len(t, cmp.Groups, 2)
	require.Equal(t, "v1", *cmp.Groups[0].Key)
	require.Equal(t, int64(5), cmp.Groups[0].Dimensions["accuracy"].Count)
	require.Equal(t, 0.6, cmp.Groups[0].Dimensions["accuracy"].P50)
	require.Equal(t, "v2", *cmp.Groups[1].Key)
	require.Equal(t, corvo.ScoreStats{Mean: 0.9, P50: 0.9, P5: 0.9, Count: 4}, cmp.Groups[1].Dimensions["accuracy"])

	for name, b := range map[string]any{
		"no scorer":        map[string]any{"dimensions": map[string]any{"a": 1}},
		"no dimensions":    map[string]any{"scorer": "s"},
		"not a number":     map[string]any{"scorer": "s", "dimensions": map[string]any{"a": "high"}},
		"out of range":     map[string]any{"scorer": "s", "dimensions": map[string]any{"a": 1e13}},
		"empty name":       map[string]any{"scorer": "s", "dimensions": map[string]any{"": 1}},
		"not an object":    `[1]`,
		"overflowing JSON": `{"scorer":"s","dimensions":{"a":1e999}}`,
	} {
		code, body := call(t, "POST", "/api/v1/jobs/"+v2[0]+"/score", b)
		require.Equal(t, 400, code, "%s: %s", name, body)
	}
	code, _ = call(t, "POST", "/api/v1/jobs/job_0_01KH630VS4806TTT36SZ4F6XQC/score", map[string]any{"scorer": "s", "dimensions": map[string]any{"a": 1}})
	require.Equal(t, 404, code)
	code, body = call(t, "GET", "/api/v1/jobs/"+v2[0], nil)
	require.Equal(t, 200, code)
	require.Len(t, mustJSON[corvo.Job](t, body).Scores, 1, "the refused scores stored nothing")

	for _, path := range []string{"/api/v1/scores/summary?period=1y", "/api/v1/scores/compare?group_by=queue", "/api/v1/scores/compare",
		"/api/v1/scores/summary?group_by=tag:x", `/api/v1/scores/compare?group_by=tag:a%22b`} {
		code, body := call(t, "GET", path, nil)
		require.Equal(t, 400, code, "%s: %s", path, body)
	}
}
