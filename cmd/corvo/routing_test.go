package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// fakeProvider is the test's LLM provider: whether a model answers is a
// pure function of the job and the attempt, so the test knows every
// model each job must be routed to.
type fakeProvider struct{}

// down: the primary model is always out; for every third job the others
// are out too until its fourth attempt, so its first round exhausts the
// list.
func (fakeProvider) down(job, attempt int, model string) bool {
	return model == "primary" || (job%3 == 0 && attempt <= 3)
}

// TestRoutingAndScoresLLMWorkload: jobs routed over three models on a
// 3-node cluster (six shards, one replica each) meet a fake provider
// whose primary model is out: each provider error moves the job to the
// next model at once, without using a retry; a job whose every model is
// out gets an ordinary retry and walks the list again from the first
// model; the job documents show the route taken. Scores posted to the
// jobs, tagged with two prompt versions, are summarised and compared by
// tag through every node and the CLI.
func TestRoutingAndScoresLLMWorkload(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	nodes, _ := newSpreadCluster(t)
	rt := router.New(6)
	var queues []string
	for i, seen := 0, map[int]bool{}; len(queues) < 3; i++ {
		q := fmt.Sprintf("llm.route%d", i)
		if sh := rt.ShardForQueue(q); !seen[sh] {
			seen[sh] = true
			queues = append(queues, q)
		}
	}
	provider := fakeProvider{}
	const jobs = 12
	ids := make([]string, jobs)
	wantAccuracy := map[string][]float64{}
	for i := range jobs {
		q := queues[i%len(queues)]
		code, body := do(t, "POST", nodes[i%len(nodes)].url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"i": i},
			"tags": map[string]string{"prompt": fmt.Sprint("v", 1+i%2)}, "max_retries": 3, "retry_backoff": "none",
			"routing": map[string]any{"prefer": "primary", "fallback": []string{"secondary", "tertiary"}}})
		require.Equal(t, 201, code, string(body))
		ids[i] = decode[corvo.Enqueued](t, body).JobID
	}
	for i, id := range ids {
		q := queues[i%len(queues)]
		worker := fmt.Sprintf("router-%d", i%3)
		var route []string
		for attempt := 1; ; attempt++ {
			via := nodes[(i+attempt)%len(nodes)]
			code, body := do(t, "POST", via.url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": worker, "timeout": 5})
			require.Equal(t, 200, code, string(body))
			f := decode[corvo.FetchedJob](t, body)
			require.Equal(t, id, f.JobID)
			require.Equal(t, attempt, f.Attempt)
			require.NotNil(t, f.Routing)
			route = append(route, f.Routing.Target)
			if !provider.down(i, attempt, f.Routing.Target) {
				code, body = do(t, "POST", via.url+"/api/v1/ack/"+id, map[string]any{"worker_id": worker, "attempt": attempt,
					"result": map[string]string{"model": f.Routing.Target}, "usage": corvo.Usage{InputTokens: 10, Model: f.Routing.Target, Provider: "fake"}})
				require.Equal(t, 200, code, string(body))
				break
			}
			code, body = do(t, "POST", via.url+"/api/v1/fail/"+id, map[string]any{"worker_id": worker, "attempt": attempt,
				"error": "fake provider: 503 " + f.Routing.Target + " unavailable", "provider_error": true})
			require.Equal(t, 200, code, string(body))
			fr := decode[corvo.FailResult](t, body)
			require.Equal(t, "retrying", fr.Status, "a provider error never kills a job with retries left")
			require.Less(t, attempt, 10, "the route must end")
		}
		wantRoute := []string{"primary", "secondary"}
		if i%3 == 0 {
			// The list exhausted, an ordinary retry starts again from the
			// first model.
			wantRoute = []string{"primary", "secondary", "tertiary", "primary", "secondary"}
		}
		require.Equal(t, wantRoute, route, "job %d", i)

		code, body := do(t, "GET", nodes[0].url+"/api/v1/jobs/"+id, nil)
		require.Equal(t, 200, code, string(body))
		doc := decode[corvo.Job](t, body)
		require.Equal(t, "completed", doc.State)
		require.NotNil(t, doc.Routing)
		require.Equal(t, "secondary", doc.Routing.Target)
		require.Equal(t, []string{"primary", "secondary", "tertiary"}, doc.Routing.Order)
		wantFallbacks := len(wantRoute) - 1
		if i%3 == 0 {
			wantFallbacks-- // the provider error that exhausted the list was an ordinary failure
		}
		require.Equal(t, wantFallbacks, doc.Routing.Fallbacks)
		require.Len(t, doc.Errors, len(wantRoute)-1)

		// Scores: accuracy by the job's prompt version, plus a second
		// score of every fourth job.
		acc := 0.5 + 0.1*float64(i%2) + 0.01*float64(i)
		scores := []float64{acc}
		if i%4 == 0 {
			scores = append(scores, acc/2)
		}
		for k, v := range scores {
			code, body := do(t, "POST", nodes[(i+k)%len(nodes)].url+"/api/v1/jobs/"+id+"/score", map[string]any{
				"dimensions": map[string]any{"accuracy": v, "fluency": 1}, "scorer": "eval:v1"})
			require.Equal(t, 201, code, string(body))
			tag := fmt.Sprint("v", 1+i%2)
			wantAccuracy[tag] = append(wantAccuracy[tag], v)
		}
	}

	// Search finds the jobs by their current model. The part for a shard
	// that moved to its node during the run answers from a mirror still
	// filling from the shard's snapshot: it catches up.

	require.Eventually(t, func() bool {
		code, body := do(t, "POST", nodes[1].url+"/api/v1/jobs/search", map[string]any{"route_target": "secondary", "queue": queues[0]})
		require.Equal(t, 200, code, string(body))
		return len(decode[corvo.SearchPage](t, body).Jobs) == jobs/len(queues)
	}, 30*time.Second, 50*time.Millisecond, "the search by route_target")

	stats := func(vals []float64) corvo.ScoreStats {
		s := append([]float64(nil), vals...)
		slices.Sort(s)
		var sum float64
		for _, v := range s {
			sum += v
		}
		rank := func(q float64) float64 {
			r := int(q*float64(len(s)) + 0.999999999)
			return s[max(r, 1)-1]
		}
		return corvo.ScoreStats{Mean: sum / float64(len(s)), P50: rank(0.5), P5: rank(0.05), Count: int64(len(s))}
	}
	var all []float64
	for _, v := range wantAccuracy {
		all = append(all, v...)
	}
	for _, via := range nodes {
		code, body := do(t, "GET", via.url+"/api/v1/scores/summary?period=24h&scorer=eval:v1", nil)
		require.Equal(t, 200, code, string(body))
		s := decode[corvo.ScoresSummary](t, body)
		want := stats(all)
		got := s.Dimensions["accuracy"]
		require.InDelta(t, want.Mean, got.Mean, 1e-12)
		got.Mean = want.Mean
		require.Equal(t, want, got)
		require.Equal(t, corvo.ScoreStats{Mean: 1, P50: 1, P5: 1, Count: int64(len(all))}, s.Dimensions["fluency"])

		code, body = do(t, "GET", via.url+"/api/v1/scores/compare?period=24h&group_by=tag:prompt", nil)
		require.Equal(t, 200, code, string(body))
		c := decode[corvo.ScoresComparison](t, body)
		require.Len(t, c.Groups, 2)
		for _, g := range c.Groups {
			require.NotNil(t, g.Key)
			want := stats(wantAccuracy[*g.Key])
			got := g.Dimensions["accuracy"]
			require.InDelta(t, want.Mean, got.Mean, 1e-12, *g.Key)
			got.Mean = want.Mean
			require.Equal(t, want, got, *g.Key)
		}
	}
	table, code := runCLIKey(t, nodes[2].url, testAdminKey, "scores", "compare", "--group-by", "tag:prompt", "--period", "24h")
	require.Equal(t, 0, code, table)
	require.True(t, strings.Contains(table, "v1") && strings.Contains(table, "v2") && strings.Contains(table, "accuracy"), table)
	out, code := runCLIKey(t, nodes[0].url, testAdminKey, "scores", "summary", "--period", "24h", "-o", "json")
	require.Equal(t, 0, code, out)
	require.Equal(t, int64(len(all)), decode[corvo.ScoresSummary](t, []byte(out)).Dimensions["accuracy"].Count)
}
