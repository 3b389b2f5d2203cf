package corvo

import (
	"encoding/json"
	"fmt"
	"time"
)

// The bodies of the server's answers (and of the requests the SDK's
// methods build), one Go type each: the server's tests decode what it
// writes into these types with unknown fields disallowed, so a field the
// server adds shows up here too.

// ErrorBody is every error answer: {"error", "code"} (Code* constants).
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// EnqueueBatchRequest is POST /api/v1/enqueue/batch.
type EnqueueBatchRequest struct {
	Jobs  []EnqueueRequest `json:"jobs"`
	Batch *Batch           `json:"batch,omitempty"`
}

// FetchBody is the JSON body of POST /api/v1/fetch (FetchRequest is the
// method's argument).
type FetchBody struct {
	Queues   []string `json:"queues"`
	WorkerID string   `json:"worker_id,omitempty"`
	Hostname string   `json:"hostname,omitempty"`
	Timeout  float64  `json:"timeout"`
	Count    int      `json:"count,omitempty"`
}

// AckFetchRequest is POST /api/v1/ack/{id} with the worker's next fetch:
// the ack's fields and "fetch".
type AckFetchRequest struct {
	Ack
	Fetch *FetchBody `json:"fetch"`
}

// AckFetched is the answer of an ack that carried a fetch: the jobs it
// claimed (none: the queues had none within the fetch's timeout), and
// FetchError when the ack went through but the fetch failed.
type AckFetched struct {
	Status     string       `json:"status"`
	Jobs       []FetchedJob `json:"jobs"`
	FetchError string       `json:"fetch_error,omitempty"`
}

// StatusAnswer is the answer of ack, cancel, retry, approve, reject and
// rebuild-mirror: the job's (or operation's) status after the call.
type StatusAnswer struct {
	Status string `json:"status"`
	// BudgetExceeded (heartbeat): the job's cost is past a per-job budget.
	BudgetExceeded bool `json:"budget_exceeded,omitempty"`
}

// AckBatchRequest is POST /api/v1/ack/batch. Fetch, when set, is the
// worker's next fetch (its worker_id defaults to the first ack's): it runs
// after the acks, only if at least one applied.
type AckBatchRequest struct {
	Acks  []Ack      `json:"acks"`
	Fetch *FetchBody `json:"fetch,omitempty"`
}

// JobFailure names one job a many-job call could not apply.
type JobFailure struct {
	JobID string `json:"job_id"`
	Code  string `json:"code"`
	Error string `json:"error"`
}

// AckBatchResult is the answer to POST /api/v1/ack/batch. Jobs (and
// FetchError when the acks went through but the fetch failed) answer a
// request that carried a fetch.
type AckBatchResult struct {
	Acked      int          `json:"acked"`
	Errors     []JobFailure `json:"errors"`
	Jobs       []FetchedJob `json:"jobs,omitempty"`
	FetchError string       `json:"fetch_error,omitempty"`
}

// HeartbeatRequest is POST /api/v1/heartbeat.
type HeartbeatRequest struct {
	WorkerID string                  `json:"worker_id"`
	Jobs     map[string]HeartbeatJob `json:"jobs"`
}

// HeartbeatResult maps each job to its status: ok, cancel, lost or
// not_found.
type HeartbeatResult struct {
	Jobs map[string]StatusAnswer `json:"jobs"`
}

// MoveRequest is POST /api/v1/jobs/{id}/move.
type MoveRequest struct {
	Queue        string `json:"queue"`
	ResetAttempt bool   `json:"reset_attempt,omitempty"`
	// Priority, when set, is the job's priority in its new queue (else it
	// keeps its own).
	Priority string `json:"priority,omitempty"`
}

// Moved is the answer to a move: the job's id (new when the queue lives
// on another shard; MovedFrom is then the old one).
type Moved struct {
	JobID     string `json:"job_id"`
	MovedFrom string `json:"moved_from,omitempty"`
	Queue     string `json:"queue"`
	Status    string `json:"status"`
}

// Deleted is the answer to deleting a job or a schedule.
type Deleted struct {
	Deleted bool `json:"deleted"`
}

// QueueList is GET /api/v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// QueuePaused is the answer to pause and resume.
type QueuePaused struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
}

// ConcurrencyRequest is POST /api/v1/queues/{name}/concurrency (0: no cap).
type ConcurrencyRequest struct {
	Max int `json:"max"`
}

// QueueConcurrency is the answer to a concurrency change.
type QueueConcurrency struct {
	Queue          string `json:"queue"`
	MaxConcurrency *int   `json:"max_concurrency"`
}

// QueueThrottled is the answer to a throttle change (Throttle nil:
// removed).
type QueueThrottled struct {
	Queue    string    `json:"queue"`
	Throttle *Throttle `json:"throttle"`
}

// QueueCleared is the answer to a clear.
type QueueCleared struct {
	Queue   string `json:"queue"`
	Cleared int64  `json:"cleared"`
}

// QueueDraining is the answer to a drain.
type QueueDraining struct {
	Queue    string `json:"queue"`
	Paused   bool   `json:"paused"`
	Draining bool   `json:"draining"`
	Active   int64  `json:"active"`
}

// QueueDeleted is the answer to deleting a queue.
type QueueDeleted struct {
	Queue       string `json:"queue"`
	Deleted     bool   `json:"deleted"`
	JobsDeleted int64  `json:"jobs_deleted"`
}

// WorkerList is GET /api/v1/workers.
type WorkerList struct {
	Workers []WorkerInfo `json:"workers"`
}

// DeadPage is GET /api/v1/dead.
type DeadPage struct {
	Jobs    []Job   `json:"jobs"`
	HasMore bool    `json:"has_more"`
	Cursor  *string `json:"cursor"`
}

// SearchPage is the answer to POST /api/v1/jobs/search.
type SearchPage struct {
	Jobs       []SearchHit `json:"jobs"`
	Total      int64       `json:"total"`
	Cursor     *string     `json:"cursor"`
	HasMore    bool        `json:"has_more"`
	DurationMs float64     `json:"duration_ms"`
	// Partial: the server's read deadline cut the search short. Jobs are
	// the matches it found by then, in order (maybe fewer than the
	// limit), HasMore is true, Cursor continues after them and Total is a
	// lower bound.
	Partial bool `json:"partial,omitempty"`
}

// ScheduleList is GET /api/v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

// BatchStatus is GET /api/v1/batches/{id}.
type BatchStatus struct {
	ID              string          `json:"id"`
	Total           int             `json:"total"`
	Pending         int             `json:"pending"`
	Succeeded       int             `json:"succeeded"`
	Failed          int             `json:"failed"`
	CallbackQueue   *string         `json:"callback_queue"`
	CallbackPayload json.RawMessage `json:"callback_payload"`
	CallbackJobID   *string         `json:"callback_job_id"`
	CreatedAt       time.Time       `json:"created_at"`
	CompletedAt     *time.Time      `json:"completed_at"`
}

// BulkOperationList is GET /api/v1/bulk.
type BulkOperationList struct {
	Operations []BulkOperation `json:"operations"`
}

// Health is GET /healthz.
type Health struct {
	Status    string `json:"status"`
	Shards    int    `json:"shards"`
	ShardsLed int    `json:"shards_led"`
	// Leaders is, by data shard, the node this node's replica hears as
	// the shard's leader (0: none known, or the shard not hosted here);
	// Applied, the replica's applied Raft index (0: not hosted). The
	// nodes read them from each other to decide where a leadership may
	// move.
	Leaders []uint64 `json:"leaders,omitempty"`
	Applied []uint64 `json:"applied,omitempty"`
	// Auth: "keys" (every API call needs a key), "open" (loopback only:
	// calls without a key act as an admin) or "off" (--auth=off).
	Auth string `json:"auth"`
}

// JoinRequest is POST /api/v1/cluster/join: a new node asks a member to
// add it.
type JoinRequest struct {
	Name        string `json:"name"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
}

// JoinAnswer is the answer to a join.
type JoinAnswer struct {
	NodeID   uint64 `json:"node_id"`
	Shards   int    `json:"shards"`
	Replicas int    `json:"replicas"`
	// Learner: the node was added as a non-voting replica and promotes
	// itself once caught up.
	Learner bool `json:"learner"`
}

// NodeRemoved is the answer to DELETE /api/v1/cluster/nodes/{id}.
type NodeRemoved struct {
	Removed uint64 `json:"removed"`
}

// RemovedNotice is POST /api/v1/cluster/removed: a member tells a node it
// was removed.
type RemovedNotice struct {
	NodeID uint64 `json:"node_id"`
}

// ResetEvent is the data of an event stream's "reset" event: the stream
// lost events (Reason says why) and the client should re-read state.
type ResetEvent struct {
	Reason string `json:"reason"`
}

// SearchHit is a job as search finds it: the search mirror's summary of
// it (GET /api/v1/jobs/{id} has the full document).
type SearchHit struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	State    string          `json:"state"`
	Priority string          `json:"priority"`
	Payload  json.RawMessage `json:"payload"`
	// PayloadOmitted: the payload is over the 8 KiB a search page
	// carries (Payload is null); GET /api/v1/jobs/{id} has it.
	PayloadOmitted bool              `json:"payload_omitted,omitempty"`
	PayloadBytes   int               `json:"payload_bytes"` // the payload's size
	Attempt        int               `json:"attempt"`
	MaxRetries     int               `json:"max_retries"`
	CreatedAt      time.Time         `json:"created_at"`
	ScheduledAt    *time.Time        `json:"scheduled_at"`
	StartedAt      *time.Time        `json:"started_at"`
	CompletedAt    *time.Time        `json:"completed_at"`
	LastError      *string           `json:"last_error"`
	ErrorCount     int               `json:"error_count"`
	Reason         *string           `json:"reason"`
	Tags           map[string]string `json:"tags"`
	BatchID        *string           `json:"batch_id"`
	UniqueKey      *string           `json:"unique_key"`
	WorkerID       *string           `json:"worker_id"`
	Progress       json.RawMessage   `json:"progress"`
}

// SearchRequest is POST /api/v1/jobs/search, and the filter of a bulk
// operation. Empty fields do not filter.
type SearchRequest struct {
	Queue           string            `json:"queue,omitempty"`
	State           []string          `json:"state,omitempty"`
	Priority        *Priority         `json:"priority,omitempty"`
	Tags            map[string]string `json:"tags,omitempty"`
	PayloadContains string            `json:"payload_contains,omitempty"`
	PayloadJQ       string            `json:"payload_jq,omitempty"`
	CreatedAfter    string            `json:"created_after,omitempty"`
	CreatedBefore   string            `json:"created_before,omitempty"`
	ScheduledAfter  string            `json:"scheduled_after,omitempty"`
	ScheduledBefore string            `json:"scheduled_before,omitempty"`
	StartedAfter    string            `json:"started_after,omitempty"`
	StartedBefore   string            `json:"started_before,omitempty"`
	CompletedAfter  string            `json:"completed_after,omitempty"`
	CompletedBefore string            `json:"completed_before,omitempty"`
	ExpireAfter     string            `json:"expire_after,omitempty"`
	ExpireBefore    string            `json:"expire_before,omitempty"`
	WorkerID        string            `json:"worker_id,omitempty"`
	HasErrors       *bool             `json:"has_errors,omitempty"`
	ErrorContains   string            `json:"error_contains,omitempty"`
	BatchID         string            `json:"batch_id,omitempty"`
	DependsOn       string            `json:"depends_on,omitempty"`   // jobs enqueued with this job in their depends_on
	Model           string            `json:"model,omitempty"`        // jobs with a usage report of this model
	MinCostUSD      *float64          `json:"min_cost_usd,omitempty"` // jobs whose usage cost at least this much
	UniqueKey       string            `json:"unique_key,omitempty"`
	RouteTarget     string            `json:"route_target,omitempty"` // routed jobs whose current model is this one
	AttemptMin      *int              `json:"attempt_min,omitempty"`
	AttemptMax      *int              `json:"attempt_max,omitempty"`
	JobIDPrefix     string            `json:"job_id_prefix,omitempty"`
	Sort            string            `json:"sort,omitempty"`  // created_at, scheduled_at, started_at, completed_at, priority, attempt
	Order           string            `json:"order,omitempty"` // asc or desc
	Cursor          *string           `json:"cursor,omitempty"`
	Limit           int               `json:"limit,omitempty"`
}

// Priority is a priority tier as a filter names it: "critical", "high" or
// "normal". It also reads the earlier Corvo's numeric tiers (0 critical,
// 1 high, 2 normal) and always writes the name.
type Priority string

// Priority tiers.
const (
	PriorityCritical Priority = "critical"
	PriorityHigh     Priority = "high"
	PriorityNormal   Priority = "normal"
)

// UnmarshalJSON reads a tier name or number. A name is kept as sent (the
// server says whether it knows it); a number other than 0, 1 or 2 is an
// error.
func (p *Priority) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "0":
		*p = PriorityCritical
	case "1":
		*p = PriorityHigh
	case "2":
		*p = PriorityNormal
	default:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("unknown priority %s (use critical, high or normal, or 0, 1 or 2)", b)
		}
		*p = Priority(s)
	}
	return nil
}
