package corvo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The SDK is tested against the real server, built from this repository.
var serverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corvo-sdk-test-")
	if err != nil {
		panic(err)
	}
	// CORVO_BIN names a server built already (as the other SDKs' tests
	// take it); else the tests build this repository's.
	if serverBin = os.Getenv("CORVO_BIN"); serverBin == "" {
		serverBin = filepath.Join(dir, "corvo")
		build := exec.Command("go", "build", "-o", serverBin, "./cmd/corvo")
		build.Dir = "../.."
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			panic("building the corvo server: " + err.Error())
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// handedOut holds the ports freeAddr gave this process's tests: the
// kernel may offer a port again once its probe listener closed, and two
// servers of one test run must not be told to bind the same one.
var handedOut sync.Map

func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

// startServer runs a server for one test and returns its URL.
func startServer(t *testing.T, extra ...string) string {
	url, _ := startNode(t, extra...)
	return url
}

// startNode runs a server and returns its URL and process (to kill it).
// waitEveryShardOnEveryNode waits until each shard of the cluster behind c
// has a leader and nodes settled voting replicas (every node of a cluster
// of nodes nodes, with the default 3 replicas).
func waitEveryShardOnEveryNode(t *testing.T, ctx context.Context, c *Client, nodes int) {
	t.Helper()
	for {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		placed := len(st.Nodes) == nodes && len(st.Shards) == st.ShardCount
		for _, sh := range st.Shards {
			voters := 0
			for _, r := range sh.Replicas {
				if r.Role != "learner" {
					voters++
				}
			}
			placed = placed && sh.LeaderNode != 0 && voters == nodes && sh.Settled != nil && *sh.Settled
		}
		if placed {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("shards never reached every node: %+v", st.Shards)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func startNode(t *testing.T, extra ...string) (string, *testNode) {
	t.Helper()
	// A port freeAddr found free can be taken again before the server
	// binds it (tests start servers in parallel): a server that exits
	// before it answers is started again on other ports.
	var n *testNode
	for attempt := 0; attempt < 3; attempt++ {
		n = launchNode(t, extra)
		if n.ready(60 * time.Second) {
			return n.url, n
		}
		select {
		case <-n.exited: // exited before answering: try other ports
		default:
			n.kill() // running, but never answered
			t.Fatalf("server did not answer /healthz in 60 s\n%s", n.stderr.String())
		}
	}
	t.Fatalf("server did not start: %v\n%s", n.err, n.stderr.String())
	return "", nil
}

// testNode is a server process started by a test. Its process is waited
// for by one goroutine only; kill stops it and waits for that.
type testNode struct {
	url    string
	cmd    *exec.Cmd
	stderr *headWriter
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

func launchNode(t *testing.T, extra []string) *testNode {
	t.Helper()
	httpAddr := freeAddr(t)
	args := append([]string{"server", "--bind", httpAddr, "--raft-bind", freeAddr(t), "--data-dir", t.TempDir(), "--log-level", "error"}, extra...)
	n := &testNode{url: "http://" + httpAddr, cmd: exec.Command(serverBin, args...), stderr: &headWriter{max: 64 << 10}, exited: make(chan struct{})}
	// The nodes of a test cluster share one cluster secret.
	n.cmd.Env = append(os.Environ(), "CORVO_CLUSTER_SECRET="+testClusterSecret)
	n.cmd.Stderr = n.stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(n.kill)
	return n
}

// ready waits until the server answers /healthz, and reports false if it
// exited first or did not answer within d.
func (n *testNode) ready(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if resp, err := http.Get(n.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return true
			}
		}
		select {
		case <-n.exited:
			return false
		case <-deadline.C:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill stops the server and waits until it has exited.
func (n *testNode) kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (w *headWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (w *headWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// enqueueN enqueues n jobs on queue (payload {"n": i}) and returns their
// IDs in order.
func enqueueN(t *testing.T, c *Client, queue string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		e, err := c.Enqueue(context.Background(), EnqueueRequest{Queue: queue, Payload: map[string]int{"n": i}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.JobID)
	}
	return ids
}

// testClusterSecret is the cluster secret of the test servers.
const testClusterSecret = "sdk-test-cluster-secret-0123456789abcdef"

func ptr[T any](v T) *T { return &v }

func waitState(t *testing.T, c *Client, id, state string) *Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := c.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == state {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, never %s", id, j.State, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWorkerProcessesJobs(t *testing.T) {
	t.Parallel()
	c := New(startServer(t, "--strict-leases")) // every ack, fail and heartbeat names its lease
	ctx := context.Background()
	ids := enqueueN(t, c, "sdk.work", 20)
	w := NewWorker(c, WorkerOptions{Concurrency: 4, FetchTimeout: time.Second})
	var done atomic.Int64
	w.Register("sdk.work", func(ctx context.Context, j *JobContext) (any, error) {
		var p struct{ N int }
		if err := j.Decode(&p); err != nil {
			return nil, err
		}
		done.Add(1)
		return map[string]int{"double": 2 * p.N}, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	for _, id := range ids {
		waitState(t, c, id, "completed")
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	j, _ := c.Job(ctx, ids[3])
	if string(j.Result) != `{"double":6}` {
		t.Fatalf("result %s", j.Result)
	}
	if done.Load() != 20 {
		t.Fatalf("handled %d", done.Load())
	}
	workers, err := c.Workers(ctx)
	if err != nil || len(workers) != 1 || workers[0].ID != w.ID() {
		t.Fatalf("workers %+v %v", workers, err)
	}
}

// TestWorkerCancelReachesHandler: a server-side cancel ends the handler's
// context within one heartbeat interval.
func TestWorkerCancelReachesHandler(t *testing.T) {
	t.Parallel()
	c := New(startServer(t, "--strict-leases")) // every ack, fail and heartbeat names its lease
	ctx := context.Background()
	e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.cancel", Payload: 1})
	if err != nil {
		t.Fatal(err)
	}
	const interval = 150 * time.Millisecond
	w := NewWorker(c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second, HeartbeatInterval: interval})
	started := make(chan struct{})
	ended := make(chan time.Time, 1)
	w.Register("sdk.cancel", func(ctx context.Context, j *JobContext) (any, error) {
		close(started)
		<-ctx.Done()
		ended <- time.Now()
		if !errors.Is(context.Cause(ctx), ErrCancelled) {
			t.Errorf("cause %v", context.Cause(ctx))
		}
		return nil, ctx.Err()
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx) }()
	<-started
	at := time.Now()
	st, err := c.Cancel(ctx, e.JobID)
	if err != nil || st != "cancelling" {
		t.Fatalf("cancel: %q %v", st, err)
	}
	select {
	case end := <-ended:
		if d := end.Sub(at); d > 3*interval {
			t.Fatalf("the handler heard of the cancel after %v (interval %v)", d, interval)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never heard of the cancel")
	}
	waitState(t, c, e.JobID, "cancelled")
}

// TestWorkerShutdownKeepsCheckpoint: SIGTERM (the Run context ending)
// mid-job fails the job with its checkpoint after the grace period, and the
// server retries it from that checkpoint.
func TestWorkerShutdownKeepsCheckpoint(t *testing.T) {
	t.Parallel()
	c := New(startServer(t, "--strict-leases")) // every ack, fail and heartbeat names its lease
	ctx := context.Background()
	e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.long", Payload: 1, RetryBackoff: "none", MaxRetries: ptr(5)})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorker(c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second, ShutdownGrace: 300 * time.Millisecond})
	checkpointed := make(chan error, 1) // the first checkpoint's outcome
	w.Register("sdk.long", func(ctx context.Context, j *JobContext) (any, error) {
		j.Progress(map[string]int{"current": 47, "total": 100})
		err := j.Checkpoint(ctx, map[string]int{"offset": 47000})
		select {
		case checkpointed <- err:
		default:
		}
		if err != nil {
			return nil, err
		}
		<-ctx.Done() // a long job that does not finish in the grace period
		return nil, ctx.Err()
	})
	runCtx, sigterm := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	if err := <-checkpointed; err != nil {
		sigterm()
		<-errc
		t.Fatal("checkpoint:", err)
	}
	// The checkpoint carried the progress recorded before it.
	got, err := c.Job(ctx, e.JobID)
	if err == nil && string(got.Progress) != `{"current":47,"total":100}` {
		err = fmt.Errorf("progress %s", got.Progress)
	}
	if err != nil {
		sigterm()
		<-errc
		t.Fatal("after the checkpoint:", err)
	}
	sigterm()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, e.JobID, "pending")
	if len(j.Errors) != 1 || j.Errors[0].Error != "worker_shutdown" {
		t.Fatalf("errors %+v", j.Errors)
	}
	jobs, err := c.Fetch(ctx, FetchRequest{Queues: []string{"sdk.long"}, Timeout: 2})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("refetch: %v %v", jobs, err)
	}
	if jobs[0].Attempt != 2 || string(jobs[0].Checkpoint) != `{"offset":47000}` {
		t.Fatalf("retried from %s at attempt %d", jobs[0].Checkpoint, jobs[0].Attempt)
	}
}

// TestClientRetries429 honours Retry-After on 429 and 503.
func TestClientRetries429(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch n {
		case 1:
			w.Header().Set("Retry-After", "0.05")
			w.WriteHeader(429)
			fmt.Fprint(w, `{"error":"overloaded","code":"overloaded"}`)
		case 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			fmt.Fprint(w, `{"error":"no leader","code":"unavailable"}`)
		default:
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(Enqueued{JobID: "job_0_x", Status: "pending"})
		}
	}))
	defer srv.Close()
	c := New(srv.URL)
	start := time.Now()
	e, err := c.Enqueue(context.Background(), EnqueueRequest{Queue: "q"})
	if err != nil || e.JobID != "job_0_x" {
		t.Fatalf("%+v %v", e, err)
	}
	if calls.Load() != 3 {
		t.Fatalf("calls %d", calls.Load())
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("Retry-After was not honoured")
	}
	c.MaxRetries = 0
	calls.Store(0)
	_, err = c.Enqueue(context.Background(), EnqueueRequest{Queue: "q"})
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Code != "overloaded" {
		t.Fatalf("want the 429 surfaced, got %v", err)
	}
}

// TestClientEveryEndpoint drives the management calls once each.
func TestClientEveryEndpoint(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx := context.Background()
	b, err := c.EnqueueBatch(ctx, []EnqueueRequest{{Queue: "sdk.m", Payload: 1}, {Queue: "sdk.m", Payload: 2, MaxRetries: ptr(0)}},
		&Batch{CallbackQueue: "sdk.cb", CallbackPayload: map[string]string{"x": "y"}})
	if err != nil || len(b.JobIDs) != 2 || b.BatchID == nil {
		t.Fatalf("%+v %v", b, err)
	}
	jobs, err := c.Fetch(ctx, FetchRequest{Queues: []string{"sdk.m"}, WorkerID: "w", Count: 2, Timeout: 1})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("%v %v", jobs, err)
	}
	if n, failed, err := c.AckBatch(ctx, []Ack{{JobID: jobs[0].JobID, WorkerID: "w"}}); err != nil || n != 1 || len(failed) != 0 {
		t.Fatalf("ack batch %d %v %v", n, failed, err)
	}
	fr, err := c.Fail(ctx, jobs[1].JobID, Failure{Error: "boom", WorkerID: "w"})
	if err != nil || fr.Status != "dead" {
		t.Fatalf("%+v %v", fr, err)
	}
	// Batch counters live on the batch's shard; results from jobs on other
	// shards reach it through the outbox relay, so wait for the count.
	for deadline := time.Now().Add(10 * time.Second); ; {
		bs, err := c.BatchStatus(ctx, *b.BatchID)
		if err == nil && bs.Failed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch never counted the failure: %v %v", bs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dead, _, err := c.Dead(ctx, "sdk.m", 10, "")
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead %v %v", dead, err)
	}
	if err := c.Retry(ctx, dead[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Move(ctx, dead[0].ID, "sdk.other", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, b.JobIDs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Job(ctx, b.JobIDs[0]); !IsNotFound(err) {
		t.Fatalf("want 404, got %v", err)
	}
	if _, err := c.QueueAction(ctx, "sdk.m", "pause"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetConcurrency(ctx, "sdk.m", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.SetThrottle(ctx, "sdk.m", &Throttle{Rate: 5, Period: "1s"}); err != nil {
		t.Fatal(err)
	}
	qs, err := c.Queues(ctx)
	if err != nil || len(qs) == 0 {
		t.Fatal(qs, err)
	}
	sc, err := c.PutSchedule(ctx, Schedule{Name: "nightly", Queue: "sdk.m", Cron: "0 3 * * *"})
	if err != nil || sc.NextRun == nil {
		t.Fatalf("%+v %v", sc, err)
	}
	if all, err := c.Schedules(ctx); err != nil || len(all) != 1 {
		t.Fatal(all, err)
	}
	if err := c.DeleteSchedule(ctx, sc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(ctx, "sdk.m"); err != nil {
		t.Fatal(err)
	}
	dep, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.dep", Payload: 1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.held", DependsOn: []string{dep.JobID}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, e.JobID, "held")
	if err := c.Approve(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	if err := c.Reject(ctx, e.JobID); !IsConflict(err) {
		t.Fatalf("want 409, got %v", err)
	}
}

// countingProxy forwards to url, counting requests by path prefix, and
// the acks the ack requests carry: "acked" (plain) and "acked+fetch"
// (with a fetch); "ack/batch" counts batch requests. acked maps each
// job ID to the number of requests that acked it. When refuseAckFetch is
// set it answers an ack (or ack batch) that carries a fetch as a server
// without ack-and-fetch would (400, nothing acked).
func countingProxy(t *testing.T, url string, refuseAckFetch bool) (string, *sync.Map) {
	t.Helper()
	counts := &sync.Map{}
	add := func(key string, n int64) {
		c, _ := counts.LoadOrStore(key, new(atomic.Int64))
		c.(*atomic.Int64).Add(n)
	}
	target, _ := neturl.Parse(url)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Path
		if strings.HasPrefix(key, "/api/v1/ack/") || key == "/api/v1/enqueue/batch" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct {
				Acks  []Ack           `json:"acks"`
				Fetch json.RawMessage `json:"fetch"`
				Jobs  []json.RawMessage
			}
			_ = json.Unmarshal(body, &req)
			if key == "/api/v1/enqueue/batch" {
				add("enqueued in batches", int64(len(req.Jobs)))
			} else {
				ids := []string{strings.TrimPrefix(key, "/api/v1/ack/")}
				if key == "/api/v1/ack/batch" {
					add("ack/batch", 1)
					ids = ids[:0]
					for _, a := range req.Acks {
						ids = append(ids, a.JobID)
					}
				}
				key = "ack"
				if req.Fetch != nil {
					key = "ack+fetch"
					if refuseAckFetch {
						w.Header().Set("Content-Type", "application/json")
						w.WriteHeader(400)
						_, _ = w.Write([]byte(`{"error":"unknown field \"fetch\"","code":"invalid_request"}`))
						return
					}
				}
				add(strings.Replace(key, "ack", "acked", 1), int64(len(ids)))
				for _, id := range ids {
					add("job "+id, 1)
				}
			}
		}
		add(key, 1)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, counts
}

func count(m *sync.Map, key string) int64 {
	if n, ok := m.Load(key); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// TestWorkerAcksFetchTheNextJob: with a backlog, each ack brings the
// slot's next job (one request per job at most), so the worker seldom
// fetches on its own; against a server that refuses the combined call it
// falls back to plain acks and still completes everything, each job
// acked once.
func TestWorkerAcksFetchTheNextJob(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	for _, old := range []bool{false, true} {
		url, counts := countingProxy(t, base, old)
		c := New(url)
		ctx := context.Background()
		queue := fmt.Sprintf("sdk.ackfetch.%v", old)
		ids := enqueueN(t, c, queue, 60)
		w := NewWorker(c, WorkerOptions{Concurrency: 2, FetchTimeout: time.Second})
		w.Register(queue, func(context.Context, *JobContext) (any, error) { return nil, nil })
		runCtx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- w.Run(runCtx) }()
		for _, id := range ids {
			waitState(t, c, id, "completed")
		}
		stop()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		fetches, combined, plain := count(counts, "/api/v1/fetch"), count(counts, "acked+fetch"), count(counts, "acked")
		if !old && (combined < 50 || fetches > 10) {
			t.Fatalf("acks carrying a fetch: %d, fetches: %d (want most jobs to come with an ack)", combined, fetches)
		}
		if old && plain != 60 {
			t.Fatalf("against an older server: %d plain acks, want 60", plain)
		}
		for _, id := range ids {
			if n := count(counts, "job "+id); n != 1 {
				t.Fatalf("job %s acked %d times", id, n)
			}
		}
	}
}

// TestWorkerBatchesAcks: acks that finish together go as one ack batch
// that fetches for the slots it frees; every job is handled once and
// acked once, results arrive, and one job whose ack the server refuses
// (its attempt failed meanwhile) stays as the server left it without
// holding up the others.
func TestWorkerBatchesAcks(t *testing.T) {
	t.Parallel()
	url, counts := countingProxy(t, startServer(t, "--strict-leases"), false)
	c := New(url)
	ctx := context.Background()
	const jobs, slots = 320, 32
	reqs := make([]EnqueueRequest, jobs)
	for i := range reqs {
		reqs[i] = EnqueueRequest{Queue: "sdk.ackbatch", Payload: map[string]int{"n": i}, MaxRetries: ptr(0)}
	}
	b, err := c.EnqueueBatch(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorker(c, WorkerOptions{Concurrency: slots, FetchTimeout: time.Second})
	var handled sync.Map
	started := make(chan struct{}, slots)
	startAll := make(chan struct{})
	var n atomic.Int64
	w.Register("sdk.ackbatch", func(ctx context.Context, j *JobContext) (any, error) {
		k, _ := handled.LoadOrStore(j.JobID, new(atomic.Int64))
		k.(*atomic.Int64).Add(1)
		if n.Add(1) <= slots { // the first slots finish together
			started <- struct{}{}
			<-startAll
		}
		var p struct{ N int }
		if err := j.Decode(&p); err != nil {
			return nil, err
		}
		if p.N == 100 {
			// The attempt fails under the worker's feet: its ack is refused.
			if _, err := c.Fail(ctx, j.JobID, Failure{Error: "gone", WorkerID: w.ID(), Attempt: j.Attempt}); err != nil {
				return nil, err
			}
		}
		return map[string]int{"double": 2 * p.N}, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	for range slots {
		<-started
	}
	close(startAll)
	for i, id := range b.JobIDs {
		if i == 100 {
			waitState(t, c, id, "dead")
			continue
		}
		waitState(t, c, id, "completed")
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for i, id := range b.JobIDs {
		if k, ok := handled.Load(id); !ok || k.(*atomic.Int64).Load() != 1 {
			t.Fatalf("job %d handled %v times", i, k)
		}
		if acks := count(counts, "job "+id); acks != 1 {
			t.Fatalf("job %d acked %d times", i, acks)
		}
	}
	j, err := c.Job(ctx, b.JobIDs[7])
	if err != nil || string(j.Result) != `{"double":14}` {
		t.Fatalf("result %s %v", j.Result, err)
	}
	batches, requests := count(counts, "ack/batch"), count(counts, "ack")+count(counts, "ack+fetch")
	if batches == 0 || requests > jobs/2 {
		t.Fatalf("%d acks took %d requests, %d of them batches", jobs, requests, batches)
	}
	if fetched := count(counts, "acked+fetch"); fetched < jobs/2 {
		t.Fatalf("only %d acks carried a fetch", fetched)
	}
}

// The jobs an ack batch fetches all count as running before any slot runs
// one: a handler that returns at once then finds the others still to
// finish, and its ack waits to share a request with theirs (completer.run)
// rather than going alone.
func TestWorkerStartsAnAckBatchsJobsTogether(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx := context.Background()
	const n = 3
	reqs := make([]EnqueueRequest, 2*n)
	for i := range reqs {
		reqs[i] = EnqueueRequest{Queue: "sdk.together", Payload: map[string]int{"n": i}}
	}
	if _, err := c.EnqueueBatch(ctx, reqs, nil); err != nil {
		t.Fatal(err)
	}
	w := NewWorker(c, WorkerOptions{Concurrency: n})
	g := &fetchGroup{queues: []string{"sdk.together"}}
	w.groups.Store(&[]*fetchGroup{g})
	w.base = ctx
	jobs, err := c.Fetch(ctx, FetchRequest{Queues: g.queues, WorkerID: w.ID(), Count: n})
	if err != nil || len(jobs) != n {
		t.Fatalf("fetched %d jobs: %v", len(jobs), err)
	}
	batch := make([]*pendingAck, n)
	for i, j := range jobs {
		batch[i] = &pendingAck{a: Ack{JobID: j.JobID, WorkerID: w.ID(), Attempt: j.Attempt}, g: g, want: 1, next: make(chan []*JobContext, 1)}
	}
	(&completer{w: w}).send(batch)
	if got := w.running(); got != n {
		t.Fatalf("%d jobs running before any slot took its next one, want all %d the batch fetched", got, n)
	}
	for i, p := range batch {
		if jcs := <-p.next; len(jcs) != 1 || jcs[0].Queue != "sdk.together" {
			t.Fatalf("slot %d got %+v", i, jcs)
		}
	}
}

// gatedProxy forwards to url, holding the ack requests numbered in hold
// (1 = the first ack request) until release is closed; held receives
// each request's number as it is held.
func gatedProxy(t *testing.T, url string, hold map[int]bool, held chan<- int, release <-chan struct{}) string {
	t.Helper()
	target, _ := neturl.Parse(url)
	rp := httputil.NewSingleHostReverseProxy(target)
	var acks atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/ack/") {
			if n := int(acks.Add(1)); hold[n] {
				held <- n
				<-release
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestWorkerHoldsTheNextJob: a slot whose handlers are quick holds its
// next job while it runs one, so it starts that job while its ack is
// still unanswered; every job runs once and is acked.
func TestWorkerHoldsTheNextJob(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	held, release := make(chan int, 1), make(chan struct{})
	c := New(gatedProxy(t, base, map[int]bool{2: true}, held, release))
	ctx := context.Background()
	ids := enqueueN(t, c, "sdk.hold", 4)
	started := make(chan string, 4)
	w := NewWorker(c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second})
	w.Register("sdk.hold", func(_ context.Context, j *JobContext) (any, error) {
		started <- j.JobID
		return nil, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	// Job 1 comes from the poller; its ack brings job 2 and one to hold;
	// job 2's ack (the second ack request) is held at the proxy.
	<-started
	<-started
	<-held
	select {
	case id := <-started:
		if id != ids[2] {
			t.Fatalf("started %s while the ack was held, want the third job %s", id, ids[2])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no job started while the slot's ack was unanswered: the slot held none")
	}
	close(release)
	for _, id := range ids {
		waitState(t, c, id, "completed")
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(started) != 1 {
		t.Fatalf("%d more handler runs after the third, want the fourth job's only", len(started))
	}
}

// whileSecondRuns enqueues three jobs on queue and runs a one-slot worker
// (opt) whose handler blocks on the second job; during runs while it does
// (ids: the jobs). With drain the worker is stopped before the second job
// ends; without, it runs until all three are completed. It answers the
// jobs and which of them a handler ran.
func whileSecondRuns(t *testing.T, c *Client, queue string, opt WorkerOptions, drain bool, during func(ids []string)) ([]string, *sync.Map) {
	t.Helper()
	ctx := context.Background()
	ids := enqueueN(t, c, queue, 3)
	second, release := make(chan struct{}), make(chan struct{})
	var ran sync.Map
	opt.Concurrency, opt.FetchTimeout = 1, time.Second
	w := NewWorker(c, opt)
	w.Register(queue, func(_ context.Context, j *JobContext) (any, error) {
		ran.Store(j.JobID, true)
		if j.JobID == ids[1] {
			close(second)
			<-release
		}
		return nil, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	<-second
	func() {
		defer close(release)
		if drain {
			defer stop() // runs first: the drain begins before the second job ends
		}
		during(ids)
	}()
	if !drain {
		for _, id := range ids {
			waitState(t, c, id, "completed")
		}
		stop()
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return ids, &ran
}

// TestWorkerHoldsOnlyAfterQuickHandlers: while a slot runs its second job
// the third is held (claimed, active) when the first handler took at most
// PrefetchUnder, and still pending on the server when it took longer or
// holding is off.
func TestWorkerHoldsOnlyAfterQuickHandlers(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	for _, tc := range []struct {
		name  string
		under time.Duration
		third string
	}{
		// 1s: held for up to 4s while the second runs, so the check
		// below never races the give-back (TestWorkerGivesBackHeldJobsBehindASlowHandler).
		{"holding", time.Second, "active"}, {"off", -1, "pending"}, {"slower", time.Nanosecond, "pending"}} {
		t.Run(tc.name, func(t *testing.T) {
			whileSecondRuns(t, c, "sdk.hold."+tc.name, WorkerOptions{PrefetchUnder: tc.under}, false, func(ids []string) {
				if j, err := c.Job(context.Background(), ids[2]); err != nil || j.State != tc.third {
					t.Errorf("third job while the second runs: %+v, %v; want %s", j, err, tc.third)
				}
			})
		})
	}
}

// TestWorkerGivesBackHeldJobsBehindASlowHandler: a job held behind a
// handler that runs past 4×PrefetchUnder goes back to the server while
// that handler runs (pending, its attempt not counted), for any worker to
// run; it is run once in the end all the same.
func TestWorkerGivesBackHeldJobsBehindASlowHandler(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx := context.Background()
	ids, ran := whileSecondRuns(t, c, "sdk.hold.slow", WorkerOptions{}, false, func(ids []string) {
		j := waitState(t, c, ids[2], "pending")
		if j.Attempt != 0 || len(j.Errors) != 0 {
			t.Errorf("held job given back: %+v; want attempt 0, no error", j)
		}
	})
	if _, ok := ran.Load(ids[2]); !ok {
		t.Fatal("the job given back never ran")
	}
	if j, err := c.Job(ctx, ids[2]); err != nil || j.Attempt != 1 {
		t.Fatalf("the job given back: %+v, %v; want it completed at its first attempt", j, err)
	}
}

// TestWorkerGivesBackAHeldJobWhenDraining: a job held when the worker
// starts to drain is not started: it goes back to the server at once.
func TestWorkerGivesBackAHeldJobWhenDraining(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx := context.Background()
	ids, ran := whileSecondRuns(t, c, "sdk.hold.drain", WorkerOptions{PrefetchUnder: time.Second}, true, func(ids []string) {
		if j, err := c.Job(ctx, ids[2]); err != nil || j.State != "active" {
			t.Errorf("third job while the second runs: %+v, %v; want it held (active)", j, err)
		}
	})
	if _, ok := ran.Load(ids[2]); ok {
		t.Fatal("the held job started after the drain began")
	}
	waitState(t, c, ids[1], "completed")
	// Given back unstarted: pending at once, its attempt not counted, no
	// error (an unclaim, not a fail).
	if j, err := c.Job(ctx, ids[2]); err != nil || j.State != "pending" || j.Attempt != 0 || len(j.Errors) != 0 {
		t.Fatalf("held job after the drain: %+v, %v; want it pending, attempt 0, no error", j, err)
	}
}

// TestWorkerGivesBackAHeldJobAtTheGracesEnd: when the drain's grace ends
// with a handler still running, that job is failed ("worker_shutdown")
// and the job its slot held behind it, never started, is given back
// (pending, its attempt not counted, no error), not failed.
func TestWorkerGivesBackAHeldJobAtTheGracesEnd(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx := context.Background()
	const queue = "sdk.hold.grace"
	ids := enqueueN(t, c, queue, 3)
	second := make(chan struct{})
	var ran sync.Map
	// PrefetchUnder 1s: the third job is held behind the second for up to
	// 4s, far past the grace.
	w := NewWorker(c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second, PrefetchUnder: time.Second, ShutdownGrace: 100 * time.Millisecond})
	w.Register(queue, func(jctx context.Context, j *JobContext) (any, error) {
		ran.Store(j.JobID, true)
		if j.JobID == ids[1] {
			close(second)
			<-jctx.Done() // runs until the grace ends
			return nil, jctx.Err()
		}
		return nil, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	<-second
	if j, err := c.Job(ctx, ids[2]); err != nil || j.State != "active" {
		t.Fatalf("third job while the second runs: %+v, %v; want it held (active)", j, err)
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, ok := ran.Load(ids[2]); ok {
		t.Fatal("the held job started during the drain")
	}
	j, err := c.Job(ctx, ids[1])
	if err != nil || j.Attempt != 1 || len(j.Errors) != 1 || j.Errors[0].Error != "worker_shutdown" {
		t.Fatalf("running job at the grace's end: %+v, %v; want attempt 1 failed with worker_shutdown", j, err)
	}
	if j, err := c.Job(ctx, ids[2]); err != nil || j.State != "pending" || j.Attempt != 0 || len(j.Errors) != 0 {
		t.Fatalf("held job at the grace's end: %+v, %v; want it pending, attempt 0, no error", j, err)
	}
}

// TestHandBackFailsWhereUnclaimIsMissing: a server without POST
// /unclaim/{id} (404) has a job the worker gives back failed with
// "worker_shutdown", as before the endpoint existed.
func TestHandBackFailsWhereUnclaimIsMissing(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var paths []string
	var failed map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/api/v1/fail/") {
			_ = json.NewDecoder(r.Body).Decode(&failed)
			_, _ = w.Write([]byte(`{"status":"retrying","attempts_remaining":2}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"no such endpoint","code":"not_found"}`))
	}))
	defer srv.Close()
	w := NewWorker(New(srv.URL, WithoutPlacement()), WorkerOptions{ID: "w1"})
	w.handBack(context.Background(), []FetchedJob{{JobID: "job_0_x", Attempt: 2}})
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(paths, " ") != "/api/v1/unclaim/job_0_x /api/v1/fail/job_0_x" {
		t.Fatalf("requests %v", paths)
	}
	if failed["error"] != "worker_shutdown" || failed["worker_id"] != "w1" || failed["attempt"] != float64(2) {
		t.Fatalf("fail body %v", failed)
	}
}
