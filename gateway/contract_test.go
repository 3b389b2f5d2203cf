package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// TestMetricsMetadata: every family of /metrics has exactly one # TYPE
// line (and one # HELP line), written before its first sample, and the
// types of a known counter, gauge and histogram are right.
func TestMetricsMetadata(t *testing.T) {
	q := uq("metrics-meta")
	enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	code, body := call(t, "GET", "/api/v1/metrics", nil)
	require.Equal(t, 200, code, string(body))

	types := map[string]string{}
	helps := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			require.Len(t, f, 4, line)
			_, dup := types[f[2]]
			require.False(t, dup, "family %s has two TYPE lines", f[2])
			types[f[2]] = f[3]
		case strings.HasPrefix(line, "# HELP "):
			helps[strings.Fields(line)[2]]++
		case strings.HasPrefix(line, "#"):
		default:
			name := line
			if i := strings.IndexAny(name, "{ "); i >= 0 {
				name = name[:i]
			}
			fam, ok := familyOf(name, types)
			require.True(t, ok, "sample %q comes before (or without) its family's TYPE line", line)
			require.Equal(t, 1, helps[fam], "family %s: HELP lines", fam)
		}
	}
	require.Equal(t, "counter", types["corvo_jobs_enqueued_total"])
	require.Equal(t, "counter", types["corvo_http_requests_total"])
	require.Equal(t, "gauge", types["corvo_shards_led"])
	require.Equal(t, "gauge", types["corvo_mirror_lag_entries"])
	require.Equal(t, "histogram", types["corvo_http_request_duration_seconds"])
	// The memory budget: one gauge per consumer (node/memory.go).
	require.Equal(t, "gauge", types["corvo_memory_budget_bytes"])
	require.Equal(t, "gauge", types["corvo_memory_resident_bytes"])
	require.Equal(t, "gauge", types["corvo_memory_over_budget"])
	require.Equal(t, "counter", types["corvo_memory_refused_total"])
	for _, c := range []string{"request_bodies", "proposals", "mirror_buffer", "event_ring", "block_cache", "memtables", "job_cache", "filters"} {
		require.Contains(t, string(body), `corvo_memory_used_bytes{consumer="`+c+`"} `)
	}
	for _, c := range []string{"request_bodies", "proposals", "mirror_buffer", "block_cache", "memtables", "job_cache", "raft_log"} {
		require.Contains(t, string(body), `corvo_memory_limit_bytes{consumer="`+c+`"} `)
	}
}

// familyOf finds the family a sample belongs to among the families whose
// TYPE line has been seen: the name itself, or for a histogram or summary
// the name without its _bucket, _sum or _count suffix.
func familyOf(sample string, types map[string]string) (string, bool) {
	if _, ok := types[sample]; ok {
		return sample, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(sample, suf); ok {
			if t := types[base]; t == "histogram" || t == "summary" {
				return base, true
			}
		}
	}
	return "", false
}

// moveJob moves a job through the API and returns its new ID.
func moveJob(t *testing.T, id, queue string) string {
	t.Helper()
	code, body := call(t, "POST", "/api/v1/jobs/"+id+"/move", map[string]any{"queue": queue})
	require.Equal(t, 200, code, string(body))
	require.NotContains(t, string(body), "in_transit")
	return mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
}

type movedDoc struct {
	ID        string `json:"id"`
	Queue     string `json:"queue"`
	State     string `json:"state"`
	Priority  string `json:"priority"`
	MovedFrom string `json:"moved_from"`
}

// TestAPIMovedIDKeepsWorking: after a job moved to a queue on another
// shard (twice), its first ID still works for every job endpoint, acting
// on the job under its current ID.
func TestAPIMovedIDKeepsWorking(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "movedid", 3)
	old := enqueue(t, map[string]any{"queue": qs[0], "payload": map[string]any{}, "retry_backoff": "none"})
	mid := moveJob(t, old, qs[1])
	require.NotEqual(t, old, mid)
	// A move through the old ID (the job is now mid on another shard).
	cur := moveJob(t, old, qs[2])
	require.NotEqual(t, mid, cur)
	waitFor(t, "the moved job at its new ID", func() bool { c, _ := call(t, "GET", "/api/v1/jobs/"+cur, nil); return c == 200 })

	for _, from := range []string{old, mid} {
		code, body := call(t, "GET", "/api/v1/jobs/"+from, nil)
		require.Equal(t, 200, code, string(body))
		d := mustJSON[movedDoc](t, body)
		require.Equal(t, cur, d.ID)
		require.Equal(t, from, d.MovedFrom)
		require.Equal(t, qs[2], d.Queue)
	}

	code, body := call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"job_ids": []string{old}, "action": "change_priority", "priority": "critical"})
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"affected":1,`)
	require.Equal(t, "critical", mustJSON[movedDoc](t, mustGet(t, cur)).Priority)

	code, body = call(t, "POST", "/api/v1/jobs/"+old+"/cancel", nil)
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "cancelled", getJob(t, cur).State)
	code, body = call(t, "POST", "/api/v1/jobs/"+old+"/retry", nil)
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "pending", getJob(t, cur).State)

	// A worker that kept the old ID: fail it, then ack it.
	j, ok := fetchOne(t, 5, qs[2])
	require.True(t, ok)
	require.Equal(t, cur, j.JobID)
	code, body = call(t, "POST", "/api/v1/fail/"+old, map[string]any{"error": "boom", "worker_id": "w-" + t.Name()})
	require.Equal(t, 200, code, string(body))
	require.Equal(t, 1, getJob(t, cur).Attempt)
	waitFor(t, "the retry to be due", func() bool {
		j, ok = fetchOne(t, 0.2, qs[2])
		return ok
	})
	code, body = call(t, "POST", "/api/v1/ack/"+old, map[string]any{"worker_id": "w-" + t.Name()})
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "completed", getJob(t, cur).State)

	code, body = call(t, "DELETE", "/api/v1/jobs/"+old, nil)
	require.Equal(t, 200, code, string(body))
	code, _ = call(t, "GET", "/api/v1/jobs/"+cur, nil)
	require.Equal(t, 404, code)
	code, _ = call(t, "GET", "/api/v1/jobs/"+old, nil)
	require.Equal(t, 404, code)
}

func mustGet(t *testing.T, id string) []byte {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	return body
}

// TestAPICrossShardMoveReadableAtOnce: a move to a queue on another shard
// answers only once the job can be read at its new ID; the old ID reads
// it too.
func TestAPICrossShardMoveReadableAtOnce(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "moveread", 2)
	for i := 0; i < 40; i++ {
		id := enqueue(t, map[string]any{"queue": qs[0], "payload": map[string]any{"n": i}})
		nid := moveJob(t, id, qs[1])
		require.NotEqual(t, id, nid)
		code, body := call(t, "GET", "/api/v1/jobs/"+nid, nil)
		require.Equal(t, 200, code, "iteration %d: %s", i, body)
		d := mustJSON[movedDoc](t, mustGet(t, id))
		require.Equal(t, nid, d.ID)
	}
}

// TestAPIUnclaim: a worker gives back a job it claimed and will not run:
// pending at once, the attempt not counted (a job without retries is not
// dead for it), no error; only the lease's holder may, once; a job whose
// cancel came while it was held is cancelled instead.
func TestAPIUnclaim(t *testing.T) {
	t.Parallel()
	q := uq("unclaim")
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}, "max_retries": 0})
	j, ok := fetchOne(t, 5, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	lease := map[string]any{"worker_id": "w-" + t.Name(), "attempt": 1}
	code, body := call(t, "POST", "/api/v1/unclaim/"+id, lease)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"status":"pending"}`, string(body))
	doc := getJob(t, id)
	require.Equal(t, "pending", doc.State)
	require.Zero(t, doc.Attempt)
	require.Empty(t, doc.Errors)
	code, body = call(t, "POST", "/api/v1/unclaim/"+id, lease)
	require.Equal(t, 409, code, "the lease is gone: %s", body)
	j, ok = fetchOne(t, 5, q)
	require.True(t, ok, "pending again at once")
	require.Equal(t, 1, j.Attempt, "a first attempt again")

	c := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	code, body = call(t, "POST", "/api/v1/ack/"+id, lease)
	require.Equal(t, 200, code, string(body))
	_, ok = fetchOne(t, 5, q)
	require.True(t, ok)
	code, body = call(t, "POST", "/api/v1/jobs/"+c+"/cancel", nil)
	require.Equal(t, 200, code, string(body))
	code, body = call(t, "POST", "/api/v1/unclaim/"+c, lease)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"status":"cancelled"}`, string(body))
	require.Equal(t, "cancelled", getJob(t, c).State)
}

// TestAPIFailZeroBackoffSaysRetrying: a failure with retries left answers
// "retrying" with next_attempt_at even when the backoff is none; the job
// itself is fetchable again at once.
func TestAPIFailZeroBackoffSaysRetrying(t *testing.T) {
	t.Parallel()
	q := uq("fail-none")
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}, "retry_backoff": "none", "max_retries": 2})
	j, ok := fetchOne(t, 5, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	code, body := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"error": "boom"})
	require.Equal(t, 200, code, string(body))
	r := mustJSON[struct {
		Status            string  `json:"status"`
		NextAttemptAt     *string `json:"next_attempt_at"`
		AttemptsRemaining int     `json:"attempts_remaining"`
	}](t, body)
	require.Equal(t, "retrying", r.Status, string(body))
	require.NotNil(t, r.NextAttemptAt, string(body))
	require.Equal(t, 1, r.AttemptsRemaining)
	j, ok = fetchOne(t, 0, q)
	require.True(t, ok, "a zero-delay retry is fetchable at once")
	require.Equal(t, id, j.JobID)
	code, body = call(t, "POST", "/api/v1/fail/"+id, map[string]any{"error": "boom"})
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"status":"dead"`)
}

// TestAPIDurationsAreIntegerMilliseconds: every duration_ms the API writes
// (search, bulk) decodes as an integer.
func TestAPIDurationsAreIntegerMilliseconds(t *testing.T) {
	t.Parallel()
	q := uq("durms")
	enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	code, body := call(t, "POST", "/api/v1/jobs/search", map[string]any{"queue": q})
	require.Equal(t, 200, code, string(body))
	var page struct {
		DurationMs *int64 `json:"duration_ms"`
	}
	require.NoError(t, json.Unmarshal(body, &page), string(body))
	require.NotNil(t, page.DurationMs)
	code, body = call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{"queue": q}, "action": "cancel", "confirm": true})
	require.Equal(t, 200, code, string(body))
	var bulk struct {
		DurationMs *int64 `json:"duration_ms"`
	}
	require.NoError(t, json.Unmarshal(body, &bulk), string(body))
	require.NotNil(t, bulk.DurationMs)
}

// TestAPINumericPriorities: the earlier Corvo's numeric tiers (0 critical,
// 1 high, 2 normal) are accepted wherever a request carries a priority;
// answers name the tier; other numbers are rejected and change nothing.
func TestAPINumericPriorities(t *testing.T) {
	t.Parallel()
	q := uq("numprio")
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}, "priority": 0})
	require.Equal(t, "critical", mustJSON[movedDoc](t, mustGet(t, id)).Priority)

	code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{
		{"queue": q, "payload": map[string]any{}, "priority": 1},
		{"queue": q, "payload": map[string]any{}, "priority": "normal"},
	}})
	require.Equal(t, 201, code, string(body))
	ids := mustJSON[struct {
		JobIDs []string `json:"job_ids"`
	}](t, body).JobIDs
	require.Equal(t, "high", mustJSON[movedDoc](t, mustGet(t, ids[0])).Priority)
	require.Equal(t, "normal", mustJSON[movedDoc](t, mustGet(t, ids[1])).Priority)

	code, body = call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"job_ids": []string{ids[1]}, "action": "change_priority", "priority": 0})
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "critical", mustJSON[movedDoc](t, mustGet(t, ids[1])).Priority)

	code, body = call(t, "POST", "/api/v1/schedules", map[string]any{"name": uq("numprio"), "queue": q, "cron": "0 9 * * *", "priority": 1})
	require.Equal(t, 201, code, string(body))
	require.Contains(t, string(body), `"priority":"high"`)

	code, body = call(t, "POST", "/api/v1/jobs/search", map[string]any{"queue": q, "priority": 2})
	require.Equal(t, 200, code, string(body))

	for _, bad := range []any{3, -1, 1.5, "urgent", true, "0"} {
		code, body = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{}, "priority": bad})
		require.Equal(t, 400, code, "%v → %s", bad, body)
		require.Contains(t, string(body), `"code":`)
		code, body = call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{{"queue": q, "priority": bad}}})
		require.Equal(t, 400, code, "%v → %s", bad, body)
		code, body = call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"job_ids": []string{id}, "action": "change_priority", "priority": bad})
		require.Equal(t, 400, code, "%v → %s", bad, body)
		code, body = call(t, "POST", "/api/v1/schedules", map[string]any{"name": uq("numprio-bad"), "queue": q, "cron": "0 9 * * *", "priority": bad})
		require.Equal(t, 400, code, "%v → %s", bad, body)
	}
	require.Equal(t, "critical", mustJSON[movedDoc](t, mustGet(t, id)).Priority)
	code, body = call(t, "POST", "/api/v1/jobs/search", map[string]any{"queue": q, "priority": 3})
	require.Equal(t, 400, code, string(body))
}

// TestAPISearchReadsItsWrites: a search right after an enqueue on the same
// node always finds the job (the search waits for the mirror).
func TestAPISearchReadsItsWrites(t *testing.T) {
	t.Parallel()
	q := uq("ryw")
	for i := 0; i < 60; i++ {
		id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{"n": i}})
		code, body := call(t, "POST", "/api/v1/jobs/search", map[string]any{"queue": q, "limit": 1})
		require.Equal(t, 200, code, string(body))
		require.NotContains(t, string(body), `"stale"`)
		page := mustJSON[struct {
			Jobs  []struct{ ID string } `json:"jobs"`
			Total int                   `json:"total"`
		}](t, body)
		require.Equal(t, i+1, page.Total, "iteration %d", i)
		require.Len(t, page.Jobs, 1)
		require.Equal(t, id, page.Jobs[0].ID, "iteration %d: the newest job", i)
	}
}

// TestAPIBulkByFilterReadsItsWrites: a bulk retry by filter right after
// jobs died retries all of them.
func TestAPIBulkByFilterReadsItsWrites(t *testing.T) {
	t.Parallel()
	q := uq("ryw-bulk")
	for round := 0; round < 5; round++ {
		const n = 5
		for i := 0; i < n; i++ {
			enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}, "max_retries": 0})
		}
		for i := 0; i < n; i++ {
			j, ok := fetchOne(t, 5, q)
			require.True(t, ok)
			code, body := call(t, "POST", "/api/v1/fail/"+j.JobID, map[string]any{"error": "boom"})
			require.Equal(t, 200, code, string(body))
			require.Contains(t, string(body), `"status":"dead"`)
		}
		code, body := call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{"queue": q, "state": []string{"dead"}}, "action": "retry"})
		require.Equal(t, 200, code, string(body))
		require.Contains(t, string(body), `"affected":5,`, "round %d", round)
		// Completed so the next round's fetches see only new jobs.
		for i := 0; i < n; i++ {
			j, ok := fetchOne(t, 5, q)
			require.True(t, ok)
			code, _ = call(t, "POST", "/api/v1/ack/"+j.JobID, nil)
			require.Equal(t, 200, code)
		}
	}
}

// TestAPIMoveWithPriority: a move may set the job's priority (on the same
// shard and across shards); without one the job keeps its own; a bad one
// is a 400 that moves nothing.
func TestAPIMoveWithPriority(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "moveprio", 2)
	rt := router.New(4)
	near := ""
	for i := 0; near == ""; i++ {
		if n := fmt.Sprintf("%s-near%d", qs[0], i); rt.ShardForQueue(n) == rt.ShardForQueue(qs[0]) {
			near = n
		}
	}
	prioOf := func(id string) (string, string) {
		d := mustJSON[struct {
			Queue    string `json:"queue"`
			Priority string `json:"priority"`
		}](t, mustGet(t, id))
		return d.Queue, d.Priority
	}
	id := enqueue(t, map[string]any{"queue": qs[0], "priority": "critical"})
	code, body := call(t, "POST", "/api/v1/jobs/"+id+"/move", map[string]any{"queue": qs[1], "priority": "bulk"})
	require.Equal(t, 400, code, string(body))
	q, p := prioOf(id)
	require.Equal(t, qs[0], q)
	require.Equal(t, "critical", p)

	nid := mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, mustPost(t, "/api/v1/jobs/"+id+"/move", map[string]any{"queue": qs[1], "priority": "normal"})).JobID
	q, p = prioOf(nid)
	require.Equal(t, qs[1], q)
	require.Equal(t, "normal", p, "across shards")

	id2 := enqueue(t, map[string]any{"queue": qs[0], "priority": "normal"})
	mustPost(t, "/api/v1/jobs/"+id2+"/move", map[string]any{"queue": near, "priority": "high"})
	id3 := enqueue(t, map[string]any{"queue": qs[0], "priority": "high"})
	mustPost(t, "/api/v1/jobs/"+id3+"/move", map[string]any{"queue": near})
	for _, c := range []struct{ id, want string }{{id2, "high"}, {id3, "high"}} {
		_, p = prioOf(c.id)
		require.Equal(t, c.want, p, c.id)
	}
}

func mustPost(t *testing.T, path string, body any) []byte {
	t.Helper()
	code, resp := call(t, "POST", path, body)
	require.Equal(t, 200, code, string(resp))
	return resp
}
