package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Endpoint names counted by the fake server.
const (
	epEnqueue      = "enqueue"
	epEnqueueBatch = "enqueue_batch"
	epFetch        = "fetch"
	epFetchBatch   = "fetch_batch"
	epAck          = "ack"
	epAckBatch     = "ack_batch"
	epAckFetch     = "ack_fetch" // an ack that carried a fetch
)

// fakeServer is a minimal in-memory stand-in for the Corvo HTTP API.
type fakeServer struct {
	URL string

	// throttleEvery makes every n-th request answer 429 (0 disables).
	throttleEvery int64
	// failEnqueue makes every enqueue answer 500.
	failEnqueue bool
	// apiKey, when set, is the key every request must carry (else 401).
	apiKey string
	// onEnqueue, if set, is called with the total of enqueued jobs.
	onEnqueue func(total int64)
	// dupFirst queues the first enqueued job twice (two IDs, one payload):
	// a redelivery.
	dupFirst bool
	// enqueueDelay delays every enqueue answer (a slow server).
	enqueueDelay time.Duration
	// cpuMetrics makes GET /api/v1/metrics answer a
	// process_cpu_seconds_total that grows by cpuStep per request.
	cpuMetrics bool

	requests  atomic.Int64
	health    atomic.Int64 // GET /healthz answered
	refused   atomic.Int64 // answered 401
	throttled atomic.Int64
	enqueued  atomic.Int64
	counts    map[string]*atomic.Int64 // per endpoint; keys fixed at creation

	mu       sync.Mutex
	nextID   int
	queues   map[string][]*fakeJob
	leased   map[string]*fakeJob
	acked    map[string]int // job id -> number of successful acks
	perQueue map[string]int // jobs enqueued per queue
	payloads []int          // payload sizes seen
	notify   chan struct{}  // closed and replaced on every enqueue
	// fetchOrders holds, per worker_id, the queue list of each fetch.
	fetchOrders map[string][][]string
	cpuReads    int // GET /api/v1/metrics answered
}

// cpuStep is how much the fake's CPU seconds grow per metrics read.
const cpuStep = 0.25

type fakeJob struct {
	ID         string          `json:"job_id"`
	Queue      string          `json:"queue"`
	Payload    json.RawMessage `json:"payload"`
	Attempt    int             `json:"attempt"`
	MaxRetries int             `json:"max_retries"`
	Lease      int             `json:"lease_duration"`
	Checkpoint any             `json:"checkpoint"`
	Tags       map[string]any  `json:"tags"`
	EnqueuedAt string          `json:"enqueued_at"`
}

// newFakeServer starts a fake on a random local port; opts run before it
// starts serving.
func newFakeServer(t *testing.T, opts ...func(*fakeServer)) *fakeServer {
	t.Helper()
	f := &fakeServer{
		counts:   map[string]*atomic.Int64{},
		queues:   map[string][]*fakeJob{},
		leased:   map[string]*fakeJob{},
		acked:    map[string]int{},
		perQueue: map[string]int{},
		notify:   make(chan struct{}),

		fetchOrders: map[string][][]string{},
	}
	for _, ep := range []string{epEnqueue, epEnqueueBatch, epFetch, epFetchBatch, epAck, epAckBatch, epAckFetch} {
		f.counts[ep] = new(atomic.Int64)
	}
	for _, o := range opts {
		o(f)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &fasthttp.Server{Handler: f.handle}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Shutdown())
		require.NoError(t, <-served)
	})
	f.URL = "http://" + ln.Addr().String()
	return f
}

func (f *fakeServer) count(ep string) int64 { return f.counts[ep].Load() }

// seed puts a job not created by the benchmark into queue.
func (f *fakeServer) seed(queue, payload string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(queue, json.RawMessage(payload))
}

// ackCounts returns the number of distinct acked jobs and the highest ack
// count of any job.
func (f *fakeServer) ackCounts() (jobs, maxPerJob int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.acked {
		maxPerJob = max(maxPerJob, n)
	}
	return len(f.acked), maxPerJob
}

func (f *fakeServer) queueCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.perQueue))
	for q, n := range f.perQueue {
		out[q] = n
	}
	return out
}

func (f *fakeServer) payloadSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.payloads...)
}

// orders returns the queue lists of the fetches, per worker_id.
func (f *fakeServer) orders() map[string][][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][][]string, len(f.fetchOrders))
	for w, l := range f.fetchOrders {
		out[w] = append([][]string(nil), l...)
	}
	return out
}

func (f *fakeServer) handle(ctx *fasthttp.RequestCtx) {
	if f.cpuMetrics && ctx.IsGet() && string(ctx.Path()) == "/api/v1/metrics" {
		f.mu.Lock()
		f.cpuReads++
		cpu := 1 + cpuStep*float64(f.cpuReads)
		f.mu.Unlock()
		ctx.SetContentType("text/plain; version=0.0.4")
		fmt.Fprintf(ctx, "# HELP process_cpu_seconds_total x\n# TYPE process_cpu_seconds_total counter\n"+
			"process_cpu_seconds_total_other 99\nprocess_cpu_seconds_total %g\ngo_goroutines 7\n", cpu)
		return
	}
	if ctx.IsGet() && string(ctx.Path()) == "/healthz" {
		f.health.Add(1)
		fakeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ok"})
		return
	}
	if !ctx.IsPost() {
		fakeError(ctx, fasthttp.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "POST only")
		return
	}
	if f.apiKey != "" && string(ctx.Request.Header.Peek("Authorization")) != "Bearer "+f.apiKey {
		f.refused.Add(1)
		fakeError(ctx, fasthttp.StatusUnauthorized, "unauthorized", "this server needs an API key")
		return
	}
	if f.throttle(ctx) {
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/api/v1/enqueue":
		f.handleEnqueue(ctx)
	case path == "/api/v1/enqueue/batch":
		f.handleEnqueueBatch(ctx)
	case path == "/api/v1/fetch":
		f.handleFetch(ctx)
	case path == "/api/v1/ack/batch":
		f.handleAckBatch(ctx)
	case strings.HasPrefix(path, "/api/v1/ack/"):
		f.handleAck(ctx, strings.TrimPrefix(path, "/api/v1/ack/"))
	default:
		fakeError(ctx, fasthttp.StatusNotFound, "NOT_FOUND", "no route "+path)
	}
}

// throttle answers every throttleEvery-th request with 429, alternating
// fractional and integer Retry-After values.
func (f *fakeServer) throttle(ctx *fasthttp.RequestCtx) bool {
	if f.throttleEvery <= 0 || f.requests.Add(1)%f.throttleEvery != 0 {
		return false
	}
	retryAfter := "0.01"
	if f.throttled.Add(1)%2 == 0 {
		retryAfter = "0"
	}
	ctx.Response.Header.Set("Retry-After", retryAfter)
	fakeError(ctx, fasthttp.StatusTooManyRequests, "RATE_LIMITED", "slow down")
	return true
}

type fakeEnqueueReq struct {
	Queue   string          `json:"queue"`
	Payload json.RawMessage `json:"payload"`
}

func (f *fakeServer) handleEnqueue(ctx *fasthttp.RequestCtx) {
	f.counts[epEnqueue].Add(1)
	time.Sleep(f.enqueueDelay)
	var req fakeEnqueueReq
	if !decodeBody(ctx, &req) {
		return
	}
	ids, ok := f.enqueue(ctx, []fakeEnqueueReq{req})
	if ok {
		fakeJSON(ctx, fasthttp.StatusCreated, map[string]any{"job_id": ids[0], "status": "pending", "unique_existing": false})
	}
}

func (f *fakeServer) handleEnqueueBatch(ctx *fasthttp.RequestCtx) {
	f.counts[epEnqueueBatch].Add(1)
	var req struct {
		Jobs []fakeEnqueueReq `json:"jobs"`
	}
	if !decodeBody(ctx, &req) {
		return
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > 10000 {
		fakeError(ctx, fasthttp.StatusBadRequest, "INVALID_BATCH", "1..10000 jobs required")
		return
	}
	ids, ok := f.enqueue(ctx, req.Jobs)
	if ok {
		fakeJSON(ctx, fasthttp.StatusCreated, map[string]any{"job_ids": ids, "batch_id": nil})
	}
}

func (f *fakeServer) enqueue(ctx *fasthttp.RequestCtx, jobs []fakeEnqueueReq) ([]string, bool) {
	if f.failEnqueue {
		fakeError(ctx, fasthttp.StatusInternalServerError, "INTERNAL", "enqueue disabled")
		return nil, false
	}
	for _, j := range jobs {
		if j.Queue == "" || len(j.Payload) == 0 || !json.Valid(j.Payload) {
			fakeError(ctx, fasthttp.StatusBadRequest, "INVALID_JOB", "queue and payload are required")
			return nil, false
		}
	}
	ids := make([]string, 0, len(jobs))
	f.mu.Lock()
	for _, j := range jobs {
		if f.dupFirst && f.nextID == 0 {
			f.addLocked(j.Queue, j.Payload)
		}
		ids = append(ids, f.addLocked(j.Queue, j.Payload).ID)
		f.payloads = append(f.payloads, len(j.Payload))
		f.perQueue[j.Queue]++
	}
	close(f.notify)
	f.notify = make(chan struct{})
	f.mu.Unlock()
	total := f.enqueued.Add(int64(len(jobs)))
	if f.onEnqueue != nil {
		f.onEnqueue(total)
	}
	return ids, true
}

func (f *fakeServer) addLocked(queue string, payload json.RawMessage) *fakeJob {
	f.nextID++
	j := &fakeJob{
		ID: "job_" + strconv.Itoa(f.nextID), Queue: queue, Payload: payload,
		Attempt: 1, MaxRetries: 3, Lease: 60, Tags: map[string]any{},
		EnqueuedAt: time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	f.queues[queue] = append(f.queues[queue], j)
	return j
}

func (f *fakeServer) handleFetch(ctx *fasthttp.RequestCtx) {
	var req struct {
		Queues   []string `json:"queues"`
		WorkerID string   `json:"worker_id"`
		Timeout  int      `json:"timeout"`
		Count    *int     `json:"count"`
	}
	if !decodeBody(ctx, &req) {
		return
	}
	n := 1
	if req.Count != nil {
		f.counts[epFetchBatch].Add(1)
		n = *req.Count
	} else {
		f.counts[epFetch].Add(1)
	}
	if len(req.Queues) == 0 || req.WorkerID == "" || n < 1 {
		fakeError(ctx, fasthttp.StatusBadRequest, "INVALID_FETCH", "queues, worker_id and count >= 1 required")
		return
	}
	f.mu.Lock()
	f.fetchOrders[req.WorkerID] = append(f.fetchOrders[req.WorkerID], req.Queues)
	f.mu.Unlock()
	jobs := f.waitForJobs(req.Queues, n, time.Duration(req.Timeout)*time.Second)
	switch {
	case len(jobs) == 0:
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	case req.Count == nil:
		fakeJSON(ctx, fasthttp.StatusOK, jobs[0])
	default:
		fakeJSON(ctx, fasthttp.StatusOK, map[string]any{"jobs": jobs})
	}
}

// waitForJobs leases up to n jobs, long-polling up to timeout.
func (f *fakeServer) waitForJobs(queues []string, n int, timeout time.Duration) []*fakeJob {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		f.mu.Lock()
		jobs := f.takeLocked(queues, n)
		notify := f.notify
		f.mu.Unlock()
		if len(jobs) > 0 {
			return jobs
		}
		select {
		case <-notify:
		case <-timer.C:
			return nil
		}
	}
}

func (f *fakeServer) takeLocked(queues []string, n int) []*fakeJob {
	var out []*fakeJob
	for _, q := range queues {
		k := min(n-len(out), len(f.queues[q]))
		for _, j := range f.queues[q][:k] {
			f.leased[j.ID] = j
			out = append(out, j)
		}
		f.queues[q] = f.queues[q][k:]
	}
	return out
}

func (f *fakeServer) handleAck(ctx *fasthttp.RequestCtx, id string) {
	f.counts[epAck].Add(1)
	var body struct {
		WorkerID string `json:"worker_id"`
		Fetch    *struct {
			Queues  []string `json:"queues"`
			Count   int      `json:"count"`
			Timeout int      `json:"timeout"`
		} `json:"fetch"`
	}
	if !decodeBody(ctx, &body) {
		return
	}
	if !f.ackJob(id) {
		fakeError(ctx, fasthttp.StatusNotFound, "NOT_FOUND", "job "+id+" is not leased")
		return
	}
	if body.Fetch == nil {
		fakeJSON(ctx, fasthttp.StatusOK, map[string]any{"status": "ok"})
		return
	}
	f.counts[epAckFetch].Add(1)
	if body.WorkerID == "" || body.Fetch.Count != 1 || body.Fetch.Timeout != 0 {
		fakeError(ctx, fasthttp.StatusBadRequest, "INVALID_FETCH", "the bench's ack fetch names its worker, count 1, timeout 0")
		return
	}
	f.mu.Lock()
	jobs := f.takeLocked(body.Fetch.Queues, 1)
	f.mu.Unlock()
	fakeJSON(ctx, fasthttp.StatusOK, map[string]any{"status": "completed", "jobs": append([]*fakeJob{}, jobs...)})
}

func (f *fakeServer) handleAckBatch(ctx *fasthttp.RequestCtx) {
	f.counts[epAckBatch].Add(1)
	var req struct {
		Acks []struct {
			JobID string `json:"job_id"`
		} `json:"acks"`
	}
	if !decodeBody(ctx, &req) {
		return
	}
	acked, errs := 0, []map[string]string{}
	for _, a := range req.Acks {
		if f.ackJob(a.JobID) {
			acked++
			continue
		}
		errs = append(errs, map[string]string{"job_id": a.JobID, "code": "NOT_FOUND", "error": "not leased"})
	}
	fakeJSON(ctx, fasthttp.StatusOK, map[string]any{"acked": acked, "errors": errs})
}

func (f *fakeServer) ackJob(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.leased[id]; !ok {
		return false
	}
	delete(f.leased, id)
	f.acked[id]++
	return true
}

func decodeBody(ctx *fasthttp.RequestCtx, v any) bool {
	if err := json.Unmarshal(ctx.PostBody(), v); err != nil {
		fakeError(ctx, fasthttp.StatusBadRequest, "INVALID_JSON", err.Error())
		return false
	}
	return true
}

func fakeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fake server: marshal: %v", err))
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func fakeError(ctx *fasthttp.RequestCtx, status int, code, msg string) {
	fakeJSON(ctx, status, map[string]string{"error": msg, "code": code})
}
