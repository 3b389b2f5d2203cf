package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
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
