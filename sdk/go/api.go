package corvo

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Enqueue adds a job. Concurrent calls are coalesced (like ioredis'
// auto-pipelining): when no enqueue of this client is in flight the job
// goes out at once, alone; calls made while one is in flight are gathered
// and sent together as the next POST /api/v1/enqueue/batch. Each call
// still gets its own answer or its own error, as if it had gone alone:
// a job the batch could not settle (a validation error, a shard that
// did not commit it, a failed request) is sent again alone, with the
// usual retries. Jobs with scheduled_at, depends_on or a unique_key always
// go alone (a batch answer does not carry their status).
// WithoutEnqueueCoalescing turns this off.
func (c *Client) Enqueue(ctx context.Context, r EnqueueRequest) (*Enqueued, error) {
	if c.noCoalesce || !coalescable(&r) {
		var out Enqueued
		_, err := c.doAt(ctx, c.routeQueue(r.Queue), http.MethodPost, "/api/v1/enqueue", r, &out)
		return &out, err
	}
	return c.enq.enqueue(ctx, c, r)
}

// EnqueueBatch adds up to 10,000 jobs, optionally as a batch with a
// callback, in one request, sent to the node hosting most of their queues.
func (c *Client) EnqueueBatch(ctx context.Context, jobs []EnqueueRequest, batch *Batch) (*BatchEnqueued, error) {
	var out BatchEnqueued
	queues := make([]string, len(jobs))
	for i := range jobs {
		queues[i] = jobs[i].Queue
	}
	_, err := c.doAt(ctx, c.routeMost(queues, false), http.MethodPost, "/api/v1/enqueue/batch", EnqueueBatchRequest{Jobs: jobs, Batch: batch}, &out)
	return &out, err
}

// FetchRequest asks for jobs.
type FetchRequest struct {
	Queues   []string
	WorkerID string
	Hostname string
	Timeout  float64 // long-poll seconds
	Count    int     // >1: up to Count jobs
}

// Fetch long-polls for jobs; an empty slice means none arrived in time.
// It goes to the node leading most of the queues' shards (a node hosting
// them all answers the fetch itself; one that does not waits on the
// others' too).
func (c *Client) Fetch(ctx context.Context, r FetchRequest) ([]FetchedJob, error) {
	body := FetchBody{Queues: r.Queues, WorkerID: r.WorkerID, Hostname: r.Hostname, Timeout: r.Timeout}
	route := c.routeMost(r.Queues, false)
	if r.Count > 1 {
		body.Count = r.Count
		var out FetchedJobs
		status, err := c.doAt(ctx, route, http.MethodPost, "/api/v1/fetch", body, &out)
		if err != nil || status == http.StatusNoContent {
			return nil, err
		}
		return out.Jobs, nil
	}
	var j FetchedJob
	status, err := c.doAt(ctx, route, http.MethodPost, "/api/v1/fetch", body, &j)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return []FetchedJob{j}, nil
}

// Ack completes a job with its result. workerID and attempt (when set) make
// the server check the caller still holds the job.
type Ack struct {
	JobID      string `json:"job_id,omitempty"`
	Result     any    `json:"result,omitempty"`
	StepStatus string `json:"step_status,omitempty"` // chains: continue or exit
	WorkerID   string `json:"worker_id,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	Usage      *Usage `json:"usage,omitempty"` // beyond the attempt's heartbeats
}

// Ack completes a job.
func (c *Client) Ack(ctx context.Context, a Ack) error {
	id := a.JobID
	a.JobID = ""
	_, err := c.doAt(ctx, c.routeJob(id), http.MethodPost, "/api/v1/ack/"+url.PathEscape(id), a, nil)
	return err
}

// AckAndFetch completes a job and fetches the worker's next jobs in one
// request (and, when the fetch's queues live on the job's shard, one Raft
// entry): a worker's steady state is one request per job. A refused ack
// (an *Error) claims nothing.
func (c *Client) AckAndFetch(ctx context.Context, a Ack, f FetchBody) (*AckFetched, error) {
	id := a.JobID
	a.JobID = ""
	var out AckFetched
	if _, err := c.doAt(ctx, c.routeJob(id), http.MethodPost, "/api/v1/ack/"+url.PathEscape(id), AckFetchRequest{Ack: a, Fetch: &f}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AckBatch completes many jobs in one request; the answer lists the ones
// that failed.
func (c *Client) AckBatch(ctx context.Context, acks []Ack) (acked int, failed map[string]*Error, err error) {
	var out AckBatchResult
	_, err = c.doAt(ctx, c.routeAcks(acks), http.MethodPost, "/api/v1/ack/batch", AckBatchRequest{Acks: acks}, &out)
	failed = map[string]*Error{}
	for _, e := range out.Errors {
		failed[e.JobID] = &Error{Code: e.Code, Message: e.Error}
	}
	return out.Acked, failed, err
}

// AckBatchAndFetch completes many jobs and fetches the worker's next jobs
// in one request: the fetch runs after the acks, only if at least one
// applied, for up to f.Count jobs (when every job and the fetch's queues
// live on one shard, in one Raft entry). The answer lists the acks that
// failed (Errors) and the jobs claimed; err is set only when the request
// failed as a whole (nothing acked).
func (c *Client) AckBatchAndFetch(ctx context.Context, acks []Ack, f FetchBody) (*AckBatchResult, error) {
	return c.ackBatch(ctx, acks, &f)
}

func (c *Client) ackBatch(ctx context.Context, acks []Ack, f *FetchBody) (*AckBatchResult, error) {
	var out AckBatchResult
	if _, err := c.doAt(ctx, c.routeAcks(acks), http.MethodPost, "/api/v1/ack/batch", AckBatchRequest{Acks: acks, Fetch: f}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Failure reports a failed attempt.
type Failure struct {
	Error      string `json:"error"`
	Backtrace  string `json:"backtrace,omitempty"`
	Checkpoint any    `json:"checkpoint,omitempty"`
	WorkerID   string `json:"worker_id,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	Usage      *Usage `json:"usage,omitempty"` // beyond the attempt's heartbeats
	// ProviderError: the model's provider failed (an outage, a 5xx, a
	// rate limit), not the job; a job with routing moves to its next
	// model at once, without using a retry.
	ProviderError bool `json:"provider_error,omitempty"`
}

// Fail reports a failed attempt; the server decides what follows.
func (c *Client) Fail(ctx context.Context, jobID string, f Failure) (*FailResult, error) {
	var out FailResult
	_, err := c.doAt(ctx, c.routeJob(jobID), http.MethodPost, "/api/v1/fail/"+url.PathEscape(jobID), f, &out)
	return &out, err
}

// Unclaim gives back a job the worker claimed and will not run (one it
// held when it began to drain): pending again at once, the attempt not
// counted, no error recorded (POST /api/v1/unclaim/{id}). workerID and
// attempt name the lease (FetchedJob.Attempt). The answer's Status is
// "pending", or "cancelled" when a cancel came while the job was claimed.
// A job that ran and failed is a Fail, not this.
func (c *Client) Unclaim(ctx context.Context, jobID, workerID string, attempt int) (*UnclaimResult, error) {
	var out UnclaimResult
	body := struct {
		WorkerID string `json:"worker_id"`
		Attempt  int    `json:"attempt"`
	}{workerID, attempt}
	_, err := c.doAt(ctx, c.routeJob(jobID), http.MethodPost, "/api/v1/unclaim/"+url.PathEscape(jobID), body, &out)
	return &out, err
}

// Heartbeat extends the leases of the jobs a worker holds; the answer maps
// each job to "ok", "cancel", "lost" or "not_found".
func (c *Client) Heartbeat(ctx context.Context, workerID string, jobs map[string]HeartbeatJob) (map[string]string, error) {
	ans, err := c.heartbeat(ctx, workerID, jobs)
	if err != nil {
		return nil, err
	}
	st := make(map[string]string, len(ans))
	for id, a := range ans {
		st[id] = a.Status
	}
	return st, nil
}

// heartbeat is Heartbeat with each job's whole answer (its status and
// whether it is past a per-job budget).
func (c *Client) heartbeat(ctx context.Context, workerID string, jobs map[string]HeartbeatJob) (map[string]StatusAnswer, error) {
	var out HeartbeatResult
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	_, err := c.doAt(ctx, c.routeMost(ids, true), http.MethodPost, "/api/v1/heartbeat", HeartbeatRequest{WorkerID: workerID, Jobs: jobs}, &out)
	if err != nil && !IsConflict(err) {
		return nil, err
	}
	if ae := (*Error)(nil); errors.As(err, &ae) && len(out.Jobs) == 0 {
		// No job was ok or cancelled: the 409 carries the statuses.
		_ = json.Unmarshal(ae.body, &out)
	}
	if len(out.Jobs) == 0 && err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// Job reads a job.
func (c *Client) Job(ctx context.Context, id string) (*Job, error) {
	var out Job
	_, err := c.doAt(ctx, c.routeJob(id), http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// Cancel cancels a job: "cancelled", or "cancelling" for an active one.
func (c *Client) Cancel(ctx context.Context, id string) (string, error) {
	return c.jobStatus(ctx, id, "/cancel")
}

// Retry sends a finished job back to pending.
func (c *Client) Retry(ctx context.Context, id string) error {
	_, err := c.jobStatus(ctx, id, "/retry")
	return err
}

// Move re-files a job under another queue and returns its ID (new when the
// queue lives on another shard).
func (c *Client) Move(ctx context.Context, id, queue string, resetAttempt bool) (string, error) {
	var out Moved
	_, err := c.doAt(ctx, c.routeJob(id), http.MethodPost, "/api/v1/jobs/"+url.PathEscape(id)+"/move", MoveRequest{Queue: queue, ResetAttempt: resetAttempt}, &out)
	return out.JobID, err
}

// Delete deletes a job.
func (c *Client) Delete(ctx context.Context, id string) error {
	_, err := c.doAt(ctx, c.routeJob(id), http.MethodDelete, "/api/v1/jobs/"+url.PathEscape(id), nil, nil)
	return err
}

// Approve releases a held job; Reject makes it dead.
func (c *Client) Approve(ctx context.Context, id string) error {
	_, err := c.jobStatus(ctx, id, "/approve")
	return err
}

// Reject makes a held job dead.
func (c *Client) Reject(ctx context.Context, id string) error {
	_, err := c.jobStatus(ctx, id, "/reject")
	return err
}

// jobStatus posts a job action (action: "/cancel", …), routed by the
// job's shard.
func (c *Client) jobStatus(ctx context.Context, id, action string) (string, error) {
	var out StatusAnswer
	_, err := c.doAt(ctx, c.routeJob(id), http.MethodPost, "/api/v1/jobs/"+url.PathEscape(id)+action, nil, &out)
	return out.Status, err
}

// routeAcks is the route of an ack batch: the node hosting most of its
// jobs.
func (c *Client) routeAcks(acks []Ack) []string {
	ids := make([]string, len(acks))
	for i := range acks {
		ids[i] = acks[i].JobID
	}
	return c.routeMost(ids, true)
}

// Queues lists every queue with its counts.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	var out QueueList
	_, err := c.do(ctx, http.MethodGet, "/api/v1/queues", nil, &out)
	return out.Queues, err
}

// QueueHistoryParams asks GET /api/v1/queues/history for the queues named
// (none: every queue) over the last Since (default one hour) in points of
// Step (a multiple of 10 s; default 10 s).
type QueueHistoryParams struct {
	Queues []string
	Since  time.Duration
	Step   time.Duration
}

// QueueHistory reads the server's history of the queues' rates and counts.
func (c *Client) QueueHistory(ctx context.Context, p QueueHistoryParams) (*QueueHistory, error) {
	q := url.Values{}
	for _, name := range p.Queues {
		q.Add("queue", name)
	}
	if p.Since > 0 {
		q.Set("since", p.Since.String())
	}
	if p.Step > 0 {
		q.Set("step", p.Step.String())
	}
	path := "/api/v1/queues/history"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out QueueHistory
	if _, err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// QueueAction runs pause, resume, clear or drain on a queue.
func (c *Client) QueueAction(ctx context.Context, queue, action string) (map[string]any, error) {
	var out map[string]any
	_, err := c.doAt(ctx, c.routeQueue(queue), http.MethodPost, "/api/v1/queues/"+url.PathEscape(queue)+"/"+action, nil, &out)
	return out, err
}

// SetConcurrency caps a queue's active jobs (0: no cap).
func (c *Client) SetConcurrency(ctx context.Context, queue string, max int) error {
	_, err := c.doAt(ctx, c.routeQueue(queue), http.MethodPost, "/api/v1/queues/"+url.PathEscape(queue)+"/concurrency", ConcurrencyRequest{Max: max}, nil)
	return err
}

// SetThrottle limits a queue to rate fetches per period (nil: remove).
func (c *Client) SetThrottle(ctx context.Context, queue string, t *Throttle) error {
	path := "/api/v1/queues/" + url.PathEscape(queue) + "/throttle"
	route := c.routeQueue(queue)
	if t == nil {
		_, err := c.doAt(ctx, route, http.MethodDelete, path, nil, nil)
		return err
	}
	_, err := c.doAt(ctx, route, http.MethodPost, path, t, nil)
	return err
}

// DeleteQueue deletes a queue and all its jobs.
func (c *Client) DeleteQueue(ctx context.Context, queue string) (int, error) {
	var out QueueDeleted
	_, err := c.doAt(ctx, c.routeQueue(queue), http.MethodDelete, "/api/v1/queues/"+url.PathEscape(queue)+"?confirm=true", nil, &out)
	return int(out.JobsDeleted), err
}

// Dead lists dead jobs, newest first; pass the returned cursor for more.
func (c *Client) Dead(ctx context.Context, queue string, limit int, cursor string) ([]Job, string, error) {
	q := url.Values{}
	if queue != "" {
		q.Set("queue", queue)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out DeadPage
	_, err := c.do(ctx, http.MethodGet, "/api/v1/dead?"+q.Encode(), nil, &out)
	next := ""
	if out.Cursor != nil {
		next = *out.Cursor
	}
	return out.Jobs, next, err
}

// Workers lists the workers the server has heard from.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	var out WorkerList
	_, err := c.do(ctx, http.MethodGet, "/api/v1/workers", nil, &out)
	return out.Workers, err
}

// Schedules lists cron schedules.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var out ScheduleList
	_, err := c.do(ctx, http.MethodGet, "/api/v1/schedules", nil, &out)
	return out.Schedules, err
}

// PutSchedule creates a schedule (ID empty) or replaces one.
func (c *Client) PutSchedule(ctx context.Context, s Schedule) (*Schedule, error) {
	id := s.ID
	s.ID, s.NextRun, s.LastRun, s.CreatedAt, s.LastJobID, s.Paused = "", nil, nil, nil, nil, false
	method, path := http.MethodPost, "/api/v1/schedules"
	if id != "" {
		method, path = http.MethodPut, path+"/"+url.PathEscape(id)
	}
	var out Schedule
	_, err := c.do(ctx, method, path, s, &out)
	return &out, err
}

// DeleteSchedule deletes a schedule.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/api/v1/schedules/"+url.PathEscape(id), nil, nil)
	return err
}

// BatchStatus reads a batch's counts.
func (c *Client) BatchStatus(ctx context.Context, id string) (*BatchStatus, error) {
	var out BatchStatus
	_, err := c.do(ctx, http.MethodGet, "/api/v1/batches/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// ClusterStatus is GET /api/v1/cluster/status: the nodes, the leader and
// replicas of every shard, replication and mirror lag.
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	var out ClusterStatus
	_, err := c.do(ctx, "GET", "/api/v1/cluster/status", nil, &out)
	return &out, err
}

// RemoveNode takes a node out of every shard of the cluster. It needs the
// cluster secret (WithClusterSecret): node removal is a node-to-node
// route. On a cluster with mutual TLS between nodes it also needs a node
// certificate: give the client WithTLSConfig(PeerTLSConfig(…)).
func (c *Client) RemoveNode(ctx context.Context, nodeID uint64) error {
	_, err := c.do(ctx, "DELETE", "/api/v1/cluster/nodes/"+strconv.FormatUint(nodeID, 10), nil, nil)
	return err
}
