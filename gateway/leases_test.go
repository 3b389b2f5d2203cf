package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestAPIHeartbeatAttempt: a heartbeat job that names another attempt
// than the lease's is lost (409 when no job is held) and overwrites no
// checkpoint; the lease's attempt passes.
func TestAPIHeartbeatAttempt(t *testing.T) {
	t.Parallel()
	q := uq("hbattempt")
	id := enqueue(t, map[string]any{"queue": q})
	j, ok := fetchOne(t, 2, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	w := "w-" + t.Name()

	code, body := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": w,
		"jobs": map[string]any{id: map[string]any{"attempt": j.Attempt + 1, "checkpoint": map[string]int{"offset": 666}}}})
	require.Equal(t, 409, code, string(body))
	require.JSONEq(t, `{"jobs":{"`+id+`":{"status":"lost"}}}`, string(body))
	require.Equal(t, "null", string(getJob(t, id).Checkpoint))

	code, body = call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": w,
		"jobs": map[string]any{id: map[string]any{"attempt": j.Attempt, "checkpoint": map[string]int{"offset": 1}}}})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"offset":1}`, string(getJob(t, id).Checkpoint))
}

// TestAPIStrictLeases: with Config.StrictLeases, ack, ack batch items,
// fail and heartbeat jobs without the lease's attempt answer 400
// lease_required and change nothing — the job stays with its worker; with
// the attempt they work.
func TestAPIStrictLeases(t *testing.T) {
	t.Parallel()
	_, front := frontServer(t, Config{StrictLeases: true}, testEngine)
	url := "http://" + front
	q := uq("strict")
	id := enqueue(t, map[string]any{"queue": q})
	code, body := callAt(t, "POST", url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "owner", "timeout": 2})
	require.Equal(t, 200, code, string(body))
	j := mustJSON[fetchedJob](t, body)
	require.Equal(t, id, j.JobID)

	for _, c := range []struct {
		path string
		body any
	}{
		{"/api/v1/heartbeat", map[string]any{"jobs": map[string]any{id: map[string]any{"checkpoint": map[string]int{"offset": 666}}}}},
		{"/api/v1/heartbeat", map[string]any{"worker_id": "owner", "jobs": map[string]any{id: map[string]any{}}}},
		{"/api/v1/ack/" + id, map[string]any{}},
		{"/api/v1/ack/" + id, map[string]any{"worker_id": "owner"}},
		{"/api/v1/ack/" + id, map[string]any{"worker_id": "owner", "attempt": 0}},
		{"/api/v1/ack/batch", map[string]any{"acks": []any{map[string]any{"job_id": id, "worker_id": "owner"}}}},
		{"/api/v1/fail/" + id, map[string]any{"error": "stolen"}},
	} {
		code, body := callAt(t, "POST", url+c.path, c.body)
		require.Equal(t, 400, code, "%s %s", c.path, body)
		require.Contains(t, string(body), `"code":"lease_required"`, c.path)
	}
	doc := getJob(t, id)
	require.Equal(t, "active", doc.State)
	require.Equal(t, "null", string(doc.Checkpoint))
	require.Empty(t, doc.Errors)

	code, body = callAt(t, "POST", url+"/api/v1/heartbeat", map[string]any{"worker_id": "owner",
		"jobs": map[string]any{id: map[string]any{"attempt": j.Attempt, "progress": map[string]int{"current": 1}}}})
	require.Equal(t, 200, code, string(body))
	code, body = callAt(t, "POST", url+"/api/v1/ack/"+id, map[string]any{"worker_id": "owner", "attempt": j.Attempt})
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "completed", getJob(t, id).State)

	// The default server keeps taking acks without a lease (README's
	// curl worker).
	id2 := enqueue(t, map[string]any{"queue": q})
	_, ok := fetchOne(t, 2, q)
	require.True(t, ok)
	code, body = call(t, "POST", "/api/v1/ack/"+id2, map[string]any{})
	require.Equal(t, 200, code, string(body))
}

// TestAckCarriesTheNextFetch: an ack with "fetch" answers the worker's next
// job; a refused ack (409) claims nothing; a bad fetch is a 400 that does
// not ack; queues on another shard are served too; an empty queue answers
// at once with no jobs when the timeout is 0.
func TestAckCarriesTheNextFetch(t *testing.T) {
	t.Parallel()
	q := uq("ackfetch")
	a, b := enqueue(t, map[string]any{"queue": q}), enqueue(t, map[string]any{"queue": q})
	first, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, a, first.JobID)

	// A bad fetch: 400, and the job stays active.
	code, body := call(t, "POST", "/api/v1/ack/"+a, map[string]any{"fetch": map[string]any{"queues": []string{}}})
	require.Equal(t, 400, code, string(body))
	require.Equal(t, "active", getJob(t, a).State)

	// Another worker's ack with a fetch: 409, and b is not claimed.
	code, body = call(t, "POST", "/api/v1/ack/"+a, map[string]any{"worker_id": "someone-else", "fetch": map[string]any{"queues": []string{q}}})
	require.Equal(t, 409, code, string(body))
	require.Equal(t, "pending", getJob(t, b).State, "a refused ack claimed the next job")

	code, body = call(t, "POST", "/api/v1/ack/"+a, map[string]any{"worker_id": "w-" + t.Name(), "attempt": first.Attempt,
		"result": map[string]int{"ok": 1}, "fetch": map[string]any{"queues": []string{q}, "count": 5}})
	require.Equal(t, 200, code, string(body))
	got := strictDecode[corvo.AckFetched](t, "ack and fetch", body)
	require.Equal(t, "completed", got.Status)
	require.Len(t, got.Jobs, 1)
	require.Equal(t, b, got.Jobs[0].JobID)
	require.Equal(t, q, got.Jobs[0].Queue)
	require.Equal(t, "completed", getJob(t, a).State)
	require.Equal(t, "active", getJob(t, b).State)

	// Nothing left: at once, no jobs.
	code, body = call(t, "POST", "/api/v1/ack/"+b, map[string]any{"fetch": map[string]any{"queues": []string{q}, "timeout": 0}})
	require.Equal(t, 200, code, string(body))
	require.Empty(t, strictDecode[corvo.AckFetched](t, "ack and fetch", body).Jobs)

	// The next job on another shard than the acked one's.
	qs := queuesOnDistinctShards(t, "ackfetch-x", 2)
	x := enqueue(t, map[string]any{"queue": qs[0]})
	y := enqueue(t, map[string]any{"queue": qs[1]})
	fx, ok := fetchOne(t, 1, qs[0])
	require.True(t, ok)
	require.Equal(t, x, fx.JobID)
	code, body = call(t, "POST", "/api/v1/ack/"+x, map[string]any{"fetch": map[string]any{"queues": []string{qs[1]}, "timeout": 1}})
	require.Equal(t, 200, code, string(body))
	got = strictDecode[corvo.AckFetched](t, "ack and fetch", body)
	require.Len(t, got.Jobs, 1)
	require.Equal(t, y, got.Jobs[0].JobID)
}

// TestAckBatchCarriesTheNextFetch: an ack batch with "fetch" answers the
// worker's next jobs after its acks — never more than count; a bad fetch
// is a 400 that acks nothing; a batch whose acks are all refused (409:
// another worker's lease, a job not active) claims nothing, on one shard
// (one entry) and across shards; the fetch may name queues on other
// shards than the acks'.
func TestAckBatchCarriesTheNextFetch(t *testing.T) {
	t.Parallel()
	w := "w-" + t.Name()
	q := uq("ackbatchfetch")
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, enqueue(t, map[string]any{"queue": q, "payload": map[string]int{"i": i}}))
	}
	code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "count": 2, "worker_id": w})
	require.Equal(t, 200, code, string(body))
	held := strictDecode[corvo.FetchedJobs](t, "fetch", body).Jobs
	require.Len(t, held, 2)
	acks := func(worker string, jobs ...string) []map[string]any {
		var out []map[string]any
		for _, id := range jobs {
			out = append(out, map[string]any{"job_id": id, "worker_id": worker, "result": "ok"})
		}
		return out
	}
	pending := func(want int, jobs ...string) {
		t.Helper()
		n := 0
		for _, id := range jobs {
			if getJob(t, id).State == "pending" {
				n++
			}
		}
		require.Equal(t, want, n)
	}

	// A bad fetch: 400, nothing acked.
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": acks(w, held[0].JobID), "fetch": map[string]any{"queues": []string{}}})
	require.Equal(t, 400, code, string(body))
	require.Equal(t, "active", getJob(t, held[0].JobID).State)

	// Every ack refused: another worker's, and a job that is not active.
	for _, a := range [][]map[string]any{acks("someone-else", held[0].JobID, held[1].JobID), acks(w, ids[5])} {
		code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": a, "fetch": map[string]any{"queues": []string{q}, "count": 3}})
		require.Equal(t, 200, code, string(body))
		got := strictDecode[corvo.AckBatchResult](t, "ack batch", body)
		require.Zero(t, got.Acked)
		require.Len(t, got.Errors, len(a))
		require.Equal(t, corvo.CodeConflict, got.Errors[0].Code)
		require.Empty(t, got.Jobs, "refused acks claimed jobs")
		pending(4, ids[2:]...)
	}

	// The acks apply; the fetch claims its count, no more.
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": acks(w, held[0].JobID, held[1].JobID),
		"fetch": map[string]any{"queues": []string{q}, "count": 3}})
	require.Equal(t, 200, code, string(body))
	got := strictDecode[corvo.AckBatchResult](t, "ack batch", body)
	require.Equal(t, 2, got.Acked)
	require.Empty(t, got.Errors)
	require.Len(t, got.Jobs, 3)
	for i, j := range got.Jobs {
		require.Equal(t, ids[2+i], j.JobID, "FIFO")
		require.Equal(t, w, getJobWorker(t, j.JobID), "the fetch's worker is the acks'")
	}
	require.Equal(t, "completed", getJob(t, held[0].JobID).State)
	pending(1, ids[2:]...)

	// Acks on two shards, the fetch on a third queue: refused acks claim
	// nothing; applied ones fetch after them.
	qs := queuesOnDistinctShards(t, "ackbatchfetch-x", 3)
	x, y := enqueue(t, map[string]any{"queue": qs[0]}), enqueue(t, map[string]any{"queue": qs[1]})
	z := enqueue(t, map[string]any{"queue": qs[2]})
	fx, ok := fetchOne(t, 1, qs[0])
	require.True(t, ok)
	fy, ok := fetchOne(t, 1, qs[1])
	require.True(t, ok)
	require.Equal(t, []string{x, y}, []string{fx.JobID, fy.JobID})
	fw := "w-" + t.Name() // fetchOne's worker
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": acks("someone-else", x, y), "fetch": map[string]any{"queues": []string{qs[2]}, "count": 2}})
	require.Equal(t, 200, code, string(body))
	got = strictDecode[corvo.AckBatchResult](t, "ack batch", body)
	require.Zero(t, got.Acked)
	require.Empty(t, got.Jobs)
	require.Equal(t, "pending", getJob(t, z).State)
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": acks(fw, x, y), "fetch": map[string]any{"queues": []string{qs[2]}, "count": 2, "timeout": 1}})
	require.Equal(t, 200, code, string(body))
	got = strictDecode[corvo.AckBatchResult](t, "ack batch", body)
	require.Equal(t, 2, got.Acked)
	require.Len(t, got.Jobs, 1)
	require.Equal(t, z, got.Jobs[0].JobID)

	// Without "fetch" the answer is as before: no jobs member.
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": acks(w, got.Jobs[0].JobID)})
	require.Equal(t, 200, code, string(body))
	require.NotContains(t, string(body), `"jobs"`)
}

// getJobWorker is the worker a job's lease names.
func getJobWorker(t *testing.T, id string) string {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	return strictDecode[corvo.Job](t, "job", body).Worker.ID
}

// A batch's acks are named in errors by their index ("acks[2]: …"), a
// name put together only for an error: validating a good ack allocates
// nothing.
func TestItemNameBuiltOnlyForErrors(t *testing.T) {
	require.Equal(t, "an ack", named("an ack").String())
	require.Equal(t, "acks[2]", itemName{"acks", 2}.String())
	attempt := uint32(0)
	bad := ackRequest{holderFields: holderFields{Attempt: &attempt}}
	require.Equal(t, `acks[2] must name the lease's "attempt" (the server runs with --strict-leases)`, bad.validate(true, itemName{"acks", 2}).msg)
	cost := -1.0
	bad = ackRequest{Usage: &usageRequest{CostUSD: cost}}
	require.Contains(t, bad.validate(false, itemName{"acks", 7}).msg, `acks[7]: field "usage.cost_usd" must be`)

	one := uint32(1)
	good := ackRequest{holderFields: holderFields{WorkerID: "w", Attempt: &one}}
	i := 0
	require.Zero(t, testing.AllocsPerRun(100, func() {
		i++
		if err := good.validate(true, itemName{"acks", i}); err != nil {
			t.Fatal(err.msg)
		}
	}))
}
