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
