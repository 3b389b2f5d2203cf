package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLIBudgets: corvo budgets set, list (table and JSON) and delete
// against a real server; a spent hold budget holds a new job; the
// budgets and their spend survive kill -9; bad input exits with the
// usage or error code and sets nothing.
func TestCLIBudgets(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	run := func(want int, args ...string) string {
		t.Helper()
		out, code := runCLI(t, s.url, args...)
		require.Equal(t, want, code, "corvo %v:\n%s", args, out)
		return out
	}
	require.Equal(t, "queue:llm: daily 0.01, per job -, on exceed hold\n", run(0, "budgets", "set", "queue:llm", "--daily-usd", "0.01"))
	require.Contains(t, run(0, "budgets", "set", "tag:tenant=acme", "--per-job-usd", "2", "--on-exceed", "reject", "-o", "json"), `"per_job_usd":2`)
	run(exitUsage, "budgets", "set", "global")
	require.Contains(t, run(exitError_, "budgets", "set", "global", "--daily-usd", "1", "--on-exceed", "pause"), "invalid_request")

	// Spend the llm budget's day.
	code, body := do(t, "POST", s.url+"/api/v1/enqueue", map[string]any{"queue": "llm"})
	require.Equal(t, 201, code, string(body))
	code, body = do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"llm"}, "worker_id": "cli-w"})
	require.Equal(t, 200, code, string(body))
	var f struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal(body, &f))
	code, body = do(t, "POST", s.url+"/api/v1/ack/"+f.JobID, map[string]any{"usage": map[string]any{"input_tokens": 10, "cost_usd": 0.01}})
	require.Equal(t, 200, code, string(body))
	code, body = do(t, "POST", s.url+"/api/v1/enqueue", map[string]any{"queue": "llm"})
	require.Equal(t, 201, code, string(body))
	require.Contains(t, string(body), `"status":"held"`)

	check := func() {
		t.Helper()
		table := run(0, "budgets")
		require.Regexp(t, `queue:llm\s+0.01\s+-\s+hold\s+0.01\s+true`, table)
		require.Regexp(t, `tag:tenant=acme\s+-\s+2\s+reject\s+0\s+false`, table)
		var l struct {
			Budgets []map[string]any `json:"budgets"`
		}
		require.NoError(t, json.Unmarshal([]byte(run(0, "budgets", "list", "-o", "json")), &l))
		require.Len(t, l.Budgets, 2)
	}
	check()
	s.kill9()
	s.start()
	check()

	require.Equal(t, "deleted\n", run(0, "budgets", "delete", "tag:tenant=acme"))
	run(exitNotFound, "budgets", "delete", "tag:tenant=acme")
	require.False(t, strings.Contains(run(0, "budgets"), "tenant"))
}
