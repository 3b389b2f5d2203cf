package gateway

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type searchPage struct {
	Total   int     `json:"total"`
	HasMore bool    `json:"has_more"`
	Cursor  *string `json:"cursor"`
	Jobs    []struct {
		ID       string `json:"id"`
		WorkerID string `json:"worker_id"`
	} `json:"jobs"`
}

func search(t *testing.T, f map[string]any) searchPage {
	t.Helper()
	code, body := call(t, "POST", "/api/v1/jobs/search", f)
	require.Equal(t, 200, code, string(body))
	return mustJSON[searchPage](t, body)
}

// waitSearchTotal polls until a search's total is want (the mirror applies
// asynchronously), failing after 20 s.
func waitSearchTotal(t *testing.T, f map[string]any, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p := search(t, f)
		if p.Total == want {
			return
		}
		require.True(t, time.Now().Before(deadline), "search %v: total %d, want %d", f, p.Total, want)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSearchEveryFilter runs every filter of the spec's table against the
// real server over a queue of 10,000 jobs in known shapes, and checks each
// total against what the test made.
func TestSearchEveryFilter(t *testing.T) {
	t.Parallel()
	const n = 10000
	q := uq("search.all")
	cbq := uq("search.all-callback")
	start := time.Now().UTC()
	rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	var split time.Time // between the jobs 0–4999 and 5000–9999
	var batchID string
	var ids []string
	counts := map[string]int{}
	for chunk := 0; chunk < n/1000; chunk++ {
		if chunk == 5 {
			time.Sleep(2 * time.Millisecond)
			split = time.Now()
			time.Sleep(2 * time.Millisecond)
		}
		var jobs []map[string]any
		for i := chunk * 1000; i < (chunk+1)*1000; i++ {
			j := map[string]any{"queue": q, "max_retries": 0,
				"payload":  map[string]any{"i": i, "kind": []string{"a", "b"}[i%2], "amount": i % 500, "nested": map[string]any{"x": i % 7}},
				"tags":     map[string]string{"tenant": []string{"acme", "globex"}[i%2], "n": fmt.Sprint(i % 3)},
				"priority": []string{"high", "normal", "critical"}[i%3]}
			if i%10 == 0 { // 1,000 scheduled: half in one hour, half in two
				j["scheduled_at"] = rfc(start.Add(time.Hour * time.Duration(1+i%20/10)))
				counts["scheduled"]++
			}
			if i%4 == 0 {
				j["expire_after"] = "3h"
				counts["expiring"]++
			}
			if i < 3 {
				j["unique_key"] = fmt.Sprintf("%s-uk-%d", q, i)
			}
			jobs = append(jobs, j)
			if i%3 == 0 {
				counts["high"]++
			}
		}
		req := map[string]any{"jobs": jobs}
		if chunk == 9 {
			req["batch"] = map[string]any{"callback_queue": cbq}
		}
		code, body := call(t, "POST", "/api/v1/enqueue/batch", req)
		require.Equal(t, 201, code, string(body))
		r := mustJSON[struct {
			JobIDs  []string `json:"job_ids"`
			BatchID string   `json:"batch_id"`
		}](t, body)
		require.Len(t, r.JobIDs, 1000)
		ids = append(ids, r.JobIDs...)
		if chunk == 9 {
			batchID = r.BatchID
		}
	}
	// 50 jobs are fetched by one worker: 20 complete, 10 die with an SMTP
	// error, 20 stay active.
	fetchedAt := time.Now()
	worker := "w-" + q
	code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "count": 50, "worker_id": worker})
	require.Equal(t, 200, code, string(body))
	fetched := mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs
	require.Len(t, fetched, 50)
	inFetched := map[string]bool{}
	for i, j := range fetched {
		inFetched[j.JobID] = true
		switch {
		case i < 20:
			code, body = call(t, "POST", "/api/v1/ack/"+j.JobID, map[string]any{})
		case i < 30:
			code, body = call(t, "POST", "/api/v1/fail/"+j.JobID, map[string]any{"error": "SMTP 421 try later"})
		default:
			continue
		}
		require.Equal(t, 200, code, string(body))
	}
	after := time.Now()
	waitSearchTotal(t, map[string]any{"queue": q, "state": []string{"completed", "dead"}, "has_errors": true}, 10)
	waitSearchTotal(t, map[string]any{"queue": q, "state": []string{"completed"}, "attempt_min": 1}, 20)

	pendingN := n - counts["scheduled"] - 50
	for _, c := range []struct {
		name string
		f    map[string]any
		want int
	}{
		{"queue", map[string]any{}, n},
		{"state pending", map[string]any{"state": []string{"pending"}}, pendingN},
		{"state scheduled", map[string]any{"state": []string{"scheduled"}}, counts["scheduled"]},
		{"states active+completed", map[string]any{"state": []string{"active", "completed"}}, 40},
		{"state dead", map[string]any{"state": []string{"dead"}}, 10},
		{"priority", map[string]any{"priority": "high"}, counts["high"]},
		{"tags", map[string]any{"tags": map[string]string{"tenant": "acme"}}, n / 2},
		{"tags, two keys", map[string]any{"tags": map[string]string{"tenant": "acme", "n": "0"}}, countI(n, func(i int) bool { return i%6 == 0 })},
		{"payload_contains", map[string]any{"payload_contains": `"kind":"b"`}, n / 2},
		{"payload_contains, no match", map[string]any{"payload_contains": `"kind":"c"`}, 0},
		{"jq comparison", map[string]any{"payload_jq": ".amount >= 400"}, n / 5},
		{"jq nested and", map[string]any{"payload_jq": `.nested.x == 3 and .kind == "a"`}, countI(n, func(i int) bool { return i%7 == 3 && i%2 == 0 })},
		{"jq or / not", map[string]any{"payload_jq": `(.amount < 10) or not (.kind == "a")`}, countI(n, func(i int) bool { return i%500 < 10 || i%2 == 1 })},
		{"jq startswith", map[string]any{"payload_jq": `.kind | startswith("a")`}, n / 2},
		{"jq !=", map[string]any{"payload_jq": `.i != 5`}, n - 1},
		{"created_after", map[string]any{"created_after": rfc(split)}, n / 2},
		{"created_before", map[string]any{"created_before": rfc(split)}, n / 2},
		{"scheduled_after", map[string]any{"scheduled_after": rfc(start.Add(90 * time.Minute))}, counts["scheduled"] / 2},
		{"scheduled_before", map[string]any{"scheduled_before": rfc(start.Add(90 * time.Minute)), "state": []string{"scheduled"}}, counts["scheduled"] / 2},
		{"started_after", map[string]any{"started_after": rfc(fetchedAt)}, 50},
		{"started_before", map[string]any{"started_before": rfc(fetchedAt)}, 0},
		// completed_at is when a job ended: acked, dead or cancelled.
		{"completed_after/before", map[string]any{"completed_after": rfc(fetchedAt), "completed_before": rfc(after)}, 30},
		{"completed_after, completed", map[string]any{"completed_after": rfc(fetchedAt), "state": []string{"completed"}}, 20},
		{"completed_before", map[string]any{"completed_before": rfc(fetchedAt)}, 0},
		{"expire_after", map[string]any{"expire_after": rfc(start.Add(2 * time.Hour))}, counts["expiring"]},
		{"expire_before", map[string]any{"expire_before": rfc(start.Add(2 * time.Hour))}, 0},
		{"worker_id, active", map[string]any{"worker_id": worker, "state": []string{"active"}}, 20},
		{"has_errors", map[string]any{"has_errors": true}, 10},
		{"has_errors false", map[string]any{"has_errors": false}, n - 10},
		{"error_contains", map[string]any{"error_contains": "421 try"}, 10},
		{"error_contains, no match", map[string]any{"error_contains": "ECONNRESET"}, 0},
		{"batch_id", map[string]any{"batch_id": batchID}, 1000},
		{"unique_key", map[string]any{"unique_key": q + "-uk-1"}, 1},
		{"attempt_min", map[string]any{"attempt_min": 1}, 50},
		{"attempt_max", map[string]any{"attempt_max": 0}, n - 50},
		{"job_id_prefix, whole ID", map[string]any{"job_id_prefix": ids[1234]}, 1},
		{"job_id_prefix, lower case", map[string]any{"job_id_prefix": strings.ToLower(ids[1234])}, 1},
		{"job_id_prefix, shard", map[string]any{"job_id_prefix": ids[0][:strings.LastIndexByte(ids[0], '_')+1]}, n},
	} {
		f := map[string]any{"queue": q, "limit": 1}
		for k, v := range c.f {
			f[k] = v
		}
		require.Equal(t, c.want, search(t, f).Total, "%s: %v", c.name, f)
	}
	// worker_id over every state: the 50 fetched jobs at most, and at least
	// the 20 still active.
	p := search(t, map[string]any{"worker_id": worker, "limit": 100})
	require.GreaterOrEqual(t, p.Total, 20)
	for _, j := range p.Jobs {
		require.True(t, inFetched[j.ID], "%s was never fetched by %s", j.ID, worker)
	}
	// A sort without an index: priority ascending puts critical first.
	code, body = call(t, "POST", "/api/v1/jobs/search", map[string]any{"queue": q, "state": []string{"pending"}, "sort": "priority", "order": "asc", "limit": 5})
	require.Equal(t, 200, code, string(body))
	for _, j := range mustJSON[struct {
		Jobs []struct{ Priority string } `json:"jobs"`
	}](t, body).Jobs {
		require.Equal(t, "critical", j.Priority, "priority asc puts critical first")
	}
}

func countI(n int, f func(int) bool) int {
	c := 0
	for i := 0; i < n; i++ {
		if f(i) {
			c++
		}
	}
	return c
}

// TestSearchCursorWalkWhileAdding walks a result set of 1,234 jobs with
// cursors, 100 at a time, while another goroutine keeps adding jobs that
// match the same filter: every job of the set comes exactly once, and
// nothing added after the walk began slips in behind the cursor.
func TestSearchCursorWalkWhileAdding(t *testing.T) {
	t.Parallel()
	q := uq("search.walk")
	var want []string
	for len(want) < 1234 {
		var jobs []map[string]any
		for i := 0; i < 617; i++ {
			jobs = append(jobs, map[string]any{"queue": q, "payload": map[string]int{"i": len(want) + i}, "tags": map[string]string{"set": "walk"}})
		}
		code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
		require.Equal(t, 201, code, string(body))
		want = append(want, mustJSON[struct {
			JobIDs []string `json:"job_ids"`
		}](t, body).JobIDs...)
	}
	filter := map[string]any{"queue": q, "tags": map[string]string{"set": "walk"}, "limit": 100}
	waitSearchTotal(t, filter, 1234)

	stop := make(chan struct{})
	var added sync.WaitGroup
	added.Add(1)
	go func() {
		defer added.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{
				{"queue": q, "payload": map[string]int{"late": i}, "tags": map[string]string{"set": "walk"}}}})
			if code != 201 {
				t.Errorf("enqueue while walking: %d %s", code, body)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	seen := map[string]bool{}
	var cursor *string
	pages := 0
	for {
		f := map[string]any{}
		for k, v := range filter {
			f[k] = v
		}
		if cursor != nil {
			f["cursor"] = *cursor
		}
		p := search(t, f)
		pages++
		for _, j := range p.Jobs {
			require.False(t, seen[j.ID], "%s came twice", j.ID)
			seen[j.ID] = true
		}
		if !p.HasMore {
			break
		}
		require.NotNil(t, p.Cursor)
		cursor = p.Cursor
		time.Sleep(5 * time.Millisecond) // let the producer add more between pages
	}
	close(stop)
	added.Wait()
	// The first page may hold jobs added before it was read; every later
	// page comes after the cursor, so it holds only the original set.
	for _, id := range want {
		require.True(t, seen[id], "%s was skipped", id)
	}
	require.GreaterOrEqual(t, pages, 13)
	late := len(seen) - len(want)
	require.LessOrEqual(t, late, 100, "only the first page can hold jobs added during the walk")
}
