package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCLI runs the built binary as a user would, with CORVO_URL set.
func runCLI(t *testing.T, url string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(corvoBin, args...)
	cmd.Env = append(cmd.Environ(), "CORVO_URL="+url)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func TestCLIEnqueueAndInspect(t *testing.T) {
	s := newServer(t)
	out, code := runCLI(t, s.url, "enqueue", "emails.send", `{"to":"user@example.com"}`, "--priority", "high", "--max-retries", "7")
	require.Equal(t, 0, code, out)
	fields := strings.Fields(out)
	require.Len(t, fields, 2, out)
	id := fields[0]
	require.Equal(t, "pending", fields[1])

	out, code = runCLI(t, s.url, "inspect", id)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "queue                emails.send")
	require.Contains(t, out, "priority             high")
	require.Contains(t, out, "max_retries          7")
	require.Contains(t, out, `payload              {"to":"user@example.com"}`)

	out, code = runCLI(t, s.url, "inspect", id, "--output", "json")
	require.Equal(t, 0, code, out)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Equal(t, id, doc["id"])

	out, code = runCLI(t, s.url, "enqueue", "emails.send", `{"to":"x"}`, "-o", "json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"job_id":"job_`)

	// Exit codes scripts can trust.
	_, code = runCLI(t, s.url, "inspect", "job_0_01HX7Y2K3M0000000000000000")
	require.Equal(t, exitNotFound, code)
	out, code = runCLI(t, s.url, "enqueue", "q", "{not json")
	require.Equal(t, exitUsage, code, out)
	out, code = runCLI(t, s.url, "enqueue", "bad queue", "{}")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "invalid_request")
	_, code = runCLI(t, "http://127.0.0.1:1", "inspect", "x")
	require.Equal(t, exitError_, code)
	_, code = runCLI(t, s.url, "inspect")
	require.Equal(t, exitUsage, code)
}

// TestCLIManagement drives every job, queue and listing command against a
// real server, in table and JSON output.
func TestCLIManagement(t *testing.T) {
	s := newServer(t)
	run := func(want int, args ...string) string {
		t.Helper()
		out, code := runCLI(t, s.url, args...)
		require.Equal(t, want, code, "corvo %v:\n%s", args, out)
		return out
	}
	id := strings.Fields(run(0, "enqueue", "emails.send", `{"to":"a"}`, "--max-retries", "0"))[0]
	require.Contains(t, run(0, "queues"), "emails.send")
	require.Contains(t, run(0, "queues", "-o", "json"), `"name":"emails.send"`)
	require.Contains(t, run(0, "cancel", id), "cancelled")
	require.Contains(t, run(0, "retry", id), "pending")
	moved := strings.TrimSpace(run(0, "move", id, "emails.legacy", "--reset-attempt"))
	require.True(t, strings.HasPrefix(moved, "job_"), moved)
	require.Contains(t, run(0, "delete", moved), "deleted")
	run(exitNotFound, "delete", moved)

	require.Contains(t, run(0, "pause", "emails.send"), `"paused":true`)
	require.Contains(t, run(0, "resume", "emails.send"), `"paused":false`)
	run(0, "concurrency", "payments", "1")
	run(0, "throttle", "emails.send", "100", "1m")
	run(0, "throttle", "emails.send", "--remove")
	run(exitUsage, "throttle", "emails.send")
	run(0, "enqueue", "tmp", `{}`)
	require.Contains(t, run(0, "clear", "tmp"), `"cleared":1`)
	require.Contains(t, run(0, "drain", "tmp"), "drained")
	run(exitUsage, "destroy", "tmp")
	require.Contains(t, run(0, "destroy", "tmp", "--confirm"), "jobs deleted: 0")

	// A job that dies shows in the dead list.
	dead := strings.Fields(run(0, "enqueue", "flaky", `{}`, "--max-retries", "0"))[0]
	code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"flaky"}, "worker_id": "cli-w"})
	require.Equal(t, 200, code, string(body))
	code, _ = do(t, "POST", s.url+"/api/v1/fail/"+dead, map[string]any{"error": "SMTP down"})
	require.Equal(t, 200, code)
	out := run(0, "dead", "--queue", "flaky")
	require.Contains(t, out, dead)
	require.Contains(t, out, "SMTP down")
	require.Contains(t, run(0, "workers"), "cli-w")

	sid := strings.TrimSpace(run(0, "schedules", "create", "nightly", "reports", "0 3 * * *", "--timezone", "Europe/Paris", "--payload", `{"k":1}`))
	require.True(t, strings.HasPrefix(sid, "sched_"), sid)
	require.Contains(t, run(0, "schedules"), "nightly")
	require.Contains(t, run(0, "schedules", "list", "-o", "json"), `"timezone":"Europe/Paris"`)
	run(0, "schedules", "delete", sid)
	run(exitError_, "schedules", "create", "bad", "reports", "not cron")

	require.Contains(t, run(0, "status"), "status: ok")
}
