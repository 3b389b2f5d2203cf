package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestE2EAIStateSurvivesKill9 gives a server issue 20's state — usage on a
// heartbeat, an ack and a fail, a budget with today's spend, scores, a
// cached result, a routed job on its fallback, a provider with a linked
// queue — SIGKILLs it, starts it again on the same data dir and checks
// that the usage summary, the budgets, the scores summary and the
// providers say what they said before, that the cache still answers, the
// route goes on at its fallback and the provider's rate still binds.
func TestE2EAIStateSurvivesKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	day := func() string { return time.Now().UTC().Format(time.DateOnly) }
	firstDay := day()
	s := newServer(t, "--shards", "2")
	must := func(method, path string, body any, want int) []byte {
		t.Helper()
		code, out := do(t, method, s.url+path, body)
		require.Equal(t, want, code, "%s %s: %s", method, path, out)
		return out
	}
	cli := func(args ...string) string {
		t.Helper()
		out, code := runCLIKey(t, s.url, testAdminKey, args...)
		require.Equal(t, 0, code, "corvo %v:\n%s", args, out)
		return out
	}
	const q, limited = "llm", "llm.limited"
	cli("budgets", "set", "queue:"+q, "--daily-usd", "100", "--per-job-usd", "50")
	must("PUT", "/api/v1/providers", map[string]any{"name": "fake", "rpm_limit": 2}, 200)
	must("POST", "/api/v1/queues/"+limited+"/provider", map[string]any{"provider": "fake"}, 200)

	usage := func(in int64, model string, cost float64) map[string]any {
		return map[string]any{"input_tokens": in, "output_tokens": in / 10, "model": model, "provider": "fake", "cost_usd": cost}
	}
	cache := map[string]any{"enabled": true, "ttl": "1h"}
	enqueue := func(job map[string]any) string {
		return decode[struct {
			JobID string `json:"job_id"`
		}](t, must("POST", "/api/v1/enqueue", job, 201)).JobID
	}
	fetch := func(queue string) (fetched, int) {
		t.Helper()
		code, out := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{queue}, "worker_id": "w", "timeout": 1})
		if code != 200 {
			return fetched{}, code
		}
		return decode[fetched](t, out), code
	}
	cached := enqueue(map[string]any{"queue": q, "payload": map[string]any{"prompt": "capital of France"}, "cache": cache})
	f, _ := fetch(q)
	require.Equal(t, cached, f.JobID)
	must("POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w", "jobs": map[string]any{cached: map[string]any{"usage": usage(1000, "claude", 0.02)}}}, 200)
	must("POST", "/api/v1/ack/"+cached, map[string]any{"worker_id": "w", "result": map[string]any{"answer": "Paris"}, "usage": usage(500, "claude", 0.01)}, 200)
	must("POST", "/api/v1/jobs/"+cached+"/score", map[string]any{"scorer": "human:ann", "dimensions": map[string]any{"accuracy": 0.75}}, 201)
	routed := enqueue(map[string]any{"queue": q, "payload": map[string]any{}, "retry_backoff": "none",
		"routing": map[string]any{"prefer": "claude", "fallback": []string{"gpt"}}})
	f, _ = fetch(q)
	require.Equal(t, routed, f.JobID)
	must("POST", "/api/v1/fail/"+routed, map[string]any{"worker_id": "w", "attempt": 1, "error": "503", "provider_error": true,
		"usage": usage(10, "claude", 0.001)}, 200)
	// The provider's two requests a minute: one spent before the kill.
	for range 3 {
		enqueue(map[string]any{"queue": limited, "payload": map[string]any{}})
	}
	_, code := fetch(limited)
	require.Equal(t, 200, code)

	views := func() []string {
		t.Helper()
		return []string{
			lastLine(cli("usage", "--period", "24h", "--group-by", "model", "-o", "json")),
			lastLine(cli("budgets", "-o", "json")),
			lastLine(cli("scores", "summary", "--queue", q, "--period", "24h", "-o", "json")),
			string(must("GET", "/api/v1/providers", nil, 200)),
		}
	}
	// The summaries come from the mirror: wait until it has every report.
	var before []string
	require.Eventually(t, func() bool {
		before = views()
		return strings.Contains(before[0], `"input_tokens":1510`)
	}, 30*time.Second, 50*time.Millisecond, "the usage summary before the kill")

	s.kill9()
	s.start()

	// After the restart the mirror catches up from the shards again.
	var after []string
	require.Eventually(t, func() bool {
		after = views()
		return after[0] == before[0] && after[2] == before[2]
	}, 30*time.Second, 50*time.Millisecond, "usage and scores after the restart")
	require.JSONEq(t, before[0], after[0], "usage")
	require.JSONEq(t, before[2], after[2], "scores")
	require.JSONEq(t, before[3], after[3], "providers")
	if day() == firstDay {
		require.JSONEq(t, before[1], after[1], "budgets with today's spend")
		require.Contains(t, after[1], `"spent_usd":0.031`)
	}
	hit := string(must("POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"prompt": "capital of France"}, "cache": cache}, 201))
	require.Contains(t, hit, `"cached":true`)
	require.Contains(t, hit, `"answer":"Paris"`)
	f, _ = fetch(q)
	require.Equal(t, routed, f.JobID)
	require.Contains(t, string(must("GET", "/api/v1/jobs/"+routed, nil, 200)), `"target":"gpt"`)
	// One more request fits the provider's minute; the third does not.
	_, code = fetch(limited)
	require.Equal(t, 200, code)
	_, code = fetch(limited)
	require.Equal(t, 204, code, "the provider's window was forgotten by the restart")
}
