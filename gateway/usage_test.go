package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

func usageGroup(t *testing.T, groupBy, key string) *corvo.UsageGroup {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/usage/summary?period=24h&group_by="+groupBy, nil)
	require.Equal(t, 200, code, string(body))
	s := mustJSON[corvo.UsageSummary](t, body)
	require.NotNil(t, s.GroupBy)
	for i := range s.Groups {
		if g := &s.Groups[i]; g.Key != nil && *g.Key == key {
			return g
		}
	}
	return nil
}

// TestAPIUsage: usage on heartbeats (cumulative per attempt), a fail, an
// ack and an ack batch item adds up exactly in the job document, the
// summary (by queue, model, provider and tag) and the metrics.
func TestAPIUsage(t *testing.T) {
	t.Parallel()
	q := uq("llm-usage")
	tenant := uq("tenant")
	model := uq("model")
	id := enqueue(t, map[string]any{"queue": q, "tags": map[string]string{"tenant": tenant}, "retry_backoff": "none"})
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	worker := "w-" + t.Name()

	hb := func(attempt int, in, out int64, cost float64) {
		t.Helper()
		code, body := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": worker, "jobs": map[string]any{
			id: map[string]any{"attempt": attempt, "usage": map[string]any{"input_tokens": in, "output_tokens": out, "model": model, "provider": "fake", "cost_usd": cost}}}})
		require.Equal(t, 200, code, string(body))
	}
	hb(1, 1000, 100, 0.01)
	hb(1, 2500, 300, 0.025) // cumulative: replaces the report above
	code, body := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"worker_id": worker, "attempt": 1, "error": "rate limited",
		"usage": map[string]any{"input_tokens": 10, "model": model, "provider": "fake", "cost_usd": 0.0001}})
	require.Equal(t, 200, code, string(body))
	_, ok = fetchOne(t, 1, q)
	require.True(t, ok)
	hb(2, 400, 40, 0.004)
	code, body = call(t, "POST", "/api/v1/ack/"+id, map[string]any{"worker_id": worker, "attempt": 2, "result": map[string]any{"ok": true},
		"usage": map[string]any{"input_tokens": 600, "output_tokens": 60, "cache_read_tokens": 5, "model": model, "provider": "fake", "cost_usd": 0.006, "latency_ms": 900}})
	require.Equal(t, 200, code, string(body))

	// A second job, acked in a batch.
	id2 := enqueue(t, map[string]any{"queue": q, "tags": map[string]string{"tenant": tenant}})
	_, ok = fetchOne(t, 1, q)
	require.True(t, ok)
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": []map[string]any{{"job_id": id2, "worker_id": worker,
		"usage": map[string]any{"input_tokens": 7, "output_tokens": 3, "model": model, "provider": "fake", "cost_usd": 0.0000007}}}})
	require.Equal(t, 200, code, string(body))

	code, body = call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	doc := mustJSON[corvo.Job](t, body)
	require.NotNil(t, doc.Usage)
	require.Equal(t, int64(2500+10+400+600), doc.Usage.InputTokens)
	require.Equal(t, int64(300+40+60), doc.Usage.OutputTokens)
	require.Equal(t, int64(5), doc.Usage.CacheReadTokens)
	require.Equal(t, 0.0351, doc.Usage.CostUSD, "exact: costs add as integers of 1e-9 USD")
	var phases []string
	for _, r := range doc.Usage.Reports {
		phases = append(phases, fmt.Sprint(r.Attempt, r.Phase))
	}
	require.Equal(t, []string{"1heartbeat", "1fail", "2heartbeat", "2ack"}, phases)

	for _, by := range []struct{ groupBy, key string }{{"queue", q}, {"model", model}, {"tag:tenant", tenant}} {
		g := usageGroup(t, by.groupBy, by.key)
		require.NotNil(t, g, by.groupBy)
		require.Equal(t, int64(3510+7), g.InputTokens, by.groupBy)
		require.Equal(t, int64(403), g.OutputTokens, by.groupBy)
		require.Equal(t, 0.0351007, g.CostUSD, by.groupBy)
		require.Equal(t, int64(2), g.Jobs, by.groupBy)
		require.Equal(t, int64(5), g.Reports, by.groupBy)
		require.Equal(t, 0.01755035, g.CostPerJobUSD, by.groupBy)
	}

	code, body = call(t, "GET", "/api/v1/metrics", nil)
	require.Equal(t, 200, code)
	labels := `{queue="` + q + `",model="` + model + `",provider="fake"}`
	for _, want := range []string{
		"corvo_usage_input_tokens_total" + labels + " 3517",
		"corvo_usage_output_tokens_total" + labels + " 403",
		"corvo_usage_cache_read_tokens_total" + labels + " 5",
		"corvo_usage_cost_usd_total" + labels + " 0.0351007",
		"corvo_usage_reports_total" + labels + " 6", // every report received, the replaced heartbeat too
	} {
		require.Contains(t, string(body), want+"\n")
	}
}

// TestAPIUsageBadInput: a negative count or cost, an unknown field, a
// wrong type: 400, and the job is left as it was (still active, no usage).
func TestAPIUsageBadInput(t *testing.T) {
	t.Parallel()
	q := uq("llm-bad")
	id := enqueue(t, map[string]any{"queue": q})
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	for _, u := range []string{`{"input_tokens":-1}`, `{"cost_usd":-0.5}`, `{"cost_usd":2000000}`, `{"tokens":5}`, `{"input_tokens":1.5}`,
		`{"model":"` + strings.Repeat("m", 300) + `"}`, `"lots"`} {
		for _, req := range []struct{ path, body string }{
			{"/api/v1/ack/" + id, `{"usage":` + u + `}`},
			{"/api/v1/fail/" + id, `{"error":"x","usage":` + u + `}`},
			{"/api/v1/heartbeat", `{"worker_id":"w","jobs":{"` + id + `":{"usage":` + u + `}}}`},
			{"/api/v1/ack/batch", `{"acks":[{"job_id":"` + id + `","usage":` + u + `}]}`},
		} {
			code, body := call(t, "POST", req.path, req.body)
			require.Equal(t, 400, code, "%s %s: %s", req.path, req.body, body)
			require.Contains(t, string(body), `"code":"invalid_request"`, string(body))
		}
	}
	doc := getJob(t, id)
	require.Equal(t, "active", doc.State)
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	require.Nil(t, mustJSON[corvo.Job](t, body).Usage)

	for _, qs := range []string{"period=1y", "group_by=color", "group_by=tag:", `group_by=tag:a"b`} {
		code, body := call(t, "GET", "/api/v1/usage/summary?"+qs, nil)
		require.Equal(t, 400, code, "%s: %s", qs, body)
	}
}
