package corvo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The language-neutral conformance suite (sdk/conformance/scenarios.json),
// run by the Go SDK: each scenario of the file has its implementation in
// conformanceScenarios, keyed by its id, and the test fails when one is
// missing (or when the table holds an id the file does not list).

const scenariosFile = "../conformance/scenarios.json"

type conformanceSuite struct {
	Server struct {
		Args []string `json:"args"`
	} `json:"server"`
	Scenarios []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	} `json:"scenarios"`
}

// confEnv is what a scenario runs with: the suite's server, a client on it
// and the scenario's queue (go.<id>).
type confEnv struct {
	url string
	c   *Client
	q   string
	ctx context.Context
}

var conformanceScenarios = map[string]func(t *testing.T, e *confEnv){
	"enqueue_fetch_ack":         confEnqueueFetchAck,
	"ack_and_fetch":             confAckAndFetch,
	"fail_retry_backoff":        confFailRetryBackoff,
	"heartbeat_progress_cancel": confHeartbeatProgressCancel,
	"checkpoint_survives_drain": confCheckpointSurvivesDrain,
	"lease_reclaim_stale_ack":   confLeaseReclaimStaleAck,
	"unclaim":                   confUnclaim,
	"unique":                    confUnique,
	"batch_callback":            confBatchCallback,
	"chain":                     confChain,
	"search_paging":             confSearchPaging,
	"bulk":                      confBulk,
	"events_resume":             confEventsResume,
	"backoff_429":               confBackoff429,
	"failover":                  confFailover,
	"typed_errors":              confTypedErrors,
	"worker_runtime":            confWorkerRuntime,
	"enqueue_coalescing":        confEnqueueCoalescing,
}

func TestConformance(t *testing.T) {
	raw, err := os.ReadFile(scenariosFile)
	if err != nil {
		t.Fatal(err)
	}
	var suite conformanceSuite
	if err := json.Unmarshal(raw, &suite); err != nil {
		t.Fatalf("%s: %v", scenariosFile, err)
	}
	listed := map[string]bool{}
	for _, s := range suite.Scenarios {
		listed[s.ID] = true
		if conformanceScenarios[s.ID] == nil {
			t.Errorf("scenario %q (%s) has no implementation in the Go SDK", s.ID, s.Title)
		}
	}
	for id := range conformanceScenarios {
		if !listed[id] {
			t.Errorf("the Go SDK implements scenario %q, which %s does not list", id, scenariosFile)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	url := startServer(t, suite.Server.Args...)
	// One after another: enqueue_coalescing reads a server-wide counter.
	for _, s := range suite.Scenarios {
		t.Run(s.ID, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conformanceScenarios[s.ID](t, &confEnv{url: url, c: New(url), q: "go." + s.ID, ctx: ctx})
		})
	}
}

// must(f()).of(t) is f's value, or the test's end on f's error.
func must[T any](v T, err error) result[T] { return result[T]{v, err} }

type result[T any] struct {
	v   T
	err error
}

func (r result[T]) of(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sameJSON reports whether raw holds the JSON value of want.
func sameJSON(t *testing.T, raw json.RawMessage, want any) bool {
	t.Helper()
	var got, exp any
	if err := json.Unmarshal(raw, &got); err != nil {
		return false
	}
	b, _ := json.Marshal(want)
	_ = json.Unmarshal(b, &exp)
	return reflect.DeepEqual(got, exp)
}

func fetchOne(t *testing.T, e *confEnv, queue, worker string, timeout float64) FetchedJob {
	t.Helper()
	jobs := must(e.c.Fetch(e.ctx, FetchRequest{Queues: []string{queue}, WorkerID: worker, Timeout: timeout})).of(t)
	if len(jobs) != 1 {
		t.Fatalf("fetch %s: %d jobs, want 1", queue, len(jobs))
	}
	return jobs[0]
}

func wantError(t *testing.T, err error, status int, code string) *Error {
	t.Helper()
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code {
		t.Fatalf("want a %d %s error, got %v", status, code, err)
	}
	return ae
}

func confEnqueueFetchAck(t *testing.T, e *confEnv) {
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: map[string]int{"n": 7}, Priority: "high",
		MaxRetries: ptr(4), Tags: map[string]string{"tenant": "acme"}})).of(t)
	if en.Status != "pending" || en.JobID == "" {
		t.Fatalf("enqueued %+v", en)
	}
	j := fetchOne(t, e, e.q, "go-w", 5)
	if j.JobID != en.JobID || j.Attempt != 1 || !sameJSON(t, j.Payload, map[string]int{"n": 7}) || j.Priority != "high" ||
		j.MaxRetries != 4 || j.Tags["tenant"] != "acme" || j.LeaseExpiresAt == nil {
		t.Fatalf("fetched %+v", j)
	}
	if err := e.c.Ack(e.ctx, Ack{JobID: j.JobID, Result: map[string]bool{"ok": true}, WorkerID: "go-w", Attempt: j.Attempt}); err != nil {
		t.Fatal(err)
	}
	doc := must(e.c.Job(e.ctx, j.JobID)).of(t)
	if doc.State != "completed" || !sameJSON(t, doc.Result, map[string]bool{"ok": true}) || doc.Attempt != 1 {
		t.Fatalf("job %s %s attempt %d", doc.State, doc.Result, doc.Attempt)
	}
	if left := must(e.c.Fetch(e.ctx, FetchRequest{Queues: []string{e.q}, WorkerID: "go-w"})).of(t); len(left) != 0 {
		t.Fatalf("fetched %d more", len(left))
	}
}

func confAckAndFetch(t *testing.T, e *confEnv) {
	var ids []string
	for i := range 4 {
		ids = append(ids, must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: i})).of(t).JobID)
	}
	const w = "go-af"
	first := fetchOne(t, e, e.q, w, 5)
	out := must(e.c.AckAndFetch(e.ctx, Ack{JobID: first.JobID, WorkerID: w, Attempt: first.Attempt},
		FetchBody{Queues: []string{e.q}, WorkerID: w, Count: 1})).of(t)
	if out.Status != "completed" || len(out.Jobs) != 1 || out.Jobs[0].JobID == first.JobID {
		t.Fatalf("ack and fetch: %+v", out)
	}
	second := out.Jobs[0]
	res := must(e.c.AckBatchAndFetch(e.ctx, []Ack{{JobID: second.JobID, WorkerID: w, Attempt: second.Attempt}},
		FetchBody{Queues: []string{e.q}, WorkerID: w, Count: 2})).of(t)
	if res.Acked != 1 || len(res.Errors) != 0 || len(res.Jobs) != 2 {
		t.Fatalf("ack batch and fetch: %+v", res)
	}
	acks := []Ack{}
	for _, j := range res.Jobs {
		acks = append(acks, Ack{JobID: j.JobID, WorkerID: w, Attempt: j.Attempt})
	}
	acked, failed, err := e.c.AckBatch(e.ctx, acks)
	if err != nil || acked != 2 || len(failed) != 0 {
		t.Fatalf("ack batch: %d %v %v", acked, failed, err)
	}
	for _, id := range ids {
		if st := must(e.c.Job(e.ctx, id)).of(t).State; st != "completed" {
			t.Fatalf("job %s is %s", id, st)
		}
	}
}

func confFailRetryBackoff(t *testing.T, e *confEnv) {
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, MaxRetries: ptr(2), RetryBackoff: "fixed", RetryBaseDelay: "1s"})).of(t)
	j := fetchOne(t, e, e.q, "go-w", 5)
	before := time.Now()
	fr := must(e.c.Fail(e.ctx, j.JobID, Failure{Error: "smtp timeout", Backtrace: "at send()", WorkerID: "go-w", Attempt: j.Attempt})).of(t)
	if fr.Status != "retrying" || fr.AttemptsRemaining != 1 || fr.NextAttemptAt == nil || fr.NextAttemptAt.Before(before.Add(time.Second-50*time.Millisecond)) {
		t.Fatalf("fail: %+v (sent at %v)", fr, before)
	}
	doc := must(e.c.Job(e.ctx, en.JobID)).of(t)
	if doc.State != "retrying" || doc.LastError == nil || *doc.LastError != "smtp timeout" {
		t.Fatalf("job %s, last error %v", doc.State, doc.LastError)
	}
	if early := must(e.c.Fetch(e.ctx, FetchRequest{Queues: []string{e.q}, WorkerID: "go-w"})).of(t); len(early) != 0 {
		t.Fatal("fetched a job before its backoff ran out")
	}
	j = fetchOne(t, e, e.q, "go-w", 10)
	if j.JobID != en.JobID || j.Attempt != 2 {
		t.Fatalf("retried %+v", j)
	}
	fr = must(e.c.Fail(e.ctx, j.JobID, Failure{Error: "smtp timeout", WorkerID: "go-w", Attempt: j.Attempt})).of(t)
	if fr.Status != "dead" || fr.AttemptsRemaining != 0 {
		t.Fatalf("last fail: %+v", fr)
	}
	if doc = must(e.c.Job(e.ctx, en.JobID)).of(t); doc.State != "dead" || len(doc.Errors) != 2 {
		t.Fatalf("job %s with %d errors", doc.State, len(doc.Errors))
	}
}

// runWorker runs w until the returned stop is called; stop waits for Run.
func runWorker(t *testing.T, w *Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Error("worker:", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func confHeartbeatProgressCancel(t *testing.T, e *confEnv) {
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q})).of(t)
	progress := map[string]int{"current": 3, "total": 10}
	w := NewWorker(e.c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond})
	cause := make(chan error, 1)
	w.Register(e.q, func(ctx context.Context, j *JobContext) (any, error) {
		j.Progress(progress)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	stop := runWorker(t, w)
	for {
		doc := must(e.c.Job(e.ctx, en.JobID)).of(t)
		if sameJSON(t, doc.Progress, progress) {
			break
		}
		select {
		case <-e.ctx.Done():
			t.Fatalf("progress never arrived: %s", doc.Progress)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if st := must(e.c.Cancel(e.ctx, en.JobID)).of(t); st != "cancelling" {
		t.Fatalf("cancel: %s", st)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("the handler's context ended with %v", err)
		}
	case <-e.ctx.Done():
		t.Fatal("the cancel never reached the handler")
	}
	waitState(t, e.c, en.JobID, "cancelled")
	stop()
}

func confCheckpointSurvivesDrain(t *testing.T, e *confEnv) {
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, RetryBackoff: "none", MaxRetries: ptr(5)})).of(t)
	checkpoint := map[string]int{"offset": 47000}
	w := NewWorker(e.c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second, ShutdownGrace: 300 * time.Millisecond})
	stored := make(chan error, 1)
	w.Register(e.q, func(ctx context.Context, j *JobContext) (any, error) {
		err := j.Checkpoint(ctx, checkpoint)
		stored <- err
		if err != nil {
			return nil, err
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	stop := runWorker(t, w)
	if err := <-stored; err != nil {
		t.Fatal("checkpoint:", err)
	}
	stop() // what SIGTERM does (SignalContext)
	doc := must(e.c.Job(e.ctx, en.JobID)).of(t)
	if doc.State != "pending" || len(doc.Errors) != 1 || doc.Errors[0].Error != "worker_shutdown" {
		t.Fatalf("after the drain: %s %+v", doc.State, doc.Errors)
	}
	j := fetchOne(t, e, e.q, "go-w", 5)
	if j.JobID != en.JobID || j.Attempt != 2 || !sameJSON(t, j.Checkpoint, checkpoint) {
		t.Fatalf("re-fetched %s at attempt %d with checkpoint %s", j.JobID, j.Attempt, j.Checkpoint)
	}
	_ = e.c.Ack(e.ctx, Ack{JobID: j.JobID, WorkerID: "go-w", Attempt: j.Attempt})
}

func confLeaseReclaimStaleAck(t *testing.T, e *confEnv) {
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, LeaseDuration: 1, RetryBackoff: "none"})).of(t)
	a := fetchOne(t, e, e.q, "go-a", 5)
	b := fetchOne(t, e, e.q, "go-b", 15)
	if a.JobID != en.JobID || b.JobID != en.JobID || a.Attempt != 1 || b.Attempt != 2 {
		t.Fatalf("A got %s#%d, B got %s#%d", a.JobID, a.Attempt, b.JobID, b.Attempt)
	}
	err := e.c.Ack(e.ctx, Ack{JobID: a.JobID, WorkerID: "go-a", Attempt: a.Attempt})
	wantError(t, err, 409, CodeConflict)
	if !IsConflict(err) {
		t.Fatal("IsConflict says no")
	}
	st := must(e.c.Heartbeat(e.ctx, "go-a", map[string]HeartbeatJob{a.JobID: {Attempt: a.Attempt}})).of(t)
	if st[a.JobID] != "lost" {
		t.Fatalf("A's heartbeat: %v", st)
	}
	if err := e.c.Ack(e.ctx, Ack{JobID: b.JobID, WorkerID: "go-b", Attempt: b.Attempt}); err != nil {
		t.Fatal(err)
	}
	doc := must(e.c.Job(e.ctx, en.JobID)).of(t)
	if doc.State != "completed" || len(doc.Errors) == 0 || !strings.Contains(doc.Errors[0].Error, "lease expired") {
		t.Fatalf("job %s, errors %+v", doc.State, doc.Errors)
	}
}

func confUnclaim(t *testing.T, e *confEnv) {
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, MaxRetries: ptr(0)})).of(t)
	j := fetchOne(t, e, e.q, "go-w", 5)
	if j.JobID != en.JobID || j.Attempt != 1 {
		t.Fatalf("fetched %s#%d", j.JobID, j.Attempt)
	}
	_, err := e.c.Unclaim(e.ctx, j.JobID, "go-other", 1)
	wantError(t, err, 409, CodeConflict)
	if r := must(e.c.Unclaim(e.ctx, j.JobID, "go-w", j.Attempt)).of(t); r.Status != "pending" {
		t.Fatalf("unclaim: %+v", r)
	}
	doc := must(e.c.Job(e.ctx, en.JobID)).of(t)
	if doc.State != "pending" || doc.Attempt != 0 || len(doc.Errors) != 0 {
		t.Fatalf("after the unclaim: %s, attempt %d, errors %+v", doc.State, doc.Attempt, doc.Errors)
	}
	_, err = e.c.Unclaim(e.ctx, j.JobID, "go-w", j.Attempt)
	wantError(t, err, 409, CodeConflict)
	again := fetchOne(t, e, e.q, "go-w", 5)
	if again.JobID != en.JobID || again.Attempt != 1 {
		t.Fatalf("fetched again %s#%d", again.JobID, again.Attempt)
	}
	if err := e.c.Ack(e.ctx, Ack{JobID: again.JobID, WorkerID: "go-w", Attempt: again.Attempt}); err != nil {
		t.Fatal(err)
	}
	if doc := must(e.c.Job(e.ctx, en.JobID)).of(t); doc.State != "completed" {
		t.Fatalf("after the ack: %s", doc.State)
	}
}

func confUnique(t *testing.T, e *confEnv) {
	r := EnqueueRequest{Queue: e.q, UniqueKey: "welcome-user-1"}
	first := must(e.c.Enqueue(e.ctx, r)).of(t)
	again := must(e.c.Enqueue(e.ctx, r)).of(t)
	if first.UniqueExisting || !again.UniqueExisting || again.JobID != first.JobID || again.Status != "pending" {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	qs := must(e.c.Queues(e.ctx)).of(t)
	i := slices.IndexFunc(qs, func(q Queue) bool { return q.Name == e.q })
	if i < 0 || qs[i].Pending != 1 {
		t.Fatalf("queues %+v", qs)
	}
	j := fetchOne(t, e, e.q, "go-w", 5)
	noErr(t, e.c.Ack(e.ctx, Ack{JobID: j.JobID, WorkerID: "go-w", Attempt: j.Attempt}))
	if after := must(e.c.Enqueue(e.ctx, r)).of(t); after.UniqueExisting || after.JobID == first.JobID {
		t.Fatalf("after the holder finished: %+v", after)
	}
}

func confBatchCallback(t *testing.T, e *confEnv) {
	done := e.q + ".done"
	b := must(e.c.EnqueueBatch(e.ctx, []EnqueueRequest{{Queue: e.q, Payload: 1}, {Queue: e.q, Payload: 2}, {Queue: e.q, Payload: 3, MaxRetries: ptr(1)}},
		&Batch{CallbackQueue: done, CallbackPayload: map[string]string{"album_id": "album_42"}})).of(t)
	if len(b.JobIDs) != 3 || b.BatchID == nil {
		t.Fatalf("batch %+v", b)
	}
	st := must(e.c.BatchStatus(e.ctx, *b.BatchID)).of(t)
	if st.Total != 3 || st.Pending != 3 {
		t.Fatalf("batch status %+v", st)
	}
	held := map[string]FetchedJob{}
	for len(held) < 3 {
		for _, j := range must(e.c.Fetch(e.ctx, FetchRequest{Queues: []string{e.q}, WorkerID: "go-w", Timeout: 5, Count: 3})).of(t) {
			held[j.JobID] = j
		}
	}
	for i, id := range b.JobIDs {
		j := held[id]
		if i < 2 {
			noErr(t, e.c.Ack(e.ctx, Ack{JobID: id, WorkerID: "go-w", Attempt: j.Attempt}))
		} else if fr := must(e.c.Fail(e.ctx, id, Failure{Error: "bad image", WorkerID: "go-w", Attempt: j.Attempt})).of(t); fr.Status != "dead" {
			t.Fatalf("fail: %+v", fr)
		}
	}
	cb := fetchOne(t, e, done, "go-w", 10)
	var p struct {
		AlbumID string `json:"album_id"`
		Batch   struct {
			ID                       string
			Total, Succeeded, Failed int
		} `json:"batch"`
	}
	if err := json.Unmarshal(cb.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.AlbumID != "album_42" || p.Batch.ID != *b.BatchID || p.Batch.Total != 3 || p.Batch.Succeeded != 2 || p.Batch.Failed != 1 {
		t.Fatalf("callback payload %s", cb.Payload)
	}
	st = must(e.c.BatchStatus(e.ctx, *b.BatchID)).of(t)
	if st.Succeeded != 2 || st.Failed != 1 || st.CallbackJobID == nil {
		t.Fatalf("batch status %+v", st)
	}
}

func confChain(t *testing.T, e *confEnv) {
	extract, summarize := e.q+".extract", e.q+".summarize"
	en := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: extract, Payload: map[string]string{"doc": "d1"},
		Chain: &Chain{Steps: []ChainStep{{Queue: extract}, {Queue: summarize, Payload: map[string]string{"mode": "short"}}}}})).of(t)
	j := fetchOne(t, e, extract, "go-w", 5)
	doc := must(e.c.Job(e.ctx, en.JobID)).of(t)
	if doc.ChainID == nil || doc.ChainStep == nil || *doc.ChainStep != 0 {
		t.Fatalf("chain id %v step %v", doc.ChainID, doc.ChainStep)
	}
	result := map[string]string{"text": "extracted"}
	noErr(t, e.c.Ack(e.ctx, Ack{JobID: j.JobID, Result: result, WorkerID: "go-w", Attempt: j.Attempt}))
	next := fetchOne(t, e, summarize, "go-w", 10)
	var p struct {
		Mode           string          `json:"mode"`
		PreviousResult json.RawMessage `json:"previous_result"`
	}
	if err := json.Unmarshal(next.Payload, &p); err != nil || p.Mode != "short" || !sameJSON(t, p.PreviousResult, result) {
		t.Fatalf("next step's payload %s", next.Payload)
	}
	if d := must(e.c.Job(e.ctx, next.JobID)).of(t); d.ChainID == nil || *d.ChainID != *doc.ChainID {
		t.Fatalf("next step's chain %v, want %s", d.ChainID, *doc.ChainID)
	}
	noErr(t, e.c.Ack(e.ctx, Ack{JobID: next.JobID, WorkerID: "go-w", Attempt: next.Attempt}))
	for _, id := range []string{en.JobID, next.JobID} {
		if st := must(e.c.Job(e.ctx, id)).of(t).State; st != "completed" {
			t.Fatalf("job %s is %s", id, st)
		}
	}
}

func confSearchPaging(t *testing.T, e *confEnv) {
	tags := map[string]string{"run": "search-paging"}
	want := map[string]bool{}
	for i := range 7 {
		want[must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: i, Tags: tags})).of(t).JobID] = true
	}
	r := SearchRequest{Queue: e.q, Tags: tags, Limit: 3, Sort: "created_at", Order: "asc"}
	got := map[string]bool{}
	var sizes []int
	for page, err := range e.c.SearchPages(e.ctx, r) {
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.Jobs))
		for _, j := range page.Jobs {
			if got[j.ID] {
				t.Fatalf("job %s on two pages", j.ID)
			}
			got[j.ID] = true
		}
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(sizes, []int{3, 3, 1}) {
		t.Fatalf("pages of %v: %v, want %v", sizes, got, want)
	}
	one := must(e.c.Search(e.ctx, r)).of(t)
	if !one.HasMore || one.Total != 7 {
		t.Fatalf("first page: has_more %v total %d", one.HasMore, one.Total)
	}
}

func confBulk(t *testing.T, e *confEnv) {
	var ids []string
	for i := range 5 {
		ids = append(ids, must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: i})).of(t).JobID)
	}
	res, acc, err := e.c.Bulk(e.ctx, BulkRequest{JobIDs: ids[:2], Action: "change_priority", Priority: "critical"})
	if err != nil || acc != nil || res.Affected != 2 || res.Errors != 0 {
		t.Fatalf("bulk by ids: %+v %v", res, err)
	}
	if p := must(e.c.Job(e.ctx, ids[0])).of(t).Priority; p != "critical" {
		t.Fatalf("priority %s", p)
	}
	_, _, err = e.c.Bulk(e.ctx, BulkRequest{Filter: &SearchRequest{Queue: e.q}, Action: "cancel"})
	wantError(t, err, 400, CodeConfirmationRequired)
	res, acc, err = e.c.Bulk(e.ctx, BulkRequest{Filter: &SearchRequest{Queue: e.q, State: []string{"pending"}}, Action: "cancel", Async: true, Confirm: true})
	if err != nil || res != nil || acc == nil || acc.ID == "" {
		t.Fatalf("async bulk: %+v %+v %v", res, acc, err)
	}
	final := must(e.c.WatchBulk(e.ctx, acc.ID, nil)).of(t)
	if final.Status != "completed" || final.Affected != 5 {
		t.Fatalf("final %+v", final)
	}
	if op := must(e.c.BulkStatus(e.ctx, acc.ID)).of(t); op.Status != "completed" {
		t.Fatalf("operation %+v", op)
	}
	for _, id := range ids {
		if st := must(e.c.Job(e.ctx, id)).of(t).State; st != "cancelled" {
			t.Fatalf("job %s is %s", id, st)
		}
	}
}

// openEvents streams the queue's enqueued events from lastID into a
// channel; it returns once the server opened the stream.
func openEvents(t *testing.T, e *confEnv, lastID string) (<-chan Event, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	opened := make(chan struct{})
	got := make(chan Event, 64)
	ended := make(chan error, 1)
	go func() {
		ended <- e.c.Events(ctx, EventsRequest{Queues: []string{e.q}, Types: []string{"enqueued"}, LastEventID: lastID,
			OnOpen: func() { close(opened) }}, func(ev Event) error { got <- ev; return nil })
	}()
	select {
	case <-opened:
	case err := <-ended:
		t.Fatalf("the stream ended before it opened: %v", err)
	}
	return got, func() { cancel(); <-ended }
}

func nextJobEvent(t *testing.T, e *confEnv, got <-chan Event) *JobEvent {
	t.Helper()
	for {
		select {
		case ev := <-got:
			if ev.Reset {
				t.Fatalf("reset: %s", ev.Reason)
			}
			if ev.Job != nil {
				return ev.Job
			}
		case <-e.ctx.Done():
			t.Fatal("no event came")
		}
	}
}

func confEventsResume(t *testing.T, e *confEnv) {
	got, closeStream := openEvents(t, e, "")
	a := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: "a"})).of(t)
	var lastID string
	for lastID == "" {
		select {
		case ev := <-got:
			if ev.Job != nil && ev.Job.JobID == a.JobID && ev.Job.Type == "enqueued" {
				lastID = ev.ID
			}
		case <-e.ctx.Done():
			t.Fatal("A's event never came")
		}
	}
	closeStream()
	b := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: "b"})).of(t)
	c := must(e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: "c"})).of(t)
	got, closeStream = openEvents(t, e, lastID)
	defer closeStream()
	for _, want := range []string{b.JobID, c.JobID} {
		if ev := nextJobEvent(t, e, got); ev.JobID != want || ev.Type != "enqueued" {
			t.Fatalf("resumed with %s %s, want %s enqueued", ev.JobID, ev.Type, want)
		}
	}
}

func confBackoff429(t *testing.T, e *confEnv) {
	key := must(e.c.CreateKey(e.ctx, CreateKeyRequest{Name: "go-backoff", Role: "producer", RateWrite: 1})).of(t).Key
	body := fmt.Sprintf(`{"queue":%q}`, e.q)
	var statuses []int
	retryAfter := ""
	for range 2 {
		req := must(http.NewRequestWithContext(e.ctx, http.MethodPost, e.url+"/api/v1/enqueue", strings.NewReader(body))).of(t)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp := must(http.DefaultClient.Do(req)).of(t)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		retryAfter = resp.Header.Get("Retry-After")
	}
	if secs, _ := strconv.Atoi(retryAfter); !reflect.DeepEqual(statuses, []int{201, 429}) || secs < 1 {
		t.Fatalf("raw enqueues: %v, Retry-After %q", statuses, retryAfter)
	}
	kc := New(e.url, WithAPIKey(key))
	if en := must(kc.Enqueue(e.ctx, EnqueueRequest{Queue: e.q})).of(t); en.JobID == "" {
		t.Fatal("no job id")
	}
	kc.MaxRetries = 0
	raised := 0
	for range 2 {
		if _, err := kc.Enqueue(e.ctx, EnqueueRequest{Queue: e.q}); err != nil {
			ae := wantError(t, err, 429, CodeRateLimited)
			if ae.RetryAfter < time.Second {
				t.Fatalf("retry after %v", ae.RetryAfter)
			}
			raised++
		}
	}
	if raised == 0 {
		t.Fatal("two enqueues in a row at 1 a second: none was refused")
	}
}

func confFailover(t *testing.T, e *confEnv) {
	dead := "http://" + freeAddr(t) // nothing listens there
	c := New(dead + "," + e.url)
	en := must(c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q})).of(t)
	if got := c.Nodes()[0]; got != e.url {
		t.Fatalf("current node %s, want %s", got, e.url)
	}
	if doc := must(c.Job(e.ctx, en.JobID)).of(t); doc.Queue != e.q {
		t.Fatalf("job %+v", doc)
	}
}

func confTypedErrors(t *testing.T, e *confEnv) {
	_, err := e.c.Job(e.ctx, "job_0_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V")
	wantError(t, err, 404, CodeNotFound)
	if !IsNotFound(err) {
		t.Fatal("IsNotFound says no")
	}
	_, err = e.c.Enqueue(e.ctx, EnqueueRequest{Queue: "bad queue!"})
	wantError(t, err, 400, CodeInvalidRequest)
	err = e.c.Ack(e.ctx, Ack{JobID: "job_0_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V", WorkerID: "go-w", Attempt: 1})
	wantError(t, err, 404, CodeNotFound)
}

func confWorkerRuntime(t *testing.T, e *confEnv) {
	ids := make([]string, 12)
	for i := range ids {
		r := EnqueueRequest{Queue: e.q, Payload: map[string]any{"n": i}}
		if i == 5 {
			r.Payload, r.MaxRetries = map[string]any{"n": i, "fail": true}, ptr(1)
		}
		ids[i] = must(e.c.Enqueue(e.ctx, r)).of(t).JobID
	}
	w := NewWorker(e.c, WorkerOptions{Concurrency: 4, FetchTimeout: time.Second})
	var running, most atomic.Int64
	w.Register(e.q, func(ctx context.Context, j *JobContext) (any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		var p struct {
			N    int  `json:"n"`
			Fail bool `json:"fail"`
		}
		if err := j.Decode(&p); err != nil {
			return nil, err
		}
		if p.Fail {
			return nil, errors.New("boom")
		}
		return map[string]int{"double": 2 * p.N}, nil
	})
	stop := runWorker(t, w)
	for i, id := range ids {
		if i == 5 {
			doc := waitState(t, e.c, id, "dead")
			if doc.LastError == nil || !strings.Contains(*doc.LastError, "boom") {
				t.Fatalf("dead job's last error %v", doc.LastError)
			}
			continue
		}
		if doc := waitState(t, e.c, id, "completed"); !sameJSON(t, doc.Result, map[string]int{"double": 2 * i}) {
			t.Fatalf("job %d result %s", i, doc.Result)
		}
	}
	stop()
	if most.Load() > 4 {
		t.Fatalf("%d handlers ran at once, concurrency 4", most.Load())
	}
	ws := must(e.c.Workers(e.ctx)).of(t)
	if !slices.ContainsFunc(ws, func(wi WorkerInfo) bool { return wi.ID == w.ID() }) {
		t.Fatalf("workers %+v lack %s", ws, w.ID())
	}
}

// batchRequests is the server's count of POST /api/v1/enqueue/batch
// requests (GET /api/v1/metrics).
func batchRequests(t *testing.T, e *confEnv) int {
	t.Helper()
	req := must(http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+"/api/v1/metrics", nil)).of(t)
	resp := must(http.DefaultClient.Do(req)).of(t)
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, `corvo_http_requests_total{route="POST /api/v1/enqueue/batch",`); ok {
			v, err := strconv.Atoi(rest[strings.LastIndexByte(rest, ' ')+1:])
			if err != nil {
				t.Fatalf("metrics line %q", line)
			}
			n += v
		}
	}
	return n
}

func confEnqueueCoalescing(t *testing.T, e *confEnv) {
	before := batchRequests(t, e)
	const calls = 200
	ids := make([]string, calls)
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			en, err := e.c.Enqueue(e.ctx, EnqueueRequest{Queue: e.q, Payload: i})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = en.JobID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	distinct := map[string]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	if len(distinct) != calls || distinct[""] {
		t.Fatalf("%d distinct job ids for %d calls", len(distinct), calls)
	}
	qs := must(e.c.Queues(e.ctx)).of(t)
	i := slices.IndexFunc(qs, func(q Queue) bool { return q.Name == e.q })
	if i < 0 || qs[i].Pending != calls {
		t.Fatalf("queue %+v", qs)
	}
	if after := batchRequests(t, e); after <= before {
		t.Fatalf("batch requests %d → %d: no call was coalesced", before, after)
	}
}
