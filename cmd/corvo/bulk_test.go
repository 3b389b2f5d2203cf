package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"
)

// TestCLIBulkAsync: a background bulk operation is followed to its end
// (plain lines when not on a terminal, the record with --output json),
// managed with status, list and cancel, and a cancelled one exits non-zero.
func TestCLIBulkAsync(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var jobs []map[string]any
	for i := 0; i < 30; i++ {
		jobs = append(jobs, map[string]any{"queue": "cli.bulk", "payload": i})
	}
	code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))
	ids := decode[struct {
		JobIDs []string `json:"job_ids"`
	}](t, body).JobIDs
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, body := do(t, "POST", s.url+"/api/v1/jobs/search", map[string]any{"queue": "cli.bulk", "limit": 1})
		require.Equal(t, 200, code)
		if decode[struct{ Total int }](t, body).Total == 30 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the mirror never saw the jobs")
		time.Sleep(20 * time.Millisecond)
	}

	// A filter that selects the whole queue needs --confirm.
	out, code := runCLI(t, s.url, "bulk", "delete", "--async", "--filter", `{"queue":"cli.bulk"}`)
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "would touch 30 jobs")
	require.Contains(t, out, "confirmation_required")
	_, code = runCLI(t, s.url, "bulk", "delete", "--confirm")
	require.Equal(t, exitUsage, code, "--confirm without --filter")
	out, code = runCLI(t, s.url, "bulk", "delete", "--async", "--confirm", "--filter", `{"queue":"cli.bulk"}`)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "running in the background (about 30 jobs)")
	require.Contains(t, out, "30/30 processed, 30 affected, 0 errors")
	require.Contains(t, out, "delete: completed: 30 jobs, 0 errors")
	id := strings.Fields(out)[0]
	id = strings.TrimSuffix(id, ":")
	require.True(t, strings.HasPrefix(id, "bulk_"), out)

	// The same IDs again: every one is gone now, so the operation has
	// errors and the command says so in its exit code.
	cmd := exec.Command(corvoBin, "bulk", "retry", "--async", "-o", "json")
	cmd.Env = append(os.Environ(), "CORVO_URL="+s.url)
	cmd.Stdin = strings.NewReader(strings.Join(ids, "\n"))
	res, err := cmd.Output()
	require.Error(t, err)
	require.Equal(t, exitError_, cmd.ProcessState.ExitCode())
	var rec map[string]any
	require.NoError(t, json.Unmarshal(res, &rec), string(res))
	require.Equal(t, "completed", rec["status"])
	require.EqualValues(t, 30, rec["errors"])

	out, code = runCLI(t, s.url, "bulk", "status", id)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "status      completed")
	require.Contains(t, out, "processed   30/30")
	out, code = runCLI(t, s.url, "bulk", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, id)
	out, code = runCLI(t, s.url, "bulk", "stop", id)
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "conflict")
	out, code = runCLI(t, s.url, "bulk", "cancel", id) // the older spelling
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "conflict")
	_, code = runCLI(t, s.url, "bulk", "status", "bulk_"+ulid.Make().String())
	require.Equal(t, exitNotFound, code)

	// A long operation (50,000 IDs of jobs that do not exist), cancelled
	// while the command follows it: it ends non-zero, saying so.
	var fake strings.Builder
	for i := 0; i < 50000; i++ {
		fmt.Fprintf(&fake, "job_%d_%s\n", i%4, ulid.Make())
	}
	cmd = exec.Command(corvoBin, "bulk", "retry")
	cmd.Env = append(os.Environ(), "CORVO_URL="+s.url)
	cmd.Stdin = strings.NewReader(fake.String())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	var running string
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if strings.Contains(line, "processed") && running == "" {
			running = strings.TrimSuffix(strings.Fields(line)[0], ":")
			code, body := do(t, "DELETE", s.url+"/api/v1/bulk/"+running, nil)
			require.Equal(t, 200, code, string(body))
		}
	}
	err = cmd.Wait()
	require.Error(t, err, strings.Join(lines, "\n"))
	require.Equal(t, exitError_, cmd.ProcessState.ExitCode())
	require.Contains(t, lines[len(lines)-1], "retry: cancelled:")
}

// TestE2EShutdownWithStreamsAndBulk: SIGTERM with an event stream, a
// progress stream and a running bulk operation open still stops the
// server within 5 s; after the restart the operation says interrupted.
func TestE2EShutdownWithStreamsAndBulk(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	var fake []string
	for i := 0; i < 200000; i++ {
		fake = append(fake, fmt.Sprintf("job_%d_%s", i%4, ulid.Make()))
	}
	code, body := do(t, "POST", s.url+"/api/v1/jobs/bulk", map[string]any{"job_ids": fake, "action": "retry"})
	require.Equal(t, 202, code, string(body))
	id := decode[struct {
		ID string `json:"bulk_operation_id"`
	}](t, body).ID
	streams := 0
	for _, path := range []string{"/api/v1/events", "/api/v1/bulk/" + id + "/progress"} {
		resp, err := streamClient.Get(s.url + path)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		defer resp.Body.Close()
		streams++
	}
	require.Equal(t, 2, streams)
	took := s.stop()
	require.Less(t, took, 5*time.Second, "SIGTERM shutdown with open streams and a running bulk operation")
	require.Equal(t, 0, s.exitCode, s.stderr.String())

	s.start()
	code, body = do(t, "GET", s.url+"/api/v1/bulk/"+id, nil)
	require.Equal(t, 200, code, string(body))
	rec := decode[struct {
		Status    string `json:"status"`
		Processed int    `json:"processed"`
	}](t, body)
	require.Equal(t, "interrupted", rec.Status)
	require.Less(t, rec.Processed, len(fake))

	// A crash leaves the record processing; the next start says interrupted.
	code, body = do(t, "POST", s.url+"/api/v1/jobs/bulk", map[string]any{"job_ids": fake, "action": "retry"})
	require.Equal(t, 202, code, string(body))
	id = decode[struct {
		ID string `json:"bulk_operation_id"`
	}](t, body).ID
	s.kill9()
	s.start()
	code, body = do(t, "GET", s.url+"/api/v1/bulk/"+id, nil)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"status":"interrupted"`)
}

// TestClusterBulkOnAnotherNode: a background operation lives on the node
// that took it; any other node answers for it (status and cancel relayed,
// the progress stream redirected there).
func TestClusterBulkOnAnotherNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	n1 := newClusterNode(t, 0, "")
	n2 := newClusterNode(t, 1, n1.http)
	waitCluster(t, n1, 2)
	fake := func(n int) []string {
		var ids []string
		for i := 0; i < n; i++ {
			ids = append(ids, fmt.Sprintf("job_%d_%s", i%4, ulid.Make()))
		}
		return ids
	}
	code, body := do(t, "POST", n1.url+"/api/v1/jobs/bulk", map[string]any{"job_ids": fake(50000), "action": "retry"})
	require.Equal(t, 202, code, string(body))
	id := decode[struct {
		ID string `json:"bulk_operation_id"`
	}](t, body).ID
	code, body = do(t, "GET", n2.url+"/api/v1/bulk/"+id, nil)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"id":"`+id+`"`)
	code, body = do(t, "DELETE", n2.url+"/api/v1/bulk/"+id, nil)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"status":"cancelled"`)

	// The progress stream, asked of the other node, is the owner's.
	resp, err := streamClient.Get(n2.url + "/api/v1/bulk/" + id + "/progress")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	var frames []string
	for sc.Scan() {
		frames = append(frames, sc.Text())
	}
	require.Equal(t, "event: done", frames[0], frames)
	require.Contains(t, frames[1], `"status":"cancelled"`)

	code, _ = do(t, "DELETE", n2.url+"/api/v1/bulk/"+id, nil)
	require.Equal(t, 409, code)
	code, _ = do(t, "GET", n2.url+"/api/v1/bulk/bulk_"+ulid.Make().String(), nil)
	require.Equal(t, 404, code)
}

// TestCLISearchPipeReachesEveryJob: 'corvo search | corvo bulk' acts on
// every match, not the first --limit (1,000) of them, with and without
// -o json; 'bulk cancel' cancels jobs (by IDs and by filter) and 'bulk
// stop' stops an operation.
func TestCLISearchPipeReachesEveryJob(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	const n = 5000
	for b := 0; b < n/1000; b++ {
		var jobs []map[string]any
		for i := 0; i < 1000; i++ {
			jobs = append(jobs, map[string]any{"queue": "pipe.dead", "payload": b*1000 + i, "max_retries": 0})
		}
		code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
		require.Equal(t, 201, code, string(body))
	}
	// All of them dead: fetched and failed, eight at a time.
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"pipe.dead"}, "count": 100, "worker_id": fmt.Sprintf("w%d", w)})
				if code == 204 {
					return // none left
				}
				if code != 200 {
					t.Errorf("fetch: %d %s", code, body)
					return
				}
				jobs := decode[struct{ Jobs []fetched }](t, body).Jobs
				if len(jobs) == 0 {
					return
				}
				for _, j := range jobs {
					if code, body := do(t, "POST", s.url+"/api/v1/fail/"+j.JobID, map[string]any{"error": "boom"}); code != 200 {
						t.Errorf("fail: %d %s", code, body)
						return
					}
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, n, failed.Load())
	waitSearchTotal(t, s, map[string]any{"queue": "pipe.dead", "state": []string{"dead"}}, n)

	pipe := func(search, bulk []string) string {
		t.Helper()
		sc := exec.Command(corvoBin, search...)
		sc.Env = append(os.Environ(), "CORVO_URL="+s.url)
		var stderr strings.Builder
		sc.Stderr = &stderr
		ids, err := sc.Output()
		require.NoError(t, err, stderr.String())
		require.Empty(t, stderr.String(), "no truncation warning when piped")
		bc := exec.Command(corvoBin, bulk...)
		bc.Env = append(os.Environ(), "CORVO_URL="+s.url)
		bc.Stdin = strings.NewReader(string(ids))
		out, err := bc.CombinedOutput()
		require.NoError(t, err, string(out))
		return string(out)
	}
	// -o json into a move: every dead job moves.
	out := pipe([]string{"search", "--queue", "pipe.dead", "--state", "dead", "-o", "json"}, []string{"bulk", "move", "pipe.moved"})
	require.Contains(t, out, fmt.Sprintf("%d jobs, 0 errors", n), out)
	waitSearchTotal(t, s, map[string]any{"queue": "pipe.moved"}, n)
	// The table, as a person pipes it: every row's ID.
	out = pipe([]string{"search", "--queue", "pipe.moved"}, []string{"bulk", "retry"})
	require.Contains(t, out, fmt.Sprintf("%d jobs, 0 errors", n), out)
	waitSearchTotal(t, s, map[string]any{"queue": "pipe.moved", "state": []string{"pending"}}, n)
	out = pipe([]string{"search", "--queue", "pipe.moved", "--state", "pending"}, []string{"bulk", "cancel"})
	require.Contains(t, out, fmt.Sprintf("%d jobs, 0 errors", n), out)
	waitSearchTotal(t, s, map[string]any{"queue": "pipe.moved", "state": []string{"cancelled"}}, n)

	// On a terminal the default stays 1,000, and a cut short list says so.
	cmd := exec.Command(corvoBin, "search", "--queue", "pipe.moved", "--limit", "10", "-o", "json")
	cmd.Env = append(os.Environ(), "CORVO_URL="+s.url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	require.NoError(t, err)
	var ten []map[string]any
	require.NoError(t, json.Unmarshal(res, &ten), string(res))
	require.Len(t, ten, 10)
	require.Contains(t, stderr.String(), fmt.Sprintf("10 shown of %d matching", n))

	// Not an ID: refused before anything changes.
	bc := exec.Command(corvoBin, "bulk", "retry")
	bc.Env = append(os.Environ(), "CORVO_URL="+s.url)
	bc.Stdin = strings.NewReader("JOB QUEUE\nhello world\n")
	bout, _ := bc.CombinedOutput()
	require.Equal(t, exitUsage, bc.ProcessState.ExitCode(), string(bout))
	require.Contains(t, string(bout), `stdin line 2: "hello" is not a job ID`)

	// bulk cancel by filter.
	code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{{"queue": "pipe.f", "payload": 1}, {"queue": "pipe.f", "payload": 2}}})
	require.Equal(t, 201, code, string(body))
	waitSearchTotal(t, s, map[string]any{"queue": "pipe.f"}, 2)
	out, code = runCLI(t, s.url, "bulk", "cancel", "--filter", `{"queue":"pipe.f","state":["pending"]}`, "--confirm")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "cancel: 2 jobs, 0 errors")
}

// waitSearchTotal waits until a search counts want jobs (the mirror
// catches up).
func waitSearchTotal(t *testing.T, s *server, filter map[string]any, want int) {
	t.Helper()
	f := map[string]any{"limit": 1}
	for k, v := range filter {
		f[k] = v
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := do(t, "POST", s.url+"/api/v1/jobs/search", f)
		require.Equal(t, 200, code, string(body))
		got := decode[struct{ Total int }](t, body).Total
		if got == want {
			return
		}
		require.True(t, time.Now().Before(deadline), "search %v: %d jobs, want %d", filter, got, want)
		time.Sleep(20 * time.Millisecond)
	}
}
