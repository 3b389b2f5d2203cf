package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestCLIAudit: management calls made with the CLI are in `corvo audit`
// (JSON and table, filtered), `--follow` prints them as they come, oldest
// first, and the records survive a restart of the server.
func TestCLIAudit(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	follow := exec.Command(corvoBin, "audit", "--follow", "--interval", "50ms", "--since", since, "-o", "json")
	follow.Env = append(follow.Environ(), "CORVO_URL="+s.url)
	stdout, err := follow.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, follow.Start())
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	for _, action := range []string{"pause", "resume"} {
		out, code := runCLI(t, s.url, action, "audit.q")
		require.Equal(t, 0, code, out)
	}
	for _, want := range []string{"pause", "resume"} {
		select {
		case line := <-lines:
			var r corvo.AuditRecord
			require.NoError(t, json.Unmarshal([]byte(line), &r), line)
			require.Equal(t, "/api/v1/queues/audit.q/"+want, r.Path)
		case <-time.After(30 * time.Second):
			t.Fatalf("--follow never printed the %s", want)
		}
	}
	require.NoError(t, follow.Process.Signal(syscall.SIGINT))
	require.NoError(t, follow.Wait(), "--follow ends cleanly on SIGINT")

	check := func() {
		t.Helper()
		out, code := runCLI(t, s.url, "audit", "-o", "json")
		require.Equal(t, 0, code, out)
		var page corvo.AuditPage
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		require.Len(t, page.Records, 2, out)
		for i, action := range []string{"resume", "pause"} {
			r := page.Records[i]
			require.Equal(t, "POST", r.Method)
			require.Equal(t, "/api/v1/queues/audit.q/"+action, r.Path)
			require.Equal(t, 200, r.Status)
			require.Equal(t, action+" queue audit.q", r.Summary)
			require.Equal(t, "admin", r.Role)
			require.Equal(t, "default", r.Namespace)
		}
		out, code = runCLI(t, s.url, "audit", "--path-prefix", "/api/v1/queues/audit.q/p", "--method", "post")
		require.Equal(t, 0, code, out)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, rows, 2, out)
		require.Contains(t, rows[0], "SUMMARY")
		require.Contains(t, rows[1], "pause queue audit.q")
	}
	check()
	s.stop()
	s.start()
	check()

	out, code := runCLI(t, s.url, "audit", "--since", "yesterday")
	require.Equal(t, exitUsage, code, out)
	out, code = runCLI(t, s.url, "audit", "--limit", "5000")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "invalid_request")
}
