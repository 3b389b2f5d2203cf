package gateway

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// peerPost posts an octet-stream body to a node-to-node endpoint with the
// cluster secret secret ("" sends none).
func peerPost(url string, body []byte, secret string) (*http.Response, error) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if secret != "" {
		req.Header.Set(peer.SecretHeader, secret)
	}
	return httpc.Do(req)
}

func peerCall(t *testing.T, url string, body []byte, secret string) (int, string) {
	t.Helper()
	resp, err := peerPost(url, body, secret)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

// TestPeerEndpointsNeedClusterSecret: the internal shard endpoints answer
// 401 without the cluster secret and 403 with a wrong one, and do nothing
// (the attack: one anonymous propose deleted a job); a node configured
// with no secret refuses every caller.
func TestPeerEndpointsNeedClusterSecret(t *testing.T) {
	t.Parallel()
	q := uq("peerauth")
	sh := rt4.ShardForQueue(q)
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	del := (&statemachine.Entry{Ops: []statemachine.Op{&statemachine.DeleteJobOp{JobID: id}}}).Encode(nil)
	_, read, err := encodeReadQuery(statemachine.GetJobQuery{ID: id})
	require.NoError(t, err)
	srvNone := New(Config{ProviderRebalance: -1}, testEngine) // no secret at all
	t.Cleanup(func() { _ = srvNone.Shutdown(t.Context()) })
	none := serveOnFreePort(t, srvNone)
	for _, path := range []string{peer.ShardPath(sh, "propose"), peer.ShardPath(sh, "read")} {
		body := del
		if path == peer.ShardPath(sh, "read") {
			body = read
		}
		code, out := peerCall(t, baseURL+path, body, "")
		require.Equal(t, 401, code, out)
		require.Contains(t, out, `"code":"cluster_secret_required"`)
		code, out = peerCall(t, baseURL+path, body, "wrong-secret-wrong-secret-wrong-secret")
		require.Equal(t, 403, code, out)
		require.Contains(t, out, `"code":"cluster_secret_invalid"`)
		code, out = peerCall(t, baseURL+path, body, testClusterSecret[:len(testClusterSecret)-1])
		require.Equal(t, 403, code, "a prefix of the secret is not the secret: %s", out)
		code, out = peerCall(t, "http://"+none+path, body, testClusterSecret)
		require.Equal(t, 403, code, "a node without a secret refuses everyone: %s", out)
	}
	// The wait route too (it claims nothing, but tells whether a queue
	// has work).
	wait := []byte(`{"queues":["` + q + `"]}`)
	code, out := peerCall(t, baseURL+peer.WaitPath, wait, "")
	require.Equal(t, 401, code, out)
	require.Contains(t, out, `"code":"cluster_secret_required"`)
	code, out = peerCall(t, baseURL+peer.WaitPath, wait, "wrong-secret-wrong-secret-wrong-secret")
	require.Equal(t, 403, code, out)
	code, out = peerCall(t, "http://"+none+peer.WaitPath, wait, testClusterSecret)
	require.Equal(t, 403, code, out)
	code, out = peerCall(t, baseURL+peer.WaitPath, wait, testClusterSecret)
	require.Equal(t, 200, code, "with the secret: the queue has a pending job: %s", out)
	code, job := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, "the job is still there: %s", job)
	var code2 int
	// With the secret, the same delete is applied.
	code2, out2 := peerCall(t, baseURL+peer.ShardPath(sh, "propose"), del, testClusterSecret)
	require.Equal(t, 200, code2, out2)
	code, _ = call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 404, code)
}

// TestPeerEntryIsValidated: an entry from a peer holding the secret is
// still checked before it is proposed: a queue name the API refuses, a job
// or queue of another shard, an unknown priority, or a leader's own
// housekeeping op is a 400 and changes nothing (the attack stored a queue
// name the API would refuse, which then showed in GET /queues).
func TestPeerEntryIsValidated(t *testing.T) {
	t.Parallel()
	q := uq("peerval")
	sh := rt4.ShardForQueue(q)
	other := (sh + 1) % 4
	jobOn := func(s int) string { return router.JobID(s, ulid.Make()) }
	badName := "bad queue/" + q // a space and a slash: refused by the API
	for badName = badName + "x"; rt4.ShardForQueue(badName) != sh; badName += "x" {
	}
	otherQ := uq("peerval-other")
	for rt4.ShardForQueue(otherQ) == sh {
		otherQ = uq("peerval-other")
	}
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	for _, c := range []struct {
		name string
		op   statemachine.Op
	}{
		{"bad queue name", &statemachine.EnqueueOp{Job: statemachine.Job{ID: jobOn(sh), Queue: badName}}},
		{"queue of another shard", &statemachine.EnqueueOp{Job: statemachine.Job{ID: jobOn(sh), Queue: otherQ}}},
		{"job id of another shard", &statemachine.EnqueueOp{Job: statemachine.Job{ID: jobOn(other), Queue: q}}},
		{"job id never issued", &statemachine.EnqueueOp{Job: statemachine.Job{ID: "job_" + itoa(sh) + "_nope", Queue: q}}},
		{"unknown priority", &statemachine.EnqueueOp{Job: statemachine.Job{ID: jobOn(sh), Queue: q, JobOptions: statemachine.JobOptions{Priority: 9}}}},
		{"pause a bad name", &statemachine.PauseQueueOp{Queue: badName}},
		{"delete a job of another shard", &statemachine.DeleteJobOp{JobID: jobOn(other)}},
		{"move to a bad name", &statemachine.MoveJobOp{JobID: id, Queue: badName}},
		{"fetch no queue", &statemachine.FetchOp{Count: 1}},
		{"fetch zero jobs", &statemachine.FetchOp{Queues: []string{q}}},
		{"leader-only promote", &statemachine.PromoteOp{Limit: 10}},
		{"leader-only sweep", &statemachine.SweepOp{Limit: 10, PurgeBefore: 1 << 62}},
		{"leader-only outbox ack", &statemachine.OutboxAckOp{Seqs: []uint64{1}}},
		{"leader-only cron tick", &statemachine.CronTickOp{Limit: 1}},
		{"leader-only audit prune", &statemachine.PruneAuditOp{Before: 1 << 62}},
		{"audit of a namespace on another shard", &statemachine.AuditOp{Record: statemachine.AuditRecord{ID: "a", Namespace: otherQ, Method: "POST", Path: "/x"}}},
		{"audit of a bad namespace", &statemachine.AuditOp{Record: statemachine.AuditRecord{ID: "a", Namespace: badName, Method: "POST", Path: "/x"}}},
		{"schedule of another shard", &statemachine.ScheduleOp{Schedule: statemachine.Schedule{ID: "sched_" + itoa(other) + "_" + ulid.Make().String(), Queue: q, Cron: "* * * * *"}}},
	} {
		// A valid op first: one bad op refuses the whole entry.
		body := (&statemachine.Entry{Ops: []statemachine.Op{&statemachine.CancelOp{JobID: id}, c.op}}).Encode(nil)
		code, out := peerCall(t, baseURL+peer.ShardPath(sh, "propose"), body, testClusterSecret)
		require.Equal(t, 400, code, "%s: %s", c.name, out)
		require.Contains(t, out, `"code":"invalid_request"`, c.name)
	}
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"state":"pending"`, "the valid cancel beside a bad op was not applied")
	code, body = call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(body), "bad queue")
}
