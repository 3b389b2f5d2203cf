package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// TestE2EQuickStart runs the README's quick start (spec 000 "Quick start"):
// curl enqueue, then the bash worker loop, against a real server.
func TestE2EQuickStart(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make test installs it via scripts/ensure-tools.sh)", tool)
		}
	}
	s := newServer(t)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	enqueue, worker := quickStartBlocks(t, string(readme))
	fix := func(sh string) string { return strings.ReplaceAll(sh, "http://localhost:8080", s.url) }

	out, err := exec.Command("bash", "-c", fix(enqueue)).Output()
	require.NoError(t, err, string(out))
	var enq struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(out, &enq), string(out))
	require.Equal(t, "pending", enq.Status)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	loop := exec.CommandContext(ctx, "bash", "-c", fix(worker))
	loopOut := &lockedBuffer{}
	loop.Stdout, loop.Stderr = loopOut, loopOut
	loop.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so curl dies with bash
	require.NoError(t, loop.Start())
	defer func() { _ = syscall.Kill(-loop.Process.Pid, syscall.SIGKILL); _ = loop.Wait() }()

	deadline := time.Now().Add(30 * time.Second)
	for s.job(t, enq.JobID).State != "completed" {
		require.True(t, time.Now().Before(deadline), "the worker loop never completed the job; output:\n%s", loopOut.String())
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, loopOut.String(), "Processing: ")
	require.Contains(t, loopOut.String(), enq.JobID)
}

// quickStartBlocks pulls the enqueue command and the worker loop out of the
// README's quick start, so the test runs exactly what users copy.
func quickStartBlocks(t *testing.T, readme string) (string, string) {
	t.Helper()
	start := strings.Index(readme, "<!-- quickstart:enqueue -->")
	wstart := strings.Index(readme, "<!-- quickstart:worker -->")
	require.True(t, start >= 0 && wstart >= 0, "README lacks the quick-start markers")
	block := func(from int) string {
		s := readme[from:]
		s = s[strings.Index(s, "```bash")+len("```bash"):]
		return s[:strings.Index(s, "```")]
	}
	return block(start), block(wstart)
}

// TestE2EKillDashNine enqueues 10,000 jobs over 20 queues while workers
// ack, SIGKILLs the server mid-way, restarts it on the same data dir and
// finishes: every enqueue that got a 2xx is completed, and no job is
// completed twice.
func TestE2EKillDashNine(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	const total, queues = 10000, 20
	var (
		mu       sync.Mutex
		accepted = map[string]bool{}
		acks     = map[string]int{}
		attempts atomic.Int64
		acked    atomic.Int64
		done     = make(chan struct{})
	)
	var qs []string
	for i := 0; i < queues; i++ {
		qs = append(qs, queueName(i))
	}
	var wg sync.WaitGroup
	// Producers: single enqueues and batches of 25, retried on failure.
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for {
				n := attempts.Add(1)
				if n > total {
					return
				}
				i := int(n)
				job := map[string]any{"queue": qs[i%queues], "payload": map[string]int{"i": i}, "lease_duration": 2}
				for {
					code, body := do(t, "POST", s.url+"/api/v1/enqueue", job)
					if code == 201 {
						var r struct {
							JobID string `json:"job_id"`
						}
						_ = json.Unmarshal(body, &r)
						mu.Lock()
						accepted[r.JobID] = true
						mu.Unlock()
						break
					}
					time.Sleep(20 * time.Millisecond) // server down: retry (a new job; the old one may exist too)
				}
			}
		}(p)
	}
	// Workers: fetch up to 10, ack each with the lease they hold.
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			wid := fmt.Sprintf("w%d", w)
			for {
				select {
				case <-done:
					return
				default:
				}
				code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": qs, "worker_id": wid, "timeout": 0.2, "count": 10})
				if code != 200 {
					if code != 204 {
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				var r struct{ Jobs []fetched }
				require.NoError(t, json.Unmarshal(body, &r))
				for _, j := range r.Jobs {
					code, _ := do(t, "POST", s.url+"/api/v1/ack/"+j.JobID, map[string]any{"worker_id": wid, "attempt": j.Attempt})
					if code == 200 {
						mu.Lock()
						acks[j.JobID]++
						mu.Unlock()
						acked.Add(1)
					}
				}
			}
		}(w)
	}
	for acked.Load() < 3000 {
		time.Sleep(10 * time.Millisecond)
	}
	s.kill9()
	t.Logf("SIGKILL after %d acks and %d enqueue attempts", acked.Load(), attempts.Load())
	s.start()

	deadline := time.Now().Add(3 * time.Minute)
	for {
		mu.Lock()
		nAcc := len(accepted)
		mu.Unlock()
		if attempts.Load() > total && nAcc >= total {
			// Every producer finished; wait for all accepted jobs to
			// complete. An ack whose response the kill swallowed completed
			// its job without a 200, so ask the server about those.
			mu.Lock()
			var unacked []string
			for id := range accepted {
				if acks[id] == 0 {
					unacked = append(unacked, id)
				}
			}
			mu.Unlock()
			if len(unacked) <= 200 {
				pending := 0
				for _, id := range unacked {
					if s.job(t, id).State != "completed" {
						pending++
					}
				}
				if pending == 0 {
					break
				}
			}
		}
		require.True(t, time.Now().Before(deadline), "work did not finish after the restart")
		time.Sleep(50 * time.Millisecond)
	}
	close(done)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(accepted), total)
	lost := 0
	for id := range accepted {
		require.Equal(t, "completed", s.job(t, id).State, id)
		if acks[id] == 0 {
			lost++ // completed by an ack whose response the kill swallowed
		}
	}
	require.LessOrEqual(t, lost, 8*10, "only acks in flight at the kill can lack a 200")
	for id, n := range acks {
		require.Equal(t, 1, n, "job %s completed %d times", id, n)
	}
	t.Logf("%d jobs accepted, all completed; %d completed by acks in flight at the kill", len(accepted), lost)

	// The mirror, written until the kill and caught up after the restart,
	// agrees with Pebble: as many completed jobs as the queues count, and
	// none in another state (created_after keeps the search on SQLite; a
	// queue/state-only search would take its total from the shards).
	code, body := do(t, "GET", s.url+"/api/v1/queues", nil)
	require.Equal(t, 200, code, string(body))
	inPebble := 0
	for _, q := range decode[struct{ Queues []struct{ Completed int } }](t, body).Queues {
		inPebble += q.Completed
	}
	require.GreaterOrEqual(t, inPebble, len(accepted))
	searchTotal := func(filter map[string]any) int {
		filter["created_after"], filter["limit"] = "2000-01-01T00:00:00Z", 1
		code, body := do(t, "POST", s.url+"/api/v1/jobs/search", filter)
		require.Equal(t, 200, code, string(body))
		return decode[struct{ Total int }](t, body).Total
	}
	for deadline := time.Now().Add(30 * time.Second); searchTotal(map[string]any{"state": []string{"completed"}}) != inPebble; {
		require.True(t, time.Now().Before(deadline), "the mirror never caught up with Pebble")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, inPebble, searchTotal(map[string]any{}), "no job in the mirror in another state")
	took := s.stop()
	require.Less(t, took, 10*time.Second, "SIGTERM shutdown")
	require.Equal(t, 0, s.exitCode)
}

// TestE2EConcurrentFetchersExactlyOnce: 32 concurrent fetchers over 5,000
// jobs; every job is handed out exactly once while leases are valid.
func TestE2EConcurrentFetchersExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	const total = 5000
	queues := []string{"a", "b", "c"}
	want := map[string]bool{}
	for b := 0; b < total/500; b++ {
		var jobs []map[string]any
		for i := 0; i < 500; i++ {
			jobs = append(jobs, map[string]any{"queue": queues[i%3], "payload": map[string]int{"i": b*500 + i}})
		}
		code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
		require.Equal(t, 201, code, string(body))
		for _, id := range decode[struct {
			JobIDs []string `json:"job_ids"`
		}](t, body).JobIDs {
			want[id] = true
		}
	}
	require.Len(t, want, total)

	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for f := 0; f < 32; f++ {
		wg.Add(1)
		go func(f int) {
			defer wg.Done()
			for {
				code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": queues, "worker_id": fmt.Sprint("f", f), "timeout": 0.3})
				if code == 204 {
					return
				}
				require.Equal(t, 200, code, string(body))
				j := decode[fetched](t, body)
				mu.Lock()
				got[j.JobID]++
				mu.Unlock()
			}
		}(f)
	}
	wg.Wait()
	require.Len(t, got, total)
	for id, n := range got {
		require.True(t, want[id], id)
		require.Equal(t, 1, n, "job %s handed out %d times", id, n)
	}
}

// TestE2EReadmeExamples runs every <!-- example --> block of the README, in
// order, against a real server: the documented commands work as shown.
func TestE2EReadmeExamples(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make test installs it via scripts/ensure-tools.sh)", tool)
		}
	}
	s := newServer(t)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	rest := string(readme)
	var want []string // each example's output, as the README shows it
	for {
		i := strings.Index(rest, "<!-- example -->")
		if i < 0 {
			break
		}
		rest = rest[i:]
		start := strings.Index(rest, "```bash") + len("```bash")
		end := start + strings.Index(rest[start:], "```")
		block := rest[start:end]
		fmt.Fprintf(&script, "echo '--- example %d'\n%s\n", len(want), block)
		rest = rest[end+3:]
		shown, ok := strings.CutPrefix(strings.TrimLeft(rest, "\n"), "<!-- output -->\n```text\n")
		require.True(t, ok, "README example %d has no output block after it", len(want))
		want = append(want, shown[:strings.Index(shown, "```")])
	}
	require.GreaterOrEqual(t, len(want), 8, "the README lost its examples")
	code := strings.ReplaceAll(script.String(), "http://localhost:8080", s.url)
	cmd := exec.Command("bash", "-c", code)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "a README example failed:\n%s", out)
	got := strings.Split(string(out), "--- example ")[1:]
	require.Len(t, got, len(want), "%s", out)
	for n := range want {
		_, printed, _ := strings.Cut(got[n], "\n")
		require.Equal(t, want[n], printed, "README example %d printed something else than the README shows", n)
	}
}

// TestE2EOutboxSurvivesKill moves jobs to a queue on another shard while
// the outbox relay is held, SIGKILLs the server with every move written but
// none delivered, restarts it, and checks that each job then exists exactly
// once — under its new ID, on its new queue.
func TestE2EOutboxSurvivesKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	s.stop()
	s.extra = append(s.extra, "--test-hold-outbox")
	s.start()
	// Two queues on different shards (4 shards, the router's xxhash).
	from, to := "q-from-0", ""
	for i := 0; to == ""; i++ {
		if c := fmt.Sprintf("q-to-%d", i); shardOf(c) != shardOf(from) {
			to = c
		}
	}
	moved := map[string]string{}
	var ids []string
	for i := 0; i < 50; i++ {
		ids = append(ids, s.enqueueJob(t, from, i))
	}
	// A move answers once its job is readable at the new ID, or says
	// in_transit after the request timeout: with the outbox held, every
	// move does the latter (so they run together).
	codes, bodies := make([]int, len(ids)), make([][]byte, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.url+"/api/v1/jobs/"+id+"/move", strings.NewReader(`{"queue":"`+to+`"}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				bodies[i], _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}
		}()
	}
	wg.Wait()
	for i, id := range ids {
		require.Equal(t, 200, codes[i], string(bodies[i]))
		r := decode[struct {
			JobID     string `json:"job_id"`
			InTransit bool   `json:"in_transit"`
		}](t, bodies[i])
		require.True(t, r.InTransit, string(bodies[i]))
		moved[id] = r.JobID
	}
	for _, newID := range moved {
		code, _ := do(t, "GET", s.url+"/api/v1/jobs/"+newID, nil)
		require.Equal(t, 404, code, "held: nothing delivered yet")
		break
	}
	s.kill9()
	s.extra = nil
	s.start()
	deadline := time.Now().Add(30 * time.Second)
	for oldID, newID := range moved {
		for {
			code, body := do(t, "GET", s.url+"/api/v1/jobs/"+newID, nil)
			if code == 200 {
				require.Equal(t, to, decode[jobDoc](t, body).Queue)
				break
			}
			require.True(t, time.Now().Before(deadline), "job %s never arrived", newID)
			time.Sleep(20 * time.Millisecond)
		}
		code, body := do(t, "GET", s.url+"/api/v1/jobs/"+oldID, nil)
		require.Equal(t, 200, code, "the old ID answers the moved job: %s", body)
		require.Equal(t, newID, decode[jobDoc](t, body).ID)
	}
	got := 0
	for {
		code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{from, to}, "count": 100, "timeout": 0.5})
		if code != 200 {
			break
		}
		got += len(decode[struct{ Jobs []fetched }](t, body).Jobs)
	}
	require.Equal(t, len(moved), got, "each moved job exists exactly once")
}

func shardOf(queue string) int { return router.New(4).ShardForQueue(queue) }

func (s *server) enqueueJob(t *testing.T, queue string, i int) string {
	t.Helper()
	return s.enqueue2(t, map[string]any{"queue": queue, "payload": map[string]int{"i": i}})
}

// TestE2EExampleWorker builds examples/worker and runs it as a user would:
// it completes jobs, fails the one asking to fail, and exits 0 on SIGTERM.
func TestE2EExampleWorker(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "../../examples/worker")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	var ok []string
	for i := 0; i < 5; i++ {
		ok = append(ok, s.enqueue2(t, map[string]any{"queue": "emails.send", "payload": map[string]any{"to": fmt.Sprintf("u%d@example.com", i)}}))
	}
	bad := s.enqueue2(t, map[string]any{"queue": "emails.send", "payload": map[string]any{"to": "x", "fail": true}, "max_retries": 0})

	w := exec.Command(bin)
	w.Env = append(os.Environ(), "CORVO_URL="+s.url, "CORVO_CONCURRENCY=3")
	logs := &lockedBuffer{}
	w.Stdout, w.Stderr = logs, logs
	require.NoError(t, w.Start())
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range append(ok, bad) {
		want := "completed"
		if id == bad {
			want = "dead"
		}
		for s.job(t, id).State != want {
			require.True(t, time.Now().Before(deadline), "job %s never %s; worker said:\n%s", id, want, logs.String())
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), logs.String())
	require.Contains(t, logs.String(), "drained")
	code, body := do(t, "GET", s.url+"/api/v1/jobs/"+ok[0], nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `"result":{"sent":true,"to":"u0@example.com"}`)

	// SIGTERM mid-job, with a grace shorter than the job: nothing is lost —
	// the job comes back with its checkpoint, and the next worker goes on
	// from there.
	long := s.enqueue2(t, map[string]any{"queue": "emails.send", "payload": map[string]any{"to": "list@example.com", "steps": 60}})
	run := func() (*exec.Cmd, *lockedBuffer) {
		w := exec.Command(bin)
		w.Env = append(os.Environ(), "CORVO_URL="+s.url, "CORVO_CONCURRENCY=1", "CORVO_SHUTDOWN_GRACE=100ms")
		logs := &lockedBuffer{}
		w.Stdout, w.Stderr = logs, logs
		require.NoError(t, w.Start())
		return w, logs
	}
	w, logs = run()
	var mark struct {
		Done int `json:"done"`
	}
	for mark.Done < 3 {
		require.True(t, time.Now().Before(deadline.Add(30*time.Second)), "no checkpoint; worker said:\n%s", logs.String())
		if cp := s.job(t, long).Checkpoint; len(cp) > 0 && string(cp) != "null" {
			require.NoError(t, json.Unmarshal(cp, &mark))
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), logs.String())
	j := s.job(t, long)
	require.Contains(t, []string{"pending", "retrying"}, j.State, "handed back by the drain")
	require.Len(t, j.Errors, 1)
	require.Equal(t, "worker_shutdown", j.Errors[0].Error)
	var kept struct {
		Done int `json:"done"`
	}
	require.NoError(t, json.Unmarshal(j.Checkpoint, &kept))
	require.GreaterOrEqual(t, kept.Done, 3)
	w, logs = run()
	for s.job(t, long).State != "completed" {
		require.True(t, time.Now().Before(deadline.Add(60*time.Second)), "never completed; worker said:\n%s", logs.String())
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), logs.String())
	code, body = do(t, "GET", s.url+"/api/v1/jobs/"+long, nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), fmt.Sprintf(`"resumed_at":%d`, kept.Done), "the retry went on from the checkpoint")
}

func (s *server) enqueue2(t *testing.T, job map[string]any) string {
	t.Helper()
	code, body := do(t, "POST", s.url+"/api/v1/enqueue", job)
	require.Equal(t, 201, code, string(body))
	return decode[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
}

// TestE2ESearchAndMirrorRebuild searches the mirror with the spec's
// filters, then deletes the mirror file while the server is stopped: it is
// rebuilt on start and every search answers as before.
func TestE2ESearchAndMirrorRebuild(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	var jobs []map[string]any
	for i := 0; i < 300; i++ {
		jobs = append(jobs, map[string]any{"queue": fmt.Sprintf("emails.q%d", i%3), "payload": map[string]any{"amount": i, "vip": i%10 == 0, "to": fmt.Sprintf("u%d@example.com", i)},
			"tags": map[string]string{"tenant": []string{"acme", "globex"}[i%2]}, "max_retries": 0})
	}
	code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))
	// Kill some: they go dead with an SMTP error.
	code, body = do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"emails.q0"}, "count": 20, "worker_id": "w"})
	require.Equal(t, 200, code, string(body))
	for _, j := range decode[struct{ Jobs []fetched }](t, body).Jobs {
		code, _ := do(t, "POST", s.url+"/api/v1/fail/"+j.JobID, map[string]any{"error": "SMTP connection refused"})
		require.Equal(t, 200, code)
	}
	searches := []map[string]any{
		{"queue": "emails.q0", "state": []string{"dead"}, "error_contains": "SMTP"},
		{"payload_jq": ".amount > 250 and .vip == true"},
		{"tags": map[string]string{"tenant": "acme"}, "state": []string{"pending"}, "limit": 500},
		{"payload_contains": "u7@example.com"},
		{"queue": "emails.q1", "sort": "created_at", "order": "asc", "limit": 5},
		// Queue/state-only filters take their total from Pebble's counts.
		{"queue": "emails.q1", "state": []string{"pending"}, "limit": 5},
		{"state": []string{"pending", "dead", "dead"}, "limit": 3},
		{"queue": "emails.q0", "state": []string{"dead", "pending"}, "limit": 2},
	}
	type result struct {
		Total int `json:"total"`
		Jobs  []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	run := func() []result {
		var out []result
		for _, q := range searches {
			code, body := do(t, "POST", s.url+"/api/v1/jobs/search", q)
			require.Equal(t, 200, code, string(body))
			out = append(out, decode[result](t, body))
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	var before []result
	for {
		before = run()
		if before[0].Total == 20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the mirror applies asynchronously
	}
	require.Equal(t, 20, before[0].Total, "dead SMTP jobs")
	require.Equal(t, 4, before[1].Total, "amount > 250 and vip (every 10th): 260, 270, 280, 290")
	require.Equal(t, 150-10, before[2].Total, "acme is every other job; 10 of its q0 jobs are dead")
	require.Equal(t, 1, before[3].Total, "only u7@example.com (u70@… does not contain it)")
	require.Len(t, before[4].Jobs, 5)
	require.Equal(t, 100, before[4].Total)
	require.Equal(t, 100, before[5].Total, "emails.q1 pending")
	require.Equal(t, 300, before[6].Total, "280 pending + 20 dead, a repeated state counted once")
	require.Equal(t, 100, before[7].Total, "emails.q0: 80 pending + 20 dead")
	require.Len(t, before[7].Jobs, 2)

	s.stop()
	require.NoError(t, os.Remove(filepath.Join(s.dir, "mirror.db")))
	s.start()
	deadline = time.Now().Add(20 * time.Second)
	for {
		after := run()
		if reflect.DeepEqual(before, after) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the rebuilt mirror answers differently:\n%v\n%v", before, after)
		time.Sleep(50 * time.Millisecond)
	}
	code, _ = do(t, "POST", s.url+"/api/v1/jobs/search", map[string]any{"payload_jq": ".a = 1"})
	require.Equal(t, 400, code)
}

// TestE2EServerRunsWithoutTcache: `corvo server` runs itself again with
// glibc's per-thread malloc cache off (internal/membudget/tcache.go), and
// leaves a cache size the operator set alone.
func TestE2EServerRunsWithoutTcache(t *testing.T) {
	t.Parallel()
	tunables := func(s *server) string {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.cmd.Process.Pid))
		require.NoError(t, err)
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "GLIBC_TUNABLES="); ok {
				return v
			}
		}
		return ""
	}
	require.Equal(t, "glibc.malloc.tcache_count=0", tunables(newServer(t)))
	s := &server{t: t, dir: t.TempDir(), http: freeAddr(t), raft: freeAddr(t), env: []string{"GLIBC_TUNABLES=glibc.malloc.tcache_count=3"}}
	s.url = schemeOf(nil) + s.http
	s.start()
	t.Cleanup(func() { s.kill9() })
	require.Equal(t, "glibc.malloc.tcache_count=3", tunables(s))
}
