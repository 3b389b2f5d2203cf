package corvo

import (
	"encoding/json"
	"time"
)

// Job options for Enqueue (spec: POST /api/v1/enqueue). Zero values are
// left out, so the server's defaults apply.
type EnqueueRequest struct {
	Queue          string            `json:"queue"`
	Payload        any               `json:"payload,omitempty"`
	Priority       string            `json:"priority,omitempty"` // critical, high, normal
	MaxRetries     *int              `json:"max_retries,omitempty"`
	RetryBackoff   string            `json:"retry_backoff,omitempty"` // none, fixed, linear, exponential
	RetryBaseDelay string            `json:"retry_base_delay,omitempty"`
	RetryMaxDelay  string            `json:"retry_max_delay,omitempty"`
	LeaseDuration  int               `json:"lease_duration,omitempty"` // seconds
	ScheduledAt    *time.Time        `json:"scheduled_at,omitempty"`
	ExpireAfter    string            `json:"expire_after,omitempty"`
	Tags           map[string]string `json:"tags,omitempty"`
	UniqueKey      string            `json:"unique_key,omitempty"`
	UniquePeriod   int               `json:"unique_period,omitempty"` // seconds
	DependsOn      []string          `json:"depends_on,omitempty"`
	Chain          *Chain            `json:"chain,omitempty"`
	// ResultSchema is a JSON Schema (2020-12) the job's result must
	// satisfy: an ack with a result that does not is answered 422
	// result_schema_invalid and the job stays active.
	ResultSchema any `json:"result_schema,omitempty"`
	// Cache makes a completed job's result answer later enqueues of the
	// same payload (or payload members) in the queue within the TTL.
	Cache *CacheOptions `json:"cache,omitempty"`
	// Routing names the models a worker may call for the job; fetches
	// carry the one to call now (FetchedJob.Routing), and a failure with
	// ProviderError moves the job to the next.
	Routing *Routing `json:"routing,omitempty"`
}

// Routing is an enqueue's "routing".
type Routing struct {
	Prefer   string   `json:"prefer"`
	Fallback []string `json:"fallback,omitempty"`
	// Strategy: fallback_on_error (default), round_robin or lowest_cost.
	Strategy string `json:"strategy,omitempty"`
	// Prices: with lowest_cost, every model's price (USD, any unit as
	// long as it is the same for all: only the order matters).
	Prices map[string]float64 `json:"prices,omitempty"`
}

// RouteTarget is the model a fetched job's worker should call now, and
// its place in the job's try order.
type RouteTarget struct {
	Target string `json:"target"`
	Index  int    `json:"index"`
}

// JobRouting is a job document's "routing".
type JobRouting struct {
	Prefer    string             `json:"prefer"`
	Fallback  []string           `json:"fallback"`
	Strategy  string             `json:"strategy"`
	Prices    map[string]float64 `json:"prices,omitempty"`
	Order     []string           `json:"order"`
	Target    string             `json:"target"`
	Index     int                `json:"index"`
	Fallbacks int                `json:"fallbacks"` // attempts handed to a fallback after provider errors
}

// CacheOptions is an enqueue's "cache".
type CacheOptions struct {
	Enabled        bool     `json:"enabled"`
	TTL            string   `json:"ttl"`                        // e.g. "24h"
	Match          string   `json:"match,omitempty"`            // exact (default) or key
	CacheKeyFields []string `json:"cache_key_fields,omitempty"` // with match key
}

// Chain is a sequential pipeline (the job is its first step).
type Chain struct {
	Steps     []ChainStep `json:"steps"`
	OnFailure *ChainStep  `json:"on_failure,omitempty"`
	OnExit    *ChainStep  `json:"on_exit,omitempty"`
}

// ChainStep is a step or handler of a chain.
type ChainStep struct {
	Queue   string `json:"queue"`
	Payload any    `json:"payload,omitempty"`
}

// Enqueued is the answer to an enqueue.
type Enqueued struct {
	JobID          string `json:"job_id"`
	Status         string `json:"status"`
	UniqueExisting bool   `json:"unique_existing"`
	// Cached: the job was completed at once from the cache (CachedFrom
	// names the job whose result it took, Result is that result).
	Cached     bool            `json:"cached,omitempty"`
	CachedFrom string          `json:"cached_from,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
}

// Batch groups jobs with a callback when all have finished.
type Batch struct {
	CallbackQueue   string `json:"callback_queue,omitempty"`
	CallbackPayload any    `json:"callback_payload,omitempty"`
}

// BatchEnqueued is the answer to a batch enqueue.
type BatchEnqueued struct {
	JobIDs         []string `json:"job_ids"`
	BatchID        *string  `json:"batch_id"`
	UniqueExisting []bool   `json:"unique_existing,omitempty"`
	Cached         []bool   `json:"cached,omitempty"`
}

// FetchedJob is a job handed to a worker.
type FetchedJob struct {
	JobID          string            `json:"job_id"`
	Queue          string            `json:"queue"`
	Payload        json.RawMessage   `json:"payload"`
	Priority       string            `json:"priority"`
	Attempt        int               `json:"attempt"`
	MaxRetries     int               `json:"max_retries"`
	LeaseDuration  int               `json:"lease_duration"`
	LeaseExpiresAt *time.Time        `json:"lease_expires_at"`
	Checkpoint     json.RawMessage   `json:"checkpoint"`
	Tags           map[string]string `json:"tags"`
	CreatedAt      time.Time         `json:"created_at"`
	Routing        *RouteTarget      `json:"routing,omitempty"` // nil: the job has no routing
}

// FetchedJobs is the answer to a fetch with count > 1.
type FetchedJobs struct {
	Jobs []FetchedJob `json:"jobs"`
}

// FailResult says what the server made of a failure.
type FailResult struct {
	Status            string     `json:"status"` // retrying, pending, dead, cancelled
	NextAttemptAt     *time.Time `json:"next_attempt_at"`
	AttemptsRemaining int        `json:"attempts_remaining"`
}

// UnclaimResult is the answer to Client.Unclaim.
type UnclaimResult struct {
	Status string `json:"status"` // pending, cancelled
}

// HeartbeatJob carries progress and/or a checkpoint for one held job.
type HeartbeatJob struct {
	Progress   any `json:"progress,omitempty"`
	Checkpoint any `json:"checkpoint,omitempty"`
	// Attempt is the lease's attempt (FetchedJob.Attempt): a heartbeat
	// for another attempt is "lost" and changes nothing, and a server
	// run with --strict-leases refuses one without it.
	Attempt int `json:"attempt,omitempty"`
	// Usage is the attempt's usage so far (cumulative).
	Usage *Usage `json:"usage,omitempty"`
}

// Job is the full job document (GET /api/v1/jobs/{id}).
type Job struct {
	ID string `json:"id"`
	// MovedFrom is the ID the request named when the job has moved to a
	// queue on another shard since (it has a new ID there).
	MovedFrom         string          `json:"moved_from,omitempty"`
	Queue             string          `json:"queue"`
	Payload           json.RawMessage `json:"payload"`
	State             string          `json:"state"`
	Priority          string          `json:"priority"`
	Attempt           int             `json:"attempt"`
	MaxRetries        int             `json:"max_retries"`
	AttemptsRemaining int             `json:"attempts_remaining"`
	RetryBackoff      string          `json:"retry_backoff"`
	RetryBaseDelay    string          `json:"retry_base_delay"`
	RetryMaxDelay     string          `json:"retry_max_delay"`
	LeaseDuration     int             `json:"lease_duration"`
	CreatedAt         time.Time       `json:"created_at"`
	ScheduledAt       *time.Time      `json:"scheduled_at"`
	StartedAt         *time.Time      `json:"started_at"`
	CompletedAt       *time.Time      `json:"completed_at"`
	FailedAt          *time.Time      `json:"failed_at"`
	LeaseExpiresAt    *time.Time      `json:"lease_expires_at"`
	ExpireAfter       *string         `json:"expire_after"`
	ExpireAt          *time.Time      `json:"expire_at"`
	UniqueKey         *string         `json:"unique_key"`
	UniquePeriod      *int64          `json:"unique_period"`
	BatchID           *string         `json:"batch_id"`
	ChainID           *string         `json:"chain_id"`
	ChainStep         *int            `json:"chain_step"`
	ChainConfig       json.RawMessage `json:"chain_config"`
	// DependsOn lists the jobs this one waits for (enqueued with
	// depends_on; empty otherwise); DependenciesDone counts those that
	// have completed.
	DependsOn        []string          `json:"depends_on"`
	DependenciesDone int               `json:"dependencies_done"`
	Tags             map[string]string `json:"tags"`
	Progress         json.RawMessage   `json:"progress"`
	Checkpoint       json.RawMessage   `json:"checkpoint"`
	Result           json.RawMessage   `json:"result"`
	CancelRequested  bool              `json:"cancel_requested"`
	Reason           *string           `json:"reason"`
	LastError        *string           `json:"last_error"`
	Errors           []JobError        `json:"errors"`
	Worker           *JobWorker        `json:"worker"`
	CacheKey         *string           `json:"cache_key"`
	CachedFrom       *string           `json:"cached_from"`
	ResultSchema     json.RawMessage   `json:"result_schema"`
	Routing          *JobRouting       `json:"routing"`
	Usage            *JobUsage         `json:"usage"` // nil: no usage reported
	Scores           []JobScore        `json:"scores"`
	// Timeline is sent by GET /api/v1/jobs/{id} only.
	Timeline []TimelineEntry `json:"timeline,omitempty"`
}

// JobWorker is the worker that holds or last held a job.
type JobWorker struct {
	ID       string  `json:"id"`
	Hostname *string `json:"hostname"`
}

// JobError is one failed attempt.
type JobError struct {
	Attempt   int        `json:"attempt"`
	Error     string     `json:"error"`
	Backtrace *string    `json:"backtrace"`
	At        time.Time  `json:"at"`
	StartedAt *time.Time `json:"started_at"`
	WorkerID  *string    `json:"worker_id"`
}

// TimelineEntry is one step of a job's history (GET /api/v1/jobs/{id}).
type TimelineEntry struct {
	At       time.Time `json:"at"`
	Type     string    `json:"type"` // enqueued, scheduled, held, started, failed, retrying, progress, completed, dead, cancelled
	Attempt  int       `json:"attempt"`
	WorkerID string    `json:"worker_id"`
	Detail   string    `json:"detail"`
}

// Queue is a queue's counts and settings (GET /api/v1/queues).
type Queue struct {
	Name           string    `json:"name"`
	Pending        int64     `json:"pending"`
	Active         int64     `json:"active"`
	Scheduled      int64     `json:"scheduled"`
	Retrying       int64     `json:"retrying"`
	Completed      int64     `json:"completed"`
	Dead           int64     `json:"dead"`
	Cancelled      int64     `json:"cancelled"`
	Held           int64     `json:"held"` // waiting on depends_on
	Paused         bool      `json:"paused"`
	MaxConcurrency *int      `json:"max_concurrency"`
	Throttle       *Throttle `json:"throttle"`
	// Provider names the provider whose limits the queue shares (nil:
	// none).
	Provider *string     `json:"provider"`
	Totals   QueueTotals `json:"totals"`
	// Throughput is the server's measure over about a minute; nil until it
	// has one.
	Throughput *QueueThroughput `json:"throughput"`
	// Latency is the queue's wait and run times over the last 5 minutes;
	// nil when no job of it started or finished then.
	Latency *QueueLatency `json:"latency"`
}

// QueueLatency is a queue's wait time (from when an attempt could run —
// created, scheduled_at, or the end of a retry's backoff — to its start)
// and run time (start to completion or failure), over the last WindowS
// seconds. Each is nil when there was no sample of it.
type QueueLatency struct {
	WaitMs  *Quantiles `json:"wait_ms"`
	RunMs   *Quantiles `json:"run_ms"`
	WindowS int        `json:"window_s"`
}

// Quantiles are p50, p95 and p99 in milliseconds (within 1.6% of a
// sample; the largest and smallest sample exact), and the number of
// samples they were taken from.
type Quantiles struct {
	P50     float64 `json:"p50"`
	P95     float64 `json:"p95"`
	P99     float64 `json:"p99"`
	Samples uint64  `json:"samples"`
}

// QueueHistory is GET /api/v1/queues/history: per StepS-second point
// (T holds each point's start, Unix seconds), the rates and counts of the
// queues asked for and of all of them together. A value is null where the
// server holds no record (the node hosting the shard was not running, or
// for rates the bucket before that).
type QueueHistory struct {
	StepS  int                  `json:"step_s"`
	T      []int64              `json:"t"`
	Total  HistorySeries        `json:"total"`
	Queues []QueueHistorySeries `json:"queues"`
	// Sampled is set in a part of a history another node asked for
	// (?shards=): whether each point was recorded on one of them.
	Sampled []bool `json:"sampled,omitempty"`
}

// HistorySeries is one line of each chart: jobs per second and counts.
type HistorySeries struct {
	EnqueuedPerS  []*float64 `json:"enqueued_per_s"`
	CompletedPerS []*float64 `json:"completed_per_s"`
	FailedPerS    []*float64 `json:"failed_per_s"`
	Pending       []*int64   `json:"pending"`
	Active        []*int64   `json:"active"`
	Waiting       []*int64   `json:"waiting"` // scheduled + retrying
	// OldestPendingS is how long the next job to fetch had waited, in
	// seconds (for the total: the longest of any queue).
	OldestPendingS []*int64 `json:"oldest_pending_s"`
}

// QueueHistorySeries is one queue's history and its latency now.
type QueueHistorySeries struct {
	Name string `json:"name"`
	HistorySeries
	Latency *QueueLatency `json:"latency"`
}

// QueueTotals are a queue's running counters.
type QueueTotals struct {
	Enqueued  int64 `json:"enqueued"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Dead      int64 `json:"dead"`
}

// QueueThroughput is a queue's jobs per second.
type QueueThroughput struct {
	EnqueuedPerS  float64 `json:"enqueued_per_s"`
	CompletedPerS float64 `json:"completed_per_s"`
	FailedPerS    float64 `json:"failed_per_s"`
}

// Throttle is a queue's rate limit.
type Throttle struct {
	Rate     int    `json:"rate"`
	Period   string `json:"period,omitempty"`
	WindowMs int64  `json:"window_ms,omitempty"`
}

// WorkerInfo is a worker the server has heard from.
type WorkerInfo struct {
	ID         string    `json:"id"`
	Hostname   *string   `json:"hostname"`
	Queues     []string  `json:"queues"`
	ActiveJobs int       `json:"active_jobs"`
	Jobs       []string  `json:"jobs"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
}

// Schedule is a cron schedule.
type Schedule struct {
	ID         string     `json:"id,omitempty"`
	Name       string     `json:"name"`
	Queue      string     `json:"queue"`
	Cron       string     `json:"cron"`
	Timezone   string     `json:"timezone,omitempty"`
	Payload    any        `json:"payload,omitempty"`
	UniqueKey  string     `json:"unique_key,omitempty"`
	MaxRetries *int       `json:"max_retries,omitempty"`
	Priority   string     `json:"priority,omitempty"`
	NextRun    *time.Time `json:"next_run,omitempty"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	// LastJobID is the job of the last run; Paused: the schedule fires
	// nothing until resumed. Both are answered, never sent.
	LastJobID *string    `json:"last_job_id,omitempty"`
	Paused    bool       `json:"paused,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// ClusterStatus is the cluster's topology as one node gathered it.
type ClusterStatus struct {
	NodeID     uint64        `json:"node_id"`
	ShardCount int           `json:"shard_count"`
	Replicas   int           `json:"replicas"`
	Nodes      []ClusterNode `json:"nodes"`
	Shards     []ShardStatus `json:"shards"`
	// Meta is the cluster's metadata group (membership and placement).
	Meta   *ShardStatus `json:"meta"`
	Mirror MirrorStatus `json:"mirror"`
}

// MirrorStatus is the answering node's search mirror.
type MirrorStatus struct {
	LagEntries *int64 `json:"lag_entries"`
}

// ClusterNode is one member of the cluster.
type ClusterNode struct {
	NodeID      uint64   `json:"node_id"`
	Name        string   `json:"name"`
	HTTPAddress string   `json:"http_address"`
	RaftAddress string   `json:"raft_address"`
	Status      string   `json:"status"`    // up | down
	LeaderOf    []uint64 `json:"leader_of"` // shards, numbered as ShardStatus.ShardID
	MirrorLag   *int64   `json:"mirror_lag_entries"`
}

// ShardStatus is one shard's leader and replicas.
type ShardStatus struct {
	// ShardID is the shard's number from 0, as in its job IDs
	// (job_<shard>_…) and ShardForQueue.
	ShardID    uint64         `json:"shard_id"`
	LeaderNode uint64         `json:"leader_node"`
	Term       uint64         `json:"term"`
	Replicas   []ShardReplica `json:"replicas"`
	// PlacedNodes is where the placement puts the shard; Settled is false
	// while a replica moves there.
	PlacedNodes     []uint64 `json:"placed_nodes"`
	Settled         *bool    `json:"settled"`
	ProposalLatency *Latency `json:"proposal_latency_ms"`
}

// ShardReplica is one replica of a shard.
type ShardReplica struct {
	NodeID  uint64  `json:"node_id"`
	Role    string  `json:"role"` // leader, follower, learner
	Applied *uint64 `json:"applied_index"`
	Lag     *uint64 `json:"lag"`
}

// Latency is a distribution's percentiles, in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	// Samples is how many measures the percentiles come from.
	Samples int `json:"samples"`
}
