package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/shard"
)

// strictDecode decodes an answer into the SDK type T, failing on a field T
// lacks or a value of another JSON type: the hand-written encoders and the
// SDK's types must describe the same bodies.
func strictDecode[T any](t *testing.T, what string, body []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: the answer does not decode into %s: %v\n%s", what, reflect.TypeFor[T](), err, body)
	}
	if dec.More() {
		t.Fatalf("%s: trailing data after the answer: %s", what, body)
	}
	return v
}

// want calls the API and decodes its answer, which must have status, into T.
func want[T any](t *testing.T, status int, method, path string, body any) T {
	t.Helper()
	st, out := call(t, method, path, body)
	require.Equal(t, status, st, "%s %s: %s", method, path, out)
	return strictDecode[T](t, method+" "+path, out)
}

// TestWireAnswersDecodeIntoSDKTypes runs every endpoint a client uses
// against the real server and decodes each answer into its corvo (SDK)
// type with unknown fields disallowed: a field the server writes that the
// SDK does not declare fails here.
func TestWireAnswersDecodeIntoSDKTypes(t *testing.T) {
	t.Parallel()
	q, q2 := uq("wire"), uq("wire-b")
	three := 3

	// Producer answers.
	enq := want[corvo.Enqueued](t, 201, "POST", "/api/v1/enqueue", corvo.EnqueueRequest{Queue: q, Payload: map[string]int{"n": 1},
		Tags: map[string]string{"t": "v"}, UniqueKey: "wire-k", UniquePeriod: 60, MaxRetries: &three})
	require.NotEmpty(t, enq.JobID)
	dup := want[corvo.Enqueued](t, 200, "POST", "/api/v1/enqueue", corvo.EnqueueRequest{Queue: q, UniqueKey: "wire-k", UniquePeriod: 60})
	require.True(t, dup.UniqueExisting)
	chained := want[corvo.Enqueued](t, 201, "POST", "/api/v1/enqueue", corvo.EnqueueRequest{Queue: q2,
		Chain: &corvo.Chain{Steps: []corvo.ChainStep{{Queue: q2}, {Queue: q2}}}})
	batch := want[corvo.BatchEnqueued](t, 201, "POST", "/api/v1/enqueue/batch", corvo.EnqueueBatchRequest{
		Jobs: []corvo.EnqueueRequest{{Queue: q}, {Queue: q}, {Queue: q, UniqueKey: "wire-k"}}, Batch: &corvo.Batch{CallbackQueue: q2}})
	require.Len(t, batch.JobIDs, 3)
	require.NotNil(t, batch.BatchID)

	// Worker answers.
	one := want[corvo.FetchedJob](t, 200, "POST", "/api/v1/fetch", corvo.FetchBody{Queues: []string{q}, WorkerID: "wire-w", Hostname: "h", Timeout: 1})
	require.NotNil(t, one.LeaseExpiresAt)
	many := want[corvo.FetchedJobs](t, 200, "POST", "/api/v1/fetch", corvo.FetchBody{Queues: []string{q}, WorkerID: "wire-w", Timeout: 1, Count: 10})
	require.Len(t, many.Jobs, 2)
	hb := want[corvo.HeartbeatResult](t, 200, "POST", "/api/v1/heartbeat", corvo.HeartbeatRequest{WorkerID: "wire-w",
		Jobs: map[string]corvo.HeartbeatJob{one.JobID: {Progress: map[string]int{"done": 1}}}})
	require.Equal(t, "ok", hb.Jobs[one.JobID].Status)
	workers := want[corvo.WorkerList](t, 200, "GET", "/api/v1/workers", nil)
	require.NotEmpty(t, workers.Workers)
	ack := want[corvo.StatusAnswer](t, 200, "POST", "/api/v1/ack/"+one.JobID, corvo.Ack{Result: "ok", WorkerID: "wire-w", Attempt: one.Attempt})
	require.Equal(t, "completed", ack.Status)
	ab := want[corvo.AckBatchResult](t, 200, "POST", "/api/v1/ack/batch", corvo.AckBatchRequest{Acks: []corvo.Ack{
		{JobID: many.Jobs[0].JobID, WorkerID: "wire-w"}, {JobID: one.JobID, WorkerID: "wire-w"}}})
	require.Equal(t, 1, ab.Acked)
	require.Len(t, ab.Errors, 1)
	fr := want[corvo.FailResult](t, 200, "POST", "/api/v1/fail/"+many.Jobs[1].JobID, corvo.Failure{Error: "boom", Backtrace: "at x", WorkerID: "wire-w"})
	require.Equal(t, "retrying", fr.Status)

	// Job documents.
	doc := want[corvo.Job](t, 200, "GET", "/api/v1/jobs/"+one.JobID, nil)
	require.NotEmpty(t, doc.Timeline)
	require.NotNil(t, doc.Worker)
	require.NotNil(t, doc.UniqueKey)
	failed := want[corvo.Job](t, 200, "GET", "/api/v1/jobs/"+many.Jobs[1].JobID, nil)
	require.Len(t, failed.Errors, 1)
	ch := want[corvo.Job](t, 200, "GET", "/api/v1/jobs/"+chained.JobID, nil)
	require.NotNil(t, ch.ChainID)
	bs := want[corvo.BatchStatus](t, 200, "GET", "/api/v1/batches/"+*batch.BatchID, nil)
	require.Equal(t, 3, bs.Total)

	// Management answers.
	require.Equal(t, "cancelled", want[corvo.StatusAnswer](t, 200, "POST", "/api/v1/jobs/"+chained.JobID+"/cancel", nil).Status)
	require.Equal(t, "pending", want[corvo.StatusAnswer](t, 200, "POST", "/api/v1/jobs/"+chained.JobID+"/retry", nil).Status)
	mv := want[corvo.Moved](t, 200, "POST", "/api/v1/jobs/"+chained.JobID+"/move", corvo.MoveRequest{Queue: q})
	require.Equal(t, q, mv.Queue)
	require.True(t, want[corvo.Deleted](t, 200, "DELETE", "/api/v1/jobs/"+mv.JobID, nil).Deleted)

	// Queues.
	require.True(t, want[corvo.QueuePaused](t, 200, "POST", "/api/v1/queues/"+q2+"/pause", nil).Paused)
	require.False(t, want[corvo.QueuePaused](t, 200, "POST", "/api/v1/queues/"+q2+"/resume", nil).Paused)
	cc := want[corvo.QueueConcurrency](t, 200, "POST", "/api/v1/queues/"+q2+"/concurrency", corvo.ConcurrencyRequest{Max: 2})
	require.Equal(t, 2, *cc.MaxConcurrency)
	th := want[corvo.QueueThrottled](t, 200, "POST", "/api/v1/queues/"+q2+"/throttle", corvo.Throttle{Rate: 5, Period: "1m"})
	require.Equal(t, 5, th.Throttle.Rate)
	list := want[corvo.QueueList](t, 200, "GET", "/api/v1/queues", nil)
	var mine *corvo.Queue
	for i := range list.Queues {
		if list.Queues[i].Name == q2 {
			mine = &list.Queues[i]
		}
	}
	require.NotNil(t, mine)
	require.NotNil(t, mine.Throttle)
	require.Nil(t, want[corvo.QueueThrottled](t, 200, "DELETE", "/api/v1/queues/"+q2+"/throttle", nil).Throttle)
	want[corvo.QueueCleared](t, 200, "POST", "/api/v1/queues/"+q2+"/clear", nil)
	require.True(t, want[corvo.QueueDraining](t, 200, "POST", "/api/v1/queues/"+q2+"/drain", nil).Paused)
	require.True(t, want[corvo.QueueDeleted](t, 200, "DELETE", "/api/v1/queues/"+q2+"?confirm=true", nil).Deleted)

	// Dead letters, search, bulk.
	dq := uq("wire-dead")
	sse := openSSE(t, "/api/v1/events?queue="+dq, "") // its events are checked at the end
	zero := 0
	dead := want[corvo.Enqueued](t, 201, "POST", "/api/v1/enqueue", corvo.EnqueueRequest{Queue: dq, MaxRetries: &zero})
	got := want[corvo.FetchedJob](t, 200, "POST", "/api/v1/fetch", corvo.FetchBody{Queues: []string{dq}, WorkerID: "wire-w", Timeout: 1})
	require.Equal(t, dead.JobID, got.JobID)
	require.Equal(t, "dead", want[corvo.FailResult](t, 200, "POST", "/api/v1/fail/"+got.JobID, corvo.Failure{Error: "fatal"}).Status)
	dp := want[corvo.DeadPage](t, 200, "GET", "/api/v1/dead?queue="+dq, nil)
	require.Len(t, dp.Jobs, 1)
	var page corvo.SearchPage
	require.Eventually(t, func() bool { // the mirror catches up asynchronously
		st, out := call(t, "POST", "/api/v1/jobs/search", corvo.SearchRequest{Queue: dq})
		if st != 200 {
			return false
		}
		page = strictDecode[corvo.SearchPage](t, "search", out)
		return len(page.Jobs) == 1
	}, 10*time.Second, 20*time.Millisecond)
	bulk := want[corvo.BulkResult](t, 200, "POST", "/api/v1/jobs/bulk", corvo.BulkRequest{JobIDs: []string{got.JobID, "job_00000000000000000000000000"}, Action: "retry"})
	require.EqualValues(t, 1, bulk.Affected)
	acc := want[corvo.BulkAccepted](t, 202, "POST", "/api/v1/jobs/bulk", corvo.BulkRequest{JobIDs: []string{got.JobID}, Action: "cancel", Async: true})
	require.Eventually(t, func() bool {
		st, out := call(t, "GET", "/api/v1/bulk/"+acc.ID, nil)
		return st == 200 && strictDecode[corvo.BulkOperation](t, "bulk status", out).Status != "processing"
	}, 10*time.Second, 20*time.Millisecond)
	ops := want[corvo.BulkOperationList](t, 200, "GET", "/api/v1/bulk", nil)
	require.NotEmpty(t, ops.Operations)

	// Schedules.
	sc := want[corvo.Schedule](t, 201, "POST", "/api/v1/schedules", corvo.Schedule{Name: uq("wire-s"), Queue: q, Cron: "0 9 * * *", Payload: map[string]int{"a": 1}})
	require.NotEmpty(t, sc.ID)
	sl := want[corvo.ScheduleList](t, 200, "GET", "/api/v1/schedules", nil)
	require.NotEmpty(t, sl.Schedules)
	require.True(t, want[corvo.Deleted](t, 200, "DELETE", "/api/v1/schedules/"+sc.ID, nil).Deleted)

	// Cluster status (the test engine is a one-node cluster).
	cs := want[corvo.ClusterStatus](t, 200, "GET", "/api/v1/cluster/status", nil)
	require.Len(t, cs.Nodes, 1)
	require.Len(t, cs.Shards, 4)

	// Health, errors, events.
	require.Equal(t, "ok", want[corvo.Health](t, 200, "GET", "/healthz", nil).Status)
	nf := want[corvo.ErrorBody](t, 404, "GET", "/api/v1/jobs/job_00000000000000000000000000", nil)
	require.Equal(t, corvo.CodeNotFound, nf.Code)
	bad := want[corvo.ErrorBody](t, 400, "POST", "/api/v1/enqueue", `{"queue":`)
	require.Equal(t, corvo.CodeInvalidJSON, bad.Code)
	for seen := 0; seen < 3; seen++ {
		f := sse.next(t)
		require.Equal(t, "job", f.Event)
		strictDecode[corvo.JobEvent](t, "event", []byte(f.Data))
	}
}

// TestWireMovedAnswerDecodes: a moved job's old ID answers the job under
// its new ID, with moved_from.
func TestWireMovedAnswerDecodes(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "wire-mv", 2)
	e := want[corvo.Enqueued](t, 201, "POST", "/api/v1/enqueue", corvo.EnqueueRequest{Queue: qs[0]})
	mv := want[corvo.Moved](t, 200, "POST", "/api/v1/jobs/"+e.JobID+"/move", corvo.MoveRequest{Queue: qs[1]})
	require.Equal(t, e.JobID, mv.MovedFrom)
	// The old id answers the job as it is now, under its new id.
	m := want[corvo.Job](t, 200, "GET", "/api/v1/jobs/"+e.JobID, nil)
	require.Equal(t, mv.JobID, m.ID)
	require.Equal(t, e.JobID, m.MovedFrom)
}

// TestWireClusterBodies: the join answer the shard layer marshals and the
// join request the gateway decodes are the SDK's.
func TestWireClusterBodies(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(shard.JoinInfo{NodeID: 7, Shards: 4, Replicas: 3, Learner: true})
	require.NoError(t, err)
	a := strictDecode[corvo.JoinAnswer](t, "join answer", b)
	require.Equal(t, corvo.JoinAnswer{NodeID: 7, Shards: 4, Replicas: 3, Learner: true}, a)
}
