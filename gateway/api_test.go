package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
	shardpkg "github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

var httpc = &http.Client{Timeout: 30 * time.Second}

func call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	return callAt(t, method, baseURL+path, body)
}

// callAt is call against any server: a JSON body (or a string as is),
// declared application/json on POST and PUT.
func callAt(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	return callWith(t, httpc, method, url, body)
}

// callWith is callAt through client c.
func callWith(t *testing.T, c *http.Client, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if method == "POST" || method == "PUT" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// uq makes a queue name unique to this test run: the server is shared by
// every test and every -count repetition.
func uq(name string) string { return fmt.Sprintf("%s-r%d", name, queueSeq.Add(1)) }

var queueSeq atomic.Int64

func mustJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

func enqueue(t *testing.T, job map[string]any) string {
	t.Helper()
	code, body := call(t, "POST", "/api/v1/enqueue", job)
	require.Equal(t, 201, code, string(body))
	return mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
}

type fetchedJob struct {
	JobID      string          `json:"job_id"`
	Queue      string          `json:"queue"`
	Priority   string          `json:"priority"`
	Attempt    int             `json:"attempt"`
	Checkpoint json.RawMessage `json:"checkpoint"`
	Payload    json.RawMessage `json:"payload"`
}

func fetchOne(t *testing.T, timeout float64, queues ...string) (fetchedJob, bool) {
	t.Helper()
	code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": queues, "worker_id": "w-" + t.Name(), "timeout": timeout})
	if code == 204 {
		return fetchedJob{}, false
	}
	require.Equal(t, 200, code, string(body))
	return mustJSON[fetchedJob](t, body), true
}

type jobDoc struct {
	ID               string          `json:"id"`
	State            string          `json:"state"`
	Attempt          int             `json:"attempt"`
	AttemptsRemain   int             `json:"attempts_remaining"`
	FailedAt         string          `json:"failed_at"`
	Reason           *string         `json:"reason"`
	Checkpoint       json.RawMessage `json:"checkpoint"`
	Progress         json.RawMessage `json:"progress"`
	Tags             map[string]any  `json:"tags"`
	Errors           []jobError      `json:"errors"`
	RetryBaseDelay   string          `json:"retry_base_delay"`
	CancelRequested  bool            `json:"cancel_requested"`
	LeaseDurationSec int             `json:"lease_duration"`
}

type jobError struct {
	Attempt   int     `json:"attempt"`
	Error     string  `json:"error"`
	Backtrace *string `json:"backtrace"`
	At        string  `json:"at"`
}

func getJob(t *testing.T, id string) jobDoc {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	return mustJSON[jobDoc](t, body)
}

// queuesOnDistinctShards returns n queue names that live on n different
// shards, so a test crosses shard boundaries for sure.
func queuesOnDistinctShards(t *testing.T, prefix string, n int) []string {
	t.Helper()
	rt := router.New(4)
	seen := map[int]bool{}
	var out []string
	prefix = uq(prefix)
	for i := 0; len(out) < n; i++ {
		q := fmt.Sprintf("%s-%d", prefix, i)
		if s := rt.ShardForQueue(q); !seen[s] {
			seen[s] = true
			out = append(out, q)
		}
	}
	return out
}

func TestAPIPriorityAcrossShardsAndQueues(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "prio", 3)
	type e struct {
		q    string
		prio string
	}
	plan := []e{{qs[0], "normal"}, {qs[1], "high"}, {qs[2], "normal"}, {qs[2], "critical"}, {qs[0], "high"},
		{qs[1], "critical"}, {qs[1], "normal"}, {qs[0], "critical"}, {qs[2], "high"}}
	byTier := map[string][]string{}
	for _, p := range plan {
		id := enqueue(t, map[string]any{"queue": p.q, "payload": map[string]string{"p": p.prio}, "priority": p.prio})
		byTier[p.prio] = append(byTier[p.prio], id)
	}
	want := append(append(append([]string{}, byTier["critical"]...), byTier["high"]...), byTier["normal"]...)
	var got []string
	for range want {
		j, ok := fetchOne(t, 0, qs...)
		require.True(t, ok)
		got = append(got, j.JobID)
	}
	require.Equal(t, want, got, "critical before high before normal, FIFO within a tier")
	_, ok := fetchOne(t, 0, qs...)
	require.False(t, ok)
}

func TestAPIBackoffSchedulesAndDead(t *testing.T) {
	t.Parallel()
	delays := map[string][]time.Duration{
		"none":        {0, 0, 0},
		"fixed":       {100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
		"linear":      {100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond},
		"exponential": {100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond},
	}
	for strategy, want := range delays {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			q := uq("backoff-" + strategy)
			id := enqueue(t, map[string]any{"queue": q, "payload": map[string]int{}, "max_retries": 4,
				"retry_backoff": strategy, "retry_base_delay": "100ms", "retry_max_delay": "250ms"})
			for attempt := 1; attempt <= 4; attempt++ {
				j, ok := fetchOne(t, 5, q)
				require.True(t, ok, "attempt %d was never fetched", attempt)
				require.Equal(t, attempt, j.Attempt)
				code, body := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"error": fmt.Sprintf("boom %d", attempt), "backtrace": "at x:1"})
				require.Equal(t, 200, code, string(body))
				r := mustJSON[struct {
					Status        string `json:"status"`
					NextAttemptAt string `json:"next_attempt_at"`
					Remaining     int    `json:"attempts_remaining"`
				}](t, body)
				require.Equal(t, 4-attempt, r.Remaining)
				if attempt == 4 {
					require.Equal(t, "dead", r.Status)
					break
				}
				doc := getJob(t, id)
				failedAt, err := time.Parse(time.RFC3339Nano, doc.FailedAt)
				require.NoError(t, err)
				next, err := time.Parse(time.RFC3339Nano, r.NextAttemptAt)
				require.NoError(t, err)
				require.Equal(t, want[attempt-1], next.Sub(failedAt), "delay after attempt %d", attempt)
				// The answer is the outcome, whatever the delay (with none
				// the job itself is pending at once).
				require.Equal(t, "retrying", r.Status)
				if want[attempt-1] == 0 {
					require.Equal(t, "pending", doc.State)
				}
			}
			doc := getJob(t, id)
			require.Equal(t, "dead", doc.State)
			require.Equal(t, 0, doc.AttemptsRemain)
			require.Len(t, doc.Errors, 4)
			for i, e := range doc.Errors {
				require.Equal(t, i+1, e.Attempt)
				require.Equal(t, fmt.Sprintf("boom %d", i+1), e.Error)
				require.Equal(t, "at x:1", *e.Backtrace)
			}
		})
	}
}

func TestAPIReclaimKeepsCheckpoint(t *testing.T) {
	t.Parallel()
	q := uq("reclaim")
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]int{}, "lease_duration": 1})
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	code, body := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w-" + t.Name(),
		"jobs": map[string]any{id: map[string]any{"checkpoint": map[string]int{"offset": 47000}, "progress": map[string]any{"current": 450, "total": 1000}}}})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"jobs":{"`+id+`":{"status":"ok"}}}`, string(body))
	// The worker goes silent; the lease expires and the job comes back.
	j, ok = fetchOne(t, 10, q)
	require.True(t, ok, "the job was never reclaimed")
	require.Equal(t, id, j.JobID)
	require.Equal(t, 2, j.Attempt)
	require.JSONEq(t, `{"offset":47000}`, string(j.Checkpoint))
	doc := getJob(t, id)
	require.Len(t, doc.Errors, 1)
	require.Contains(t, doc.Errors[0].Error, "lease expired")
	// The first worker's lease is gone: its heartbeat and ack conflict.
	code, _ = call(t, "POST", "/api/v1/ack/"+id, map[string]any{"attempt": 1})
	require.Equal(t, 409, code)
}

func TestAPICancel(t *testing.T) {
	t.Parallel()
	q := uq("cancel")
	pending := enqueue(t, map[string]any{"queue": q, "payload": 1})
	code, body := call(t, "POST", "/api/v1/jobs/"+pending+"/cancel", nil)
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"status":"cancelled"}`, string(body))
	code, _ = call(t, "POST", "/api/v1/jobs/"+pending+"/cancel", nil)
	require.Equal(t, 409, code, "a cancelled job cannot be cancelled again")

	active := enqueue(t, map[string]any{"queue": q, "payload": 2})
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, active, j.JobID)
	code, body = call(t, "POST", "/api/v1/jobs/"+active+"/cancel", nil)
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"status":"cancelling"}`, string(body))
	require.True(t, getJob(t, active).CancelRequested)
	code, body = call(t, "POST", "/api/v1/heartbeat", map[string]any{"jobs": map[string]any{active: map[string]any{}}})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"jobs":{"`+active+`":{"status":"cancel"}}}`, string(body))
	require.Equal(t, "cancelled", getJob(t, active).State)
	code, _ = call(t, "POST", "/api/v1/ack/"+active, nil)
	require.Equal(t, 409, code)
}

func TestAPIFetchBatchAndAckBatch(t *testing.T) {
	t.Parallel()
	q := uq("batches")
	var jobs []map[string]any
	for i := 0; i < 25; i++ {
		jobs = append(jobs, map[string]any{"queue": q, "payload": map[string]int{"i": i}, "tags": map[string]string{"tenant": "acme"}})
	}
	code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))
	ids := mustJSON[struct {
		JobIDs []string `json:"job_ids"`
	}](t, body).JobIDs
	require.Len(t, ids, 25)
	require.Equal(t, map[string]any{"tenant": "acme"}, getJob(t, ids[3]).Tags)

	code, body = call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "count": 10, "worker_id": "w"})
	require.Equal(t, 200, code, string(body))
	got := mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs
	require.Len(t, got, 10)
	var acks []map[string]any
	for i, j := range got {
		require.Equal(t, ids[i], j.JobID, "FIFO")
		acks = append(acks, map[string]any{"job_id": j.JobID, "result": map[string]int{"n": i}})
	}
	acks = append(acks, map[string]any{"job_id": ids[20]}) // never fetched: 409
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": acks})
	require.Equal(t, 200, code, string(body))
	r := mustJSON[struct {
		Acked  int `json:"acked"`
		Errors []struct {
			JobID string `json:"job_id"`
			Code  string `json:"code"`
		} `json:"errors"`
	}](t, body)
	require.Equal(t, 10, r.Acked)
	require.Len(t, r.Errors, 1)
	require.Equal(t, ids[20], r.Errors[0].JobID)
	require.Equal(t, "conflict", r.Errors[0].Code)
	require.Equal(t, "completed", getJob(t, ids[0]).State)
}

func TestAPIScheduledJobPromoted(t *testing.T) {
	t.Parallel()
	q := uq("scheduled")
	// 3 s ahead: under -race beside the other packages an enqueue took
	// over 300 ms to commit, and the job was due (pending) by then.
	at := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	code, body := call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": 1, "scheduled_at": at})
	require.Equal(t, 201, code, string(body))
	require.Contains(t, string(body), `"status":"scheduled"`)
	_, ok := fetchOne(t, 0, q)
	require.False(t, ok, "not before scheduled_at")
	j, ok := fetchOne(t, 10, q)
	require.True(t, ok, "the long-poll wakes when the job is promoted")
	require.Equal(t, 1, j.Attempt)
}

// TestAPIBadInput: every malformed request gets the right 4xx JSON error
// and changes nothing.
func TestAPIBadInput(t *testing.T) {
	t.Parallel()
	heldQ := uq("bad-held")
	held := enqueue(t, map[string]any{"queue": heldQ, "payload": 1})
	_, ok := fetchOne(t, 1, heldQ)
	require.True(t, ok)
	big := `{"queue":"bad-input","payload":"` + strings.Repeat("x", MaxPayloadDefault) + `"}`
	tooMany := make([]map[string]any, MaxBatchJobsDefault+1)
	for i := range tooMany {
		tooMany[i] = map[string]any{"queue": "bad-input"}
	}
	cases := []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"POST", "/api/v1/enqueue", `{"queue":`, 400, "invalid_json"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input"} trailing`, 400, "invalid_json"},
		{"POST", "/api/v1/enqueue", `[]`, 400, "invalid_json"},
		{"POST", "/api/v1/enqueue", ``, 400, "invalid_json"},
		{"POST", "/api/v1/enqueue", `{"payload":{}}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"has space"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":42}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","tags":"x"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","max_retries":"5"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","max_retries":-1}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","priority":"urgent"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","retry_backoff":"random"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","retry_base_delay":"5x"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","expire_after":"0s"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","scheduled_at":"tomorrow"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", `{"queue":"bad-input","prioritty":"high"}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue", big, 413, "payload_too_large"},
		{"POST", "/api/v1/enqueue/batch", `{"jobs":[]}`, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []any{map[string]any{"queue": "bad-input"}, map[string]any{"queue": "bad input"}}}, 400, "invalid_request"},
		{"POST", "/api/v1/enqueue/batch", map[string]any{"jobs": tooMany}, 413, "batch_too_large"},
		{"POST", "/api/v1/fetch", `{"queues":[]}`, 400, "invalid_request"},
		{"POST", "/api/v1/fetch", `{"queues":["bad-input"],"count":0}`, 400, "invalid_request"},
		{"POST", "/api/v1/fetch", `{"queues":["bad-input"],"timeout":-1}`, 400, "invalid_request"},
		{"POST", "/api/v1/fetch", `{"queues":"bad-input"}`, 400, "invalid_request"},
		{"POST", "/api/v1/ack/" + held, `{"result":`, 400, "invalid_json"},
		{"POST", "/api/v1/ack/" + held, `{"step_status":"later"}`, 400, "invalid_request"},
		{"POST", "/api/v1/ack/" + held, `{"worker_id":"someone-else"}`, 409, "conflict"},
		{"POST", "/api/v1/ack/job_0_01HX7Y2K3M0000000000000000", `{}`, 404, "not_found"},
		{"POST", "/api/v1/ack/nonsense", `{}`, 404, "not_found"},
		{"POST", "/api/v1/fail/" + held, `{}`, 400, "invalid_request"},
		{"POST", "/api/v1/fail/" + held, `{"error":5}`, 400, "invalid_request"},
		{"POST", "/api/v1/unclaim/" + held, nil, 400, "invalid_json"},
		{"POST", "/api/v1/unclaim/" + held, `{}`, 400, "invalid_request"},
		{"POST", "/api/v1/unclaim/" + held, `{"worker_id":"w-TestAPIBadInput"}`, 400, "invalid_request"},
		{"POST", "/api/v1/unclaim/" + held, `{"worker_id":"w-TestAPIBadInput","attempt":"1"}`, 400, "invalid_request"},
		{"POST", "/api/v1/unclaim/" + held, `{"worker_id":"someone-else","attempt":1}`, 409, "conflict"},
		{"POST", "/api/v1/unclaim/" + held, `{"worker_id":"w-TestAPIBadInput","attempt":2}`, 409, "conflict"},
		{"POST", "/api/v1/unclaim/job_0_01HX7Y2K3M0000000000000000", `{"worker_id":"w","attempt":1}`, 404, "not_found"},
		{"POST", "/api/v1/heartbeat", `{"jobs":{}}`, 400, "invalid_request"},
		{"POST", "/api/v1/heartbeat", `{"jobs":[]}`, 400, "invalid_request"},
		{"GET", "/api/v1/jobs/job_9_01HX7Y2K3M0000000000000000", nil, 404, "not_found"},
		{"POST", "/api/v1/jobs/nonsense/cancel", nil, 404, "not_found"},
		{"GET", "/api/v1/nope", nil, 404, "not_found"},
		{"DELETE", "/api/v1/enqueue", nil, 405, "method_not_allowed"},
		{"POST", "/api/v1/queues/bad-input/concurrency", `{"max":-1}`, 400, "invalid_request"},
		{"POST", "/api/v1/queues/bad-input/concurrency", `{"max":"1"}`, 400, "invalid_request"},
		{"POST", "/api/v1/queues/bad input/concurrency", `{"max":1}`, 400, "invalid_request"},
		{"POST", "/api/v1/queues/bad-input/throttle", `{"period":"1m"}`, 400, "invalid_request"},
		{"POST", "/api/v1/queues/bad-input/throttle", `{"rate":10,"period":"5x"}`, 400, "invalid_request"},
		{"POST", "/api/v1/queues/bad-input/throttle", `{"rate":10,"period":"1m","window_ms":5}`, 400, "invalid_request"},
		{"POST", "/api/v1/queues/bad-input/throttle", `{"rate":10}`, 400, "invalid_request"},
	}
	for _, c := range cases {
		code, body := call(t, c.method, c.path, c.body)
		name := fmt.Sprintf("%s %s %.60v", c.method, c.path, c.body)
		require.Equal(t, c.status, code, "%s → %s", name, body)
		e := mustJSON[struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}](t, body)
		require.Equal(t, c.code, e.Code, name)
		require.NotEmpty(t, e.Error, name)
	}
	// Nothing changed: no queue was created, the held job is still active.
	code, body := call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(body), `"bad-input"`)
	require.Equal(t, "active", getJob(t, held).State)
}

// TestAPILongPollHandoff: fetches waiting on a queue are served from the
// entry that enqueues into it; every job goes to exactly one of them.
func TestAPILongPollHandoff(t *testing.T) {
	t.Parallel()
	q := uq("handoff")
	const waiters = 8
	got := make(chan string, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			// 10 s: the five enqueues below must commit while the fetches
			// wait, and under -race beside the other packages five took
			// over 3 s (every fetch answered empty).
			code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "timeout": 10})
			if code == 200 {
				got <- mustJSON[fetchedJob](t, body).JobID
				return
			}
			got <- ""
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the fetches park (the test holds either way)
	want := map[string]bool{}
	for i := 0; i < 5; i++ {
		want[enqueue(t, map[string]any{"queue": q, "payload": i})] = true
	}
	seen := map[string]bool{}
	empty := 0
	for i := 0; i < waiters; i++ {
		id := <-got
		if id == "" {
			empty++
			continue
		}
		require.True(t, want[id], id)
		require.False(t, seen[id], "job %s handed out twice", id)
		seen[id] = true
	}
	require.Len(t, seen, 5)
	require.Equal(t, 3, empty)
}

// TestAPISingletonQueue: a queue capped at 1 never has two active jobs,
// whatever 16 concurrent fetchers do.
func TestAPISingletonQueue(t *testing.T) {
	t.Parallel()
	q := uq("singleton")
	code, body := call(t, "POST", "/api/v1/queues/"+q+"/concurrency", map[string]any{"max": 1})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"queue":"`+q+`","max_concurrency":1}`, string(body))
	const total = 40
	for i := 0; i < total; i++ {
		enqueue(t, map[string]any{"queue": q, "payload": i})
	}
	var active, maxActive, done atomic.Int64
	var wg sync.WaitGroup
	for f := 0; f < 16; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < total {
				code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "timeout": 0.5})
				if code != 200 {
					continue
				}
				j := mustJSON[fetchedJob](t, body)
				n := active.Add(1)
				for {
					m := maxActive.Load()
					if n <= m || maxActive.CompareAndSwap(m, n) {
						break
					}
				}
				active.Add(-1) // before the ack commits: the next job can only follow it
				code, _ = call(t, "POST", "/api/v1/ack/"+j.JobID, nil)
				require.Equal(t, 200, code)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(1), maxActive.Load(), "two jobs of a singleton queue were active at once")
	require.Equal(t, int64(total), done.Load())
	code, body = call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `"name":"`+q+`","pending":0,"active":0`)
}

// TestAPIThrottle: 10 per second lets 30±1 jobs through in 3 seconds.
func TestAPIThrottle(t *testing.T) {
	t.Parallel()
	q := uq("throttled")
	for i := 0; i < 100; i++ {
		enqueue(t, map[string]any{"queue": q, "payload": i})
	}
	code, body := call(t, "POST", "/api/v1/queues/"+q+"/throttle", map[string]any{"rate": 10, "period": "1s"})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"queue":"`+q+`","throttle":{"rate":10,"period":"1s","window_ms":1000}}`, string(body))
	start := time.Now()
	end := start.Add(3 * time.Second)
	var got atomic.Int64
	var wg sync.WaitGroup
	for f := 0; f < 4; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				left := time.Until(end)
				if left <= 0 {
					return
				}
				code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "timeout": left.Seconds(), "count": 100})
				if code == 200 && time.Now().Before(end) {
					got.Add(int64(len(mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs)))
				}
			}
		}()
	}
	wg.Wait()
	require.InDelta(t, 30, got.Load(), 1, "jobs through a 10/s throttle in 3 s")
	code, _ = call(t, "DELETE", "/api/v1/queues/"+q+"/throttle", nil)
	require.Equal(t, 200, code)
	code, body = call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "count": 100})
	require.Equal(t, 200, code)
	require.Greater(t, len(mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs), 30, "throttle removed")
}

func TestAPIUniqueJobs(t *testing.T) {
	t.Parallel()
	q := uq("unique")
	job := map[string]any{"queue": q, "payload": map[string]int{"user": 42}, "unique_key": "sync-user-42", "unique_period": 3600}
	code, body := call(t, "POST", "/api/v1/enqueue", job)
	require.Equal(t, 201, code, string(body))
	first := mustJSON[struct {
		JobID    string `json:"job_id"`
		Existing bool   `json:"unique_existing"`
	}](t, body)
	require.False(t, first.Existing)
	code, body = call(t, "POST", "/api/v1/enqueue", job)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"job_id":"`+first.JobID+`","status":"pending","unique_existing":true}`, string(body))

	code, body = call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []any{job, map[string]any{"queue": q}}})
	require.Equal(t, 201, code, string(body))
	batch := mustJSON[struct {
		JobIDs   []string `json:"job_ids"`
		Existing []bool   `json:"unique_existing"`
	}](t, body)
	require.Equal(t, first.JobID, batch.JobIDs[0])
	require.Equal(t, []bool{true, false}, batch.Existing)

	// Completed: the key is free again.
	for {
		j, ok := fetchOne(t, 1, q)
		require.True(t, ok)
		code, _ = call(t, "POST", "/api/v1/ack/"+j.JobID, nil)
		require.Equal(t, 200, code)
		if j.JobID == first.JobID {
			break
		}
	}
	code, body = call(t, "POST", "/api/v1/enqueue", job)
	require.Equal(t, 201, code, string(body))
	require.NotContains(t, string(body), first.JobID)
	code, _ = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "unique_period": 5})
	require.Equal(t, 400, code, "a period needs a key")
}

func TestAPIRetryDeleteMoveExpire(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "manage", 2)
	q := qs[0]
	// Another queue on the same shard for the move.
	rt := router.New(4)
	same := ""
	for i := 0; same == ""; i++ {
		if c := fmt.Sprintf("manage-same-%d", i); rt.ShardForQueue(c) == rt.ShardForQueue(q) {
			same = c
		}
	}
	id := enqueue(t, map[string]any{"queue": q, "payload": 1, "max_retries": 0})
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	code, _ := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"error": "boom"})
	require.Equal(t, 200, code)
	require.Equal(t, "dead", getJob(t, id).State)
	code, body := call(t, "POST", "/api/v1/jobs/"+id+"/retry", nil)
	require.Equal(t, 200, code, string(body))
	doc := getJob(t, id)
	require.Equal(t, "pending", doc.State)
	require.Equal(t, 0, doc.Attempt)
	require.Len(t, doc.Errors, 1)
	code, _ = call(t, "POST", "/api/v1/jobs/"+id+"/retry", nil)
	require.Equal(t, 409, code, "only finished jobs are retried")

	code, body = call(t, "POST", "/api/v1/jobs/"+id+"/move", map[string]any{"queue": same})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"job_id":"`+id+`","queue":"`+same+`","status":"pending"}`, string(body))
	_, ok = fetchOne(t, 0, q)
	require.False(t, ok)
	code, _ = call(t, "DELETE", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	code, _ = call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 404, code)
	code, _ = call(t, "DELETE", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 404, code)

	// expire_after: the sweep makes an unfetched job dead.
	exp := enqueue(t, map[string]any{"queue": q, "payload": 1, "expire_after": "300ms"})
	deadline := time.Now().Add(10 * time.Second)
	for getJob(t, exp).State != "dead" {
		require.True(t, time.Now().Before(deadline), "the expired job was never swept")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "expired", *getJob(t, exp).Reason)
}

func TestAPIQueueClearDrainDelete(t *testing.T) {
	t.Parallel()
	q := uq("qmanage")
	for i := 0; i < 5; i++ {
		enqueue(t, map[string]any{"queue": q, "payload": i})
	}
	enqueue(t, map[string]any{"queue": q, "payload": "later", "scheduled_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	held, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	code, body := call(t, "POST", "/api/v1/queues/"+q+"/clear", nil)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"queue":"`+q+`","cleared":5}`, string(body), "4 pending + 1 scheduled; the active job stays")
	_, ok = fetchOne(t, 0, q)
	require.False(t, ok, "nothing left to fetch")
	require.Equal(t, "active", getJob(t, held.JobID).State)

	enqueue(t, map[string]any{"queue": q, "payload": "new"})
	code, body = call(t, "POST", "/api/v1/queues/"+q+"/drain", nil)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"queue":"`+q+`","paused":true,"draining":true,"active":1}`, string(body))
	_, ok = fetchOne(t, 0, q)
	require.False(t, ok, "a draining queue hands out nothing")
	code, _ = call(t, "POST", "/api/v1/ack/"+held.JobID, nil)
	require.Equal(t, 200, code, "active jobs finish")

	code, body = call(t, "DELETE", "/api/v1/queues/"+q, nil)
	require.Equal(t, 400, code, string(body))
	require.Contains(t, string(body), "confirm=true")
	code, body = call(t, "DELETE", "/api/v1/queues/"+q+"?confirm=true", nil)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"queue":"`+q+`","deleted":true,"jobs_deleted":2}`, string(body))
	code, body = call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(body), `"`+q+`"`)
	code, _ = call(t, "GET", "/api/v1/jobs/"+held.JobID, nil)
	require.Equal(t, 404, code)
}

func TestAPIWorkers(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "workers", 2)
	wid := uq("worker-registry-test")
	enqueue(t, map[string]any{"queue": qs[0], "payload": 1})
	enqueue(t, map[string]any{"queue": qs[1], "payload": 2})
	for range 2 {
		code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": qs, "worker_id": wid, "hostname": "pod-xyz", "timeout": 1})
		require.Equal(t, 200, code, string(body))
	}
	code, body := call(t, "GET", "/api/v1/workers", nil)
	require.Equal(t, 200, code)
	var r struct {
		Workers []struct {
			ID         string   `json:"id"`
			Hostname   string   `json:"hostname"`
			Queues     []string `json:"queues"`
			ActiveJobs int      `json:"active_jobs"`
			Jobs       []string `json:"jobs"`
			LastSeen   string   `json:"last_seen"`
		} `json:"workers"`
	}
	require.NoError(t, json.Unmarshal(body, &r))
	found := false
	for _, w := range r.Workers {
		if w.ID == wid {
			found = true
			require.Equal(t, "pod-xyz", w.Hostname)
			require.ElementsMatch(t, qs, w.Queues, "queues merged across shards")
			require.Equal(t, 2, w.ActiveJobs)
			require.Len(t, w.Jobs, 2)
			require.NotEmpty(t, w.LastSeen)
		}
	}
	require.True(t, found, string(body))
}

// TestAPICrossShardMoveUnderFetches moves jobs between queues on different
// shards while workers fetch from both: every job is processed exactly
// once, none is lost, none is in both queues.
func TestAPICrossShardMoveUnderFetches(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "xmove", 2)
	const total = 200
	var ids []string
	for i := 0; i < total; i++ {
		ids = append(ids, enqueue(t, map[string]any{"queue": qs[0], "payload": map[string]int{"n": i}}))
	}
	var mu sync.Mutex
	seen := map[int]int{}
	var processed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": qs, "worker_id": "mover-test", "timeout": 0.2})
				if code != 200 {
					continue
				}
				j := mustJSON[fetchedJob](t, body)
				var p struct{ N int }
				require.NoError(t, json.Unmarshal(j.Payload, &p))
				mu.Lock()
				seen[p.N]++
				mu.Unlock()
				code, _ = call(t, "POST", "/api/v1/ack/"+j.JobID, nil)
				require.Equal(t, 200, code)
				processed.Add(1)
			}
		}()
	}
	moved := 0
	for _, id := range ids {
		code, body := call(t, "POST", "/api/v1/jobs/"+id+"/move", map[string]any{"queue": qs[1]})
		switch code {
		case 200:
			moved++
			r := mustJSON[struct {
				JobID     string `json:"job_id"`
				MovedFrom string `json:"moved_from"`
			}](t, body)
			require.Equal(t, id, r.MovedFrom)
			require.NotEqual(t, id, r.JobID)
		case 409, 404:
			// already active (409) — or the job was fetched, acked and is
			// now completed, which moves fine; 404 never happens here.
			require.Equal(t, 409, code, string(body))
		default:
			t.Fatalf("move: %d %s", code, body)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for processed.Load() < total {
		require.True(t, time.Now().Before(deadline), "only %d of %d jobs processed", processed.Load(), total)
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	require.Greater(t, moved, 0, "some jobs were moved while pending")
	for i := 0; i < total; i++ {
		require.Equal(t, 1, seen[i], "job %d processed %d times", i, seen[i])
	}
	// A moved job's old ID answers the job under its new ID.
	for _, id := range ids {
		code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
		require.Equal(t, 200, code, string(body))
		d := mustJSON[movedDoc](t, body)
		if d.ID != id {
			require.Equal(t, id, d.MovedFrom)
			require.Equal(t, qs[1], d.Queue)
			require.Equal(t, "completed", d.State)
			return
		}
	}
	t.Fatal("no moved job answered under its new ID")
}

// drain fetches and handles every job of q that arrives within timeout:
// handle returns the ack body, or nil to fail the job.
func drainQueue(t *testing.T, q string, timeout float64, handle func(j fetchedJob) map[string]any) []fetchedJob {
	t.Helper()
	var got []fetchedJob
	for {
		j, ok := fetchOne(t, timeout, q)
		if !ok {
			return got
		}
		got = append(got, j)
		if ack := handle(j); ack != nil {
			code, body := call(t, "POST", "/api/v1/ack/"+j.JobID, ack)
			require.Equal(t, 200, code, string(body))
		} else {
			code, body := call(t, "POST", "/api/v1/fail/"+j.JobID, map[string]any{"error": "boom"})
			require.Equal(t, 200, code, string(body))
		}
	}
}

// TestAPIBatchCallback: a batch whose jobs partly die still calls back once
// every job finished, with the counts.
func TestAPIBatchCallback(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "batch", 3)
	cbq := qs[2]
	var jobs []map[string]any
	for i := 0; i < 6; i++ {
		jobs = append(jobs, map[string]any{"queue": qs[i%2], "payload": map[string]int{"i": i}, "max_retries": 0})
	}
	code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": jobs,
		"batch": map[string]any{"callback_queue": cbq, "callback_payload": map[string]string{"campaign_id": "camp_123"}}})
	require.Equal(t, 201, code, string(body))
	r := mustJSON[struct {
		JobIDs  []string `json:"job_ids"`
		BatchID string   `json:"batch_id"`
	}](t, body)
	require.True(t, strings.HasPrefix(r.BatchID, "batch_"), r.BatchID)
	_, ok := fetchOne(t, 0, cbq)
	require.False(t, ok, "no callback before the jobs finish")
	handled := 0
	for _, q := range qs[:2] {
		handled += len(drainQueue(t, q, 0.3, func(j fetchedJob) map[string]any {
			var p struct{ I int }
			require.NoError(t, json.Unmarshal(j.Payload, &p))
			if p.I == 4 || p.I == 5 {
				return nil // dies (max_retries 0)
			}
			return map[string]any{}
		}))
	}
	require.Equal(t, 6, handled)
	cb, ok := fetchOne(t, 5, cbq)
	require.True(t, ok, "the callback never came")
	require.JSONEq(t, `{"campaign_id":"camp_123","batch":{"id":"`+r.BatchID+`","total":6,"succeeded":4,"failed":2}}`, string(cb.Payload))
	code, body = call(t, "GET", "/api/v1/batches/"+r.BatchID, nil)
	require.Equal(t, 200, code, string(body))
	bt := mustJSON[map[string]any](t, body)
	require.EqualValues(t, 6, bt["total"])
	require.EqualValues(t, 0, bt["pending"])
	require.EqualValues(t, 4, bt["succeeded"])
	require.EqualValues(t, 2, bt["failed"])
	require.Equal(t, cb.JobID, bt["callback_job_id"])
	_, ok = fetchOne(t, 0.3, cbq)
	require.False(t, ok, "exactly one callback")
}

// TestAPIChains: a chain that exits early runs on_exit; one whose step dies
// runs on_failure; results travel to the next step.
func TestAPIChains(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "chain", 4)
	extract, summarize, review, handlers := qs[0], qs[1], qs[2], qs[3]
	chain := map[string]any{
		"steps":      []any{map[string]any{"queue": extract}, map[string]any{"queue": summarize}, map[string]any{"queue": review}},
		"on_failure": map[string]any{"queue": handlers, "payload": map[string]string{"notify": "ops"}},
		"on_exit":    map[string]any{"queue": handlers, "payload": map[string]string{"cleanup": "yes"}},
	}
	// Chain 1 runs all three steps.
	first := enqueue(t, map[string]any{"queue": extract, "payload": map[string]string{"doc": "a.pdf"}, "chain": chain})
	doc := getJob(t, first)
	require.Equal(t, "pending", doc.State)
	drainQueue(t, extract, 1, func(fetchedJob) map[string]any { return map[string]any{"result": map[string]string{"text": "hi"}} })
	steps := drainQueue(t, summarize, 1, func(fetchedJob) map[string]any { return map[string]any{"result": "summary"} })
	require.Len(t, steps, 1)
	require.JSONEq(t, `{"doc":"a.pdf","previous_result":{"text":"hi"}}`, string(steps[0].Payload))
	last := drainQueue(t, review, 1, func(fetchedJob) map[string]any { return map[string]any{} })
	require.Len(t, last, 1)
	require.JSONEq(t, `{"doc":"a.pdf","previous_result":"summary"}`, string(last[0].Payload))
	code, body := call(t, "GET", "/api/v1/jobs/"+last[0].JobID, nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `"chain_id":"`+first+`","chain_step":2`)

	// Chain 2 exits at step 0.
	enqueue(t, map[string]any{"queue": extract, "payload": 2, "chain": chain})
	drainQueue(t, extract, 1, func(fetchedJob) map[string]any {
		return map[string]any{"step_status": "exit", "result": "nothing to do"}
	})
	exit := drainQueue(t, handlers, 1, func(fetchedJob) map[string]any { return map[string]any{} })
	require.Len(t, exit, 1)
	require.Contains(t, string(exit[0].Payload), `"cleanup":"yes"`)
	require.Contains(t, string(exit[0].Payload), `"previous_result":"nothing to do"`)
	_, ok := fetchOne(t, 0.3, summarize)
	require.False(t, ok, "an exited chain runs no further step")

	// Chain 3's second step dies.
	third := enqueue(t, map[string]any{"queue": extract, "payload": 3, "chain": chain, "max_retries": 0})
	drainQueue(t, extract, 1, func(fetchedJob) map[string]any { return map[string]any{} })
	drainQueue(t, summarize, 1, func(fetchedJob) map[string]any { return nil })
	fail := drainQueue(t, handlers, 1, func(fetchedJob) map[string]any { return map[string]any{} })
	require.Len(t, fail, 1)
	var p map[string]any
	require.NoError(t, json.Unmarshal(fail[0].Payload, &p))
	require.Equal(t, "ops", p["notify"])
	require.Equal(t, third, p["chain_id"])
	require.EqualValues(t, 1, p["failed_step"])
	require.Equal(t, "boom", p["error"])
	_, ok = fetchOne(t, 0.3, review)
	require.False(t, ok)

	code, body = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": summarize, "chain": chain})
	require.Equal(t, 400, code, string(body))
}

// TestAPIDependencies: a job runs after its dependencies (on other shards)
// complete; a dependency that dies takes it down; held jobs can be released.
func TestAPIDependencies(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "deps", 3)
	a := enqueue(t, map[string]any{"queue": qs[0], "payload": "a"})
	b := enqueue(t, map[string]any{"queue": qs[1], "payload": "b", "max_retries": 0})
	code, body := call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": qs[2], "payload": "after", "depends_on": []string{a, b}})
	require.Equal(t, 201, code, string(body))
	require.Contains(t, string(body), `"status":"held"`)
	after := mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
	// The held job names what it waits for (the UI links them).
	code, body = call(t, "GET", "/api/v1/jobs/"+after, nil)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"type":"held","detail":"waiting on 2 dependencies"`)
	hj := strictDecode[corvo.Job](t, "held job", body)
	require.Equal(t, "held", hj.State)
	require.Equal(t, []string{a, b}, hj.DependsOn)
	require.Equal(t, 0, hj.DependenciesDone)
	// Its parents find it with a search by depends_on (the UI's children),
	// across shards; a job nothing waits on has none.
	for _, parent := range []string{a, b} {
		p := search(t, map[string]any{"depends_on": parent})
		require.Equal(t, 1, p.Total, parent)
		require.Equal(t, after, p.Jobs[0].ID)
	}
	require.Zero(t, search(t, map[string]any{"depends_on": after}).Total)
	code, body = call(t, "POST", "/api/v1/jobs/search", map[string]any{"depends_on": []string{a}})
	require.Equal(t, 400, code, "depends_on names one job: %s", body)
	require.Empty(t, strictDecode[corvo.Job](t, "job", mustGet(t, a)).DependsOn)
	require.Contains(t, string(mustGet(t, a)), `"depends_on":[],`)
	drainQueue(t, qs[0], 0.5, func(fetchedJob) map[string]any { return map[string]any{} })
	_, ok := fetchOne(t, 0.3, qs[2])
	require.False(t, ok, "b has not completed")
	drainQueue(t, qs[1], 0.5, func(fetchedJob) map[string]any { return map[string]any{} })
	j, ok := fetchOne(t, 5, qs[2])
	require.True(t, ok, "never released after both dependencies completed")
	require.Equal(t, after, j.JobID)

	c := enqueue(t, map[string]any{"queue": qs[0], "payload": "c", "max_retries": 0})
	code, body = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": qs[2], "depends_on": []string{c}})
	require.Equal(t, 201, code, string(body))
	doomed := mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
	drainQueue(t, qs[0], 0.5, func(fetchedJob) map[string]any { return nil })
	deadline := time.Now().Add(5 * time.Second)
	for getJob(t, doomed).State != "dead" {
		require.True(t, time.Now().Before(deadline), "the dependent never died")
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, "dependency "+c+" dead", *getJob(t, doomed).Reason)

	d := enqueue(t, map[string]any{"queue": qs[0], "payload": "d"})
	code, body = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": qs[2], "depends_on": []string{d}})
	require.Equal(t, 201, code, string(body))
	held := mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
	require.Contains(t, string(mustGet(t, held)), `"detail":"waiting on 1 dependency"`)
	code, body = call(t, "POST", "/api/v1/jobs/"+held+"/approve", nil)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"status":"pending"}`, string(body))
	code, _ = call(t, "POST", "/api/v1/jobs/"+held+"/reject", nil)
	require.Equal(t, 409, code, "no longer held")
	code, _ = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": qs[2], "depends_on": []string{"not-a-job"}})
	require.Equal(t, 400, code)
}

func TestAPISchedules(t *testing.T) {
	t.Parallel()
	q := uq("reports")
	name := uq("daily-report")
	body := map[string]any{"name": name, "queue": q, "cron": "0 9 * * *", "timezone": "America/New_York", "payload": map[string]string{"type": "daily"}}
	code, resp := call(t, "POST", "/api/v1/schedules", body)
	require.Equal(t, 201, code, string(resp))
	sc := mustJSON[struct {
		ID       string `json:"id"`
		NextRun  string `json:"next_run"`
		Timezone string `json:"timezone"`
	}](t, resp)
	require.True(t, strings.HasPrefix(sc.ID, "sched_"))
	next, err := time.Parse(time.RFC3339Nano, sc.NextRun)
	require.NoError(t, err)
	ny, _ := time.LoadLocation("America/New_York")
	require.Equal(t, 9, next.In(ny).Hour())
	require.True(t, next.After(time.Now()))

	code, resp = call(t, "POST", "/api/v1/schedules", body)
	require.Equal(t, 409, code, "names are unique: %s", resp)
	code, resp = call(t, "GET", "/api/v1/schedules", nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(resp), sc.ID)

	body["cron"] = "*/5 * * * *"
	code, resp = call(t, "PUT", "/api/v1/schedules/"+sc.ID, body)
	require.Equal(t, 200, code, string(resp))
	require.Contains(t, string(resp), `"cron":"*/5 * * * *"`)

	for _, bad := range []map[string]any{
		{"name": "x", "queue": q, "cron": "0 9 * *"},
		{"name": "x", "queue": q, "cron": "99 9 * * *"},
		{"name": "x", "queue": q, "cron": "0 9 * * *", "timezone": "Mars/Olympus"},
		{"queue": q, "cron": "0 9 * * *"},
	} {
		code, resp = call(t, "POST", "/api/v1/schedules", bad)
		require.Equal(t, 400, code, "%v → %s", bad, resp)
	}
	code, _ = call(t, "DELETE", "/api/v1/schedules/"+sc.ID, nil)
	require.Equal(t, 200, code)
	code, _ = call(t, "DELETE", "/api/v1/schedules/"+sc.ID, nil)
	require.Equal(t, 404, code)
	code, _ = call(t, "PUT", "/api/v1/schedules/"+sc.ID, body)
	require.Equal(t, 404, code)
}

// TestAPISchedulePauseResumeRun: run now enqueues a run at once (tagged
// with the schedule, named by last_job_id); pause empties next_run and
// survives a PUT; resume sets it again; unknown IDs are 404.
func TestAPISchedulePauseResumeRun(t *testing.T) {
	t.Parallel()
	q := uq("sched-run")
	code, resp := call(t, "POST", "/api/v1/schedules", map[string]any{"name": uq("hourly"), "queue": q, "cron": "0 * * * *", "payload": map[string]int{"n": 7}})
	require.Equal(t, 201, code, string(resp))
	sc := strictDecode[corvo.Schedule](t, "schedule", resp)
	require.False(t, sc.Paused)
	require.Nil(t, sc.LastJobID)
	require.Contains(t, string(resp), `"last_job_id":null,"paused":false`)

	code, resp = call(t, "POST", "/api/v1/schedules/"+sc.ID+"/run", nil)
	require.Equal(t, 201, code, string(resp))
	run := mustJSON[struct {
		JobID      string `json:"job_id"`
		Status     string `json:"status"`
		ScheduleID string `json:"schedule_id"`
	}](t, resp)
	require.Equal(t, "pending", run.Status)
	require.Equal(t, sc.ID, run.ScheduleID)
	j := getJob(t, run.JobID)
	require.Equal(t, map[string]any{"schedule": sc.ID}, j.Tags)
	fetched, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, run.JobID, fetched.JobID)

	code, resp = call(t, "POST", "/api/v1/schedules/"+sc.ID+"/pause", nil)
	require.Equal(t, 200, code, string(resp))
	paused := strictDecode[corvo.Schedule](t, "paused schedule", resp)
	require.True(t, paused.Paused)
	require.Nil(t, paused.NextRun, "a paused schedule has no next run")
	require.Equal(t, run.JobID, *paused.LastJobID)
	require.NotNil(t, paused.LastRun)
	// A PUT keeps it paused.
	code, resp = call(t, "PUT", "/api/v1/schedules/"+sc.ID, map[string]any{"name": sc.Name, "queue": q, "cron": "30 * * * *"})
	require.Equal(t, 200, code, string(resp))
	require.True(t, strictDecode[corvo.Schedule](t, "replaced", resp).Paused)
	// Run now works while paused.
	code, resp = call(t, "POST", "/api/v1/schedules/"+sc.ID+"/run", nil)
	require.Equal(t, 201, code, string(resp))

	code, resp = call(t, "POST", "/api/v1/schedules/"+sc.ID+"/resume", nil)
	require.Equal(t, 200, code, string(resp))
	resumed := strictDecode[corvo.Schedule](t, "resumed", resp)
	require.False(t, resumed.Paused)
	require.NotNil(t, resumed.NextRun)
	require.True(t, resumed.NextRun.After(time.Now()))
	require.Equal(t, 30, resumed.NextRun.Minute())

	for _, path := range []string{"/run", "/pause", "/resume"} {
		code, _ = call(t, "POST", "/api/v1/schedules/sched_0_01JNOPE0000000000000000000"+path, nil)
		require.Equal(t, 404, code, path)
		code, _ = call(t, "POST", "/api/v1/schedules/nonsense"+path, nil)
		require.Equal(t, 404, code, path)
	}
}

func TestAPIDeadLetters(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "dlq", 2)
	var dead []string
	for i := 0; i < 5; i++ {
		q := qs[i%2]
		id := enqueue(t, map[string]any{"queue": q, "payload": i, "max_retries": 0})
		_, ok := fetchOne(t, 1, q)
		require.True(t, ok)
		code, _ := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"error": fmt.Sprint("SMTP timeout ", i)})
		require.Equal(t, 200, code)
		dead = append(dead, id)
	}
	// Page through one queue, then the other, newest first.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		path := "/api/v1/dead?limit=2&queue=" + qs[0]
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		code, body := call(t, "GET", path, nil)
		require.Equal(t, 200, code, string(body))
		page := mustJSON[struct {
			Jobs []struct {
				ID        string `json:"id"`
				State     string `json:"state"`
				LastError string `json:"last_error"`
			} `json:"jobs"`
			HasMore bool    `json:"has_more"`
			Cursor  *string `json:"cursor"`
		}](t, body)
		for _, j := range page.Jobs {
			require.Equal(t, "dead", j.State)
			require.Contains(t, j.LastError, "SMTP timeout")
			got = append(got, j.ID)
		}
		if !page.HasMore {
			break
		}
		cursor = *page.Cursor
	}
	require.Equal(t, []string{dead[4], dead[2], dead[0]}, got)
	// Retried jobs leave the list.
	code, _ := call(t, "POST", "/api/v1/jobs/"+dead[4]+"/retry", nil)
	require.Equal(t, 200, code)
	code, body := call(t, "GET", "/api/v1/dead?queue="+qs[0], nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(body), dead[4])
	require.Contains(t, string(body), dead[2])
	code, _ = call(t, "GET", "/api/v1/dead?limit=0", nil)
	require.Equal(t, 400, code)
}

// failingShard is the real engine except that every proposal to one shard
// fails as if it had no leader.
type failingShard struct {
	Engine
	bad int
}

func (f failingShard) Propose(ctx context.Context, shard int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if shard == f.bad {
		return nil, shardpkg.ErrUnavailable
	}
	return f.Engine.Propose(ctx, shard, ops...)
}

// TestAPIBatchRecordFirst: when the entry carrying a batch's record
// fails, none of the batch's jobs on other shards is enqueued (they would
// report to a batch that does not exist, which would never call back);
// every job is reported not applied.
func TestAPIBatchRecordFirst(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "batchfirst", 3)
	cbq := qs[2]
	rt := router.New(4)
	_, addr := frontServer(t, Config{}, failingShard{Engine: testEngine, bad: rt.ShardForQueue(cbq)})
	var jobs []map[string]any
	for i := 0; i < 4; i++ {
		jobs = append(jobs, map[string]any{"queue": qs[i%2], "payload": map[string]int{"i": i}})
	}
	body, err := json.Marshal(map[string]any{"jobs": jobs, "batch": map[string]any{"callback_queue": cbq}})
	require.NoError(t, err)
	resp, err := httpc.Post("http://"+addr+"/api/v1/enqueue/batch", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode, string(out))
	r := mustJSON[struct {
		JobIDs     []string `json:"job_ids"`
		NotApplied []int    `json:"not_applied"`
	}](t, out)
	require.Equal(t, []int{0, 1, 2, 3}, r.NotApplied)
	for _, id := range r.JobIDs {
		code, _ := call(t, "GET", "/api/v1/jobs/"+id, nil)
		require.Equal(t, 404, code, "%s was enqueued without its batch", id)
	}
	// Without a batch the other shards' jobs go ahead as before.
	body, err = json.Marshal(map[string]any{"jobs": []map[string]any{{"queue": qs[0]}, {"queue": cbq}}})
	require.NoError(t, err)
	resp, err = httpc.Post("http://"+addr+"/api/v1/enqueue/batch", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	out, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode, string(out))
	r = mustJSON[struct {
		JobIDs     []string `json:"job_ids"`
		NotApplied []int    `json:"not_applied"`
	}](t, out)
	require.Equal(t, []int{1}, r.NotApplied)
	code, _ := call(t, "GET", "/api/v1/jobs/"+r.JobIDs[0], nil)
	require.Equal(t, 200, code)
}

// TestAPIMultiShardFetchNeverTakesMoreThanCount: a long-poll over queues on
// two shards (parked at both proposers once nothing is pending) gets one
// job when one batch makes a job pending on each shard at once, and the
// other job stays for the next fetch: never more than count, none lost.
func TestAPIMultiShardFetchNeverTakesMoreThanCount(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "mpark", 2)
	for round := range 20 {
		type answer struct {
			code int
			body []byte
		}
		got := make(chan answer, 1)
		go func() {
			code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": qs, "worker_id": "mpark", "timeout": 10, "count": 1})
			got <- answer{code, body}
		}()
		code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{{"queue": qs[0]}, {"queue": qs[1]}}})
		require.Equal(t, 201, code, string(body))
		a := <-got
		require.Equal(t, 200, a.code, "round %d: %s", round, a.body)
		first := mustJSON[struct{ Jobs []fetchedJob }](t, a.body).Jobs
		require.Len(t, first, 1, "round %d: a fetch with count 1 got %d jobs", round, len(first))
		code, body = call(t, "POST", "/api/v1/fetch", map[string]any{"queues": qs, "worker_id": "mpark", "timeout": 1, "count": 5})
		require.Equal(t, 200, code, "round %d: the other job is gone: %s", round, body)
		second := mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs
		require.Len(t, second, 1, "round %d", round)
		require.NotEqual(t, first[0].JobID, second[0].JobID)
		for _, j := range append(first, second...) {
			code, body = call(t, "POST", "/api/v1/ack/"+j.JobID, map[string]any{})
			require.Equal(t, 200, code, string(body))
		}
	}
}
