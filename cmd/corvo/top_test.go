package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/top"
)

// TestCLITop seeds a real server and checks the numbers `corvo top` prints
// when stdout is not a terminal (one snapshot, JSON or table).
func TestCLITop(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var jobs []map[string]any
	for i := 0; i < 5; i++ {
		jobs = append(jobs, map[string]any{"queue": "emails", "payload": map[string]int{"i": i}, "max_retries": 0})
	}
	jobs = append(jobs, map[string]any{"queue": "emails", "payload": map[string]int{}, "scheduled_at": "2030-01-01T00:00:00Z"},
		map[string]any{"queue": "reports", "payload": map[string]int{}}, map[string]any{"queue": "reports", "payload": map[string]int{}})
	code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))
	code, body = do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"emails"}, "count": 2, "worker_id": "top-w", "hostname": "host-1"})
	require.Equal(t, 200, code, string(body))
	got := decode[struct{ Jobs []fetched }](t, body).Jobs
	require.Len(t, got, 2)
	code, _ = do(t, "POST", s.url+"/api/v1/fail/"+got[0].JobID, map[string]any{"error": "boom"})
	require.Equal(t, 200, code)
	code, _ = do(t, "POST", s.url+"/api/v1/queues/reports/pause", nil)
	require.Equal(t, 200, code)

	// The ages come from the search mirror and the rates from the server's
	// sampler, both asynchronous: wait until they are there.
	var rep top.Report
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, code := runCLI(t, s.url, "top", "--output", "json")
		require.Equal(t, 0, code, out)
		rep = top.Report{}
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		if rep.Totals.EnqueuedPerS != nil && rep.Queues[0].OldestPending != nil && rep.Queues[1].OldestPending != nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "ages or rates never appeared: %s", out)
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, s.url, rep.URL)
	// One node: it hears itself lead every shard, each applied past 0.
	require.Equal(t, []uint64{1, 1, 1, 1}, rep.Health.Leaders)
	require.Len(t, rep.Health.Applied, 4)
	for _, a := range rep.Health.Applied {
		require.NotZero(t, a)
	}
	rep.Health.Leaders, rep.Health.Applied = nil, nil
	require.Equal(t, top.Health{Status: "ok", Shards: 4, ShardsLed: 4, Auth: "open"}, rep.Health)
	require.Len(t, rep.Queues, 2)
	e, r := rep.Queues[0], rep.Queues[1]
	require.Equal(t, "emails", e.Name)
	require.Equal(t, [5]int64{3, 1, 1, 0, 1}, [5]int64{e.Pending, e.Active, e.Scheduled, e.Retrying, e.Dead})
	require.False(t, e.Paused)
	require.Equal(t, "reports", r.Name)
	require.Equal(t, int64(2), r.Pending)
	require.True(t, r.Paused)
	require.Less(t, *e.OldestPending, 60.0)
	require.Less(t, *r.OldestPending, 60.0)
	require.GreaterOrEqual(t, *e.OldestPending, 0.0)
	require.Greater(t, *e.EnqueuedPerS, 0.0, "6 jobs enqueued since the server started")
	tot := rep.Totals
	require.Equal(t, top.ReportTotals{Queues: 2, PausedQueues: 1, Pending: 5, Active: 1, Scheduled: 1, Dead: 1, Workers: 1, WorkerJobs: 1,
		EnqueuedPerS: tot.EnqueuedPerS, CompletedPerS: tot.CompletedPerS, FailedPerS: tot.FailedPerS, OldestPending: tot.OldestPending}, tot)
	require.InDelta(t, *e.EnqueuedPerS+*r.EnqueuedPerS, *tot.EnqueuedPerS, 1e-9, "floating-point sums differ in the last bit")
	require.Len(t, rep.Workers, 1)
	w := rep.Workers[0]
	require.Equal(t, "top-w", w.ID)
	require.Equal(t, "host-1", *w.Hostname)
	require.Equal(t, []string{"emails"}, w.Queues)
	require.Equal(t, 1, w.ActiveJobs)

	// A pipe is not a terminal: one table, with or without --once.
	for _, args := range [][]string{{"top"}, {"top", "--once"}} {
		out, code := runCLI(t, s.url, args...)
		require.Equal(t, 0, code, out)
		require.Regexp(t, `\nemails\s+3\s+1\s+1\s+0\s+0\s+1\s+\d`, out)
		require.Regexp(t, `\nreports\s+2\s+0\s+0\s+0\s+0\s+0\s+paused\s`, out)
		require.Regexp(t, `\nTOTAL \(2\)\s+5\s+1\s+1\s+0\s+0\s+1\s+1\s`, out)
		require.Regexp(t, `\ntop-w\s+host-1\s+emails\s+1\s+\d+s ago`, out)
		require.Contains(t, out, "status ok, 4 shards")
	}

	out, code := runCLI(t, "http://127.0.0.1:1", "top", "--once")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "cannot read http://127.0.0.1:1")
	out, code = runCLI(t, s.url, "top", "--interval", "1ms")
	require.Equal(t, exitUsage, code, out)
	out, code = runCLI(t, s.url, "top", "-o", "yaml")
	require.Equal(t, exitUsage, code, out)
}
