package backup

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// The JSON form of the state machine's records: every stored field, raw
// JSON fields as JSON, enums by name, times as Unix nanoseconds.

// Job is a job as stored: its record, state, error history and the
// dependencies already reported to it.
type Job struct {
	ID            string          `json:"id"`
	Queue         string          `json:"queue"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	Priority      string          `json:"priority"`
	MaxRetries    uint32          `json:"max_retries"`
	Backoff       string          `json:"backoff"`
	BaseDelayMs   int64           `json:"base_delay_ms"`
	MaxDelayMs    int64           `json:"max_delay_ms"`
	BaseDelay     string          `json:"base_delay,omitempty"`
	MaxDelay      string          `json:"max_delay,omitempty"`
	LeaseSeconds  uint32          `json:"lease_seconds"`
	ScheduledAt   int64           `json:"scheduled_at,omitempty"`
	ExpireAfter   string          `json:"expire_after,omitempty"`
	ExpireAfterMs int64           `json:"expire_after_ms,omitempty"`
	ExpireAt      int64           `json:"expire_at,omitempty"`
	Tags          json.RawMessage `json:"tags,omitempty"`
	UniqueKey     string          `json:"unique_key,omitempty"`
	UniquePeriod  int64           `json:"unique_period,omitempty"`
	BatchID       string          `json:"batch_id,omitempty"`
	BatchShard    uint32          `json:"batch_shard,omitempty"`
	CreatedAt     int64           `json:"created_at"`
	Chain         *Chain          `json:"chain,omitempty"`
	DependsOn     []Dep           `json:"depends_on,omitempty"`
	ResultSchema  json.RawMessage `json:"result_schema,omitempty"`
	CacheKey      string          `json:"cache_key,omitempty"`
	CacheTTLms    int64           `json:"cache_ttl_ms,omitempty"`
	Routing       *Routing        `json:"routing,omitempty"`
	CachedFrom    string          `json:"cached_from,omitempty"` // completed from that job's cache entry
	SavedNanos    int64           `json:"saved_nanos,omitempty"` // what the cache hit saved, 1e-9 USD

	State           string          `json:"state"`
	Attempt         uint32          `json:"attempt,omitempty"`
	WorkerID        string          `json:"worker_id,omitempty"`
	Hostname        string          `json:"hostname,omitempty"`
	LeaseExpiresAt  int64           `json:"lease_expires_at,omitempty"`
	StartedAt       int64           `json:"started_at,omitempty"`
	CompletedAt     int64           `json:"completed_at,omitempty"`
	FailedAt        int64           `json:"failed_at,omitempty"`
	DueAt           int64           `json:"due_at,omitempty"`
	CancelRequested bool            `json:"cancel_requested,omitempty"`
	Progress        json.RawMessage `json:"progress,omitempty"`
	ProgressAt      int64           `json:"progress_at,omitempty"`
	Checkpoint      json.RawMessage `json:"checkpoint,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	Reason          string          `json:"reason,omitempty"`
	LastError       string          `json:"last_error,omitempty"`
	DepsDone        uint32          `json:"deps_done,omitempty"`
	Errors          []JobError      `json:"errors,omitempty"`
	Resolved        []string        `json:"resolved,omitempty"` // dependencies reported completed
	RouteIndex      uint32          `json:"route_index,omitempty"`
	RouteFallbacks  uint32          `json:"route_fallbacks,omitempty"`
	Usage           []UsageRecord   `json:"usage,omitempty"` // the job's cost is their sum
	Scores          []Score         `json:"scores,omitempty"`
}

// Routing is a job's model routing: its models (preferred first), the
// strategy that orders them, the prices lowest_cost orders by, and the
// place round_robin starts at.
type Routing struct {
	Strategy   string   `json:"strategy"`
	Models     []string `json:"models"`
	PriceNanos []int64  `json:"price_nanos,omitempty"`
	Start      uint32   `json:"start,omitempty"`
}

// UsageRecord is one usage report of a job: the attempt (and when it
// started), the call it came with (heartbeat, ack, fail), when, the
// job's queue then, and what was used. Costs are 1e-9 USD.
type UsageRecord struct {
	Attempt             uint32 `json:"attempt"`
	StartedAt           int64  `json:"started_at,omitempty"`
	Phase               string `json:"phase"`
	At                  int64  `json:"at"`
	Queue               string `json:"queue"`
	InputTokens         int64  `json:"input_tokens,omitempty"`
	OutputTokens        int64  `json:"output_tokens,omitempty"`
	CacheCreationTokens int64  `json:"cache_creation_tokens,omitempty"`
	CacheReadTokens     int64  `json:"cache_read_tokens,omitempty"`
	Model               string `json:"model,omitempty"`
	Provider            string `json:"provider,omitempty"`
	CostNanos           int64  `json:"cost_nanos,omitempty"`
	LatencyMs           int64  `json:"latency_ms,omitempty"`
}

// Score is one score of a job, its dimensions in the order posted.
type Score struct {
	Queue      string     `json:"queue"`
	At         int64      `json:"at"`
	Scorer     string     `json:"scorer"`
	Comment    string     `json:"comment,omitempty"`
	Dimensions []ScoreDim `json:"dimensions"`
}

// ScoreDim is one dimension of a score.
type ScoreDim struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Budget is a spending limit of a namespace — over a queue (stored name),
// a tag value, or, with neither, every job of the namespace — with what
// the cluster's jobs spent under it on each UTC day the retention keeps.
type Budget struct {
	Namespace   string     `json:"namespace"`
	Queue       string     `json:"queue,omitempty"`
	TagKey      string     `json:"tag_key,omitempty"`
	TagValue    string     `json:"tag_value,omitempty"`
	DailyNanos  int64      `json:"daily_nanos,omitempty"`
	PerJobNanos int64      `json:"per_job_nanos,omitempty"`
	OnExceed    string     `json:"on_exceed"`
	Spend       []DaySpend `json:"spend,omitempty"`
}

// DaySpend is a budget's spend on a UTC day (YYYY-MM-DD), 1e-9 USD.
type DaySpend struct {
	Day        string `json:"day"`
	SpentNanos int64  `json:"spent_nanos"`
}

// Cache is a queue's result-cache entry for a key: the completed job
// whose result it serves, and when it expires.
type Cache struct {
	Queue       string `json:"queue"`
	Key         string `json:"key"`
	JobID       string `json:"job_id"`
	CompletedAt int64  `json:"completed_at"`
	ExpiresAt   int64  `json:"expires_at"`
	CostNanos   int64  `json:"cost_nanos,omitempty"`
}

// UsageDay is a queue's usage totals of a UTC day (YYYY-MM-DD).
type UsageDay struct {
	Queue               string `json:"queue"`
	Day                 string `json:"day"`
	InputTokens         int64  `json:"input_tokens,omitempty"`
	OutputTokens        int64  `json:"output_tokens,omitempty"`
	CacheCreationTokens int64  `json:"cache_creation_tokens,omitempty"`
	CacheReadTokens     int64  `json:"cache_read_tokens,omitempty"`
	CostNanos           int64  `json:"cost_nanos,omitempty"`
	Reports             int64  `json:"reports,omitempty"`
}

// Dep is a dependency with the shard it was on.
type Dep struct {
	ID    string `json:"id"`
	Shard uint32 `json:"shard"`
}

// ChainTarget is a queue a chain sends work to.
type ChainTarget struct {
	Queue   string          `json:"queue"`
	Shard   uint32          `json:"shard"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Chain is a job's place in a chain.
type Chain struct {
	ID        string          `json:"id"`
	Step      uint32          `json:"step"`
	Steps     []ChainTarget   `json:"steps"`
	OnFailure *ChainTarget    `json:"on_failure,omitempty"`
	OnExit    *ChainTarget    `json:"on_exit,omitempty"`
	Config    json.RawMessage `json:"config,omitempty"`
}

// JobError is one failed attempt.
type JobError struct {
	Attempt   uint32 `json:"attempt"`
	Error     string `json:"error"`
	Backtrace string `json:"backtrace,omitempty"`
	At        int64  `json:"at"`
	StartedAt int64  `json:"started_at,omitempty"`
	WorkerID  string `json:"worker_id,omitempty"`
	RetryAt   int64  `json:"retry_at,omitempty"`
}

// Schedule is a cron schedule.
type Schedule struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Queue      string          `json:"queue"`
	Cron       string          `json:"cron"`
	Timezone   string          `json:"timezone"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	UniqueKey  string          `json:"unique_key,omitempty"`
	MaxRetries uint32          `json:"max_retries"`
	Priority   string          `json:"priority"`
	NextRun    int64           `json:"next_run,omitempty"`
	LastRun    int64           `json:"last_run,omitempty"`
	CreatedAt  int64           `json:"created_at"`
	UpdatedAt  int64           `json:"updated_at,omitempty"`
	Paused     bool            `json:"paused,omitempty"`
	LastJobID  string          `json:"last_job_id,omitempty"` // the job of its last run
}

// Batch is a batch with the jobs whose end it counted.
type Batch struct {
	ID              string          `json:"id"`
	Total           uint32          `json:"total"`
	Succeeded       uint32          `json:"succeeded"`
	Failed          uint32          `json:"failed"`
	CallbackQueue   string          `json:"callback_queue,omitempty"`
	CallbackShard   uint32          `json:"callback_shard,omitempty"`
	CallbackPayload json.RawMessage `json:"callback_payload,omitempty"`
	CallbackJobID   string          `json:"callback_job_id,omitempty"`
	CreatedAt       int64           `json:"created_at"`
	CompletedAt     int64           `json:"completed_at,omitempty"`
	Counted         []string        `json:"counted,omitempty"`
}

// raw hands stored JSON to the encoder; the state machine stores only JSON
// the gateway validated, so anything else is a corrupt record.
func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func unraw(m json.RawMessage) []byte {
	if len(m) == 0 {
		return nil
	}
	return []byte(m)
}

func target(t *statemachine.ChainTarget) *ChainTarget {
	if t == nil {
		return nil
	}
	return &ChainTarget{Queue: t.Queue, Shard: t.Shard, Payload: raw(t.Payload)}
}

func untarget(t *ChainTarget) *statemachine.ChainTarget {
	if t == nil {
		return nil
	}
	return &statemachine.ChainTarget{Queue: t.Queue, Shard: t.Shard, Payload: unraw(t.Payload)}
}

// FromJob is the backup form of an exported job.
func FromJob(e *statemachine.JobExport) *Job {
	j, st := &e.View.Job, &e.View.State
	out := &Job{
		ID: j.ID, Queue: j.Queue, Payload: raw(j.Payload), Priority: j.Priority.String(), MaxRetries: j.MaxRetries,
		Backoff: j.Backoff.String(), BaseDelayMs: j.BaseDelayMs, MaxDelayMs: j.MaxDelayMs, BaseDelay: j.BaseDelay,
		MaxDelay: j.MaxDelay, LeaseSeconds: j.LeaseSeconds, ScheduledAt: j.ScheduledAt, ExpireAfter: j.ExpireAfter,
		ExpireAfterMs: j.ExpireAfterMs, ExpireAt: j.ExpireAt, Tags: raw(j.Tags), UniqueKey: j.UniqueKey,
		UniquePeriod: j.UniquePeriod, BatchID: j.BatchID, BatchShard: j.BatchShard, CreatedAt: j.CreatedAt,

		State: st.State.String(), Attempt: st.Attempt, WorkerID: st.WorkerID, Hostname: st.Hostname,
		LeaseExpiresAt: st.LeaseExpiresAt, StartedAt: st.StartedAt, CompletedAt: st.CompletedAt, FailedAt: st.FailedAt,
		DueAt: st.DueAt, CancelRequested: st.CancelRequested, Progress: raw(st.Progress), ProgressAt: st.ProgressAt,
		Checkpoint: raw(st.Checkpoint), Result: raw(st.Result), Reason: st.Reason, LastError: st.LastError,
		DepsDone: st.DepsDone, Resolved: e.Resolved,

		ResultSchema: raw(j.ResultSchema), CacheKey: j.CacheKey, CacheTTLms: j.CacheTTLms, CachedFrom: j.CachedFrom,
		SavedNanos: j.SavedNanos, RouteIndex: st.RouteIndex, RouteFallbacks: st.RouteFallbacks,
	}
	if r := j.Routing; r != nil {
		out.Routing = &Routing{Strategy: r.Strategy.String(), Models: r.Models, PriceNanos: r.PriceNanos, Start: r.Start}
	}
	for i := range e.View.Usage {
		u := &e.View.Usage[i]
		out.Usage = append(out.Usage, UsageRecord{Attempt: u.Attempt, StartedAt: u.StartedAt, Phase: u.Phase.String(), At: u.At,
			Queue: u.Queue, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheCreationTokens: u.CacheCreationTokens,
			CacheReadTokens: u.CacheReadTokens, Model: u.Model, Provider: u.Provider, CostNanos: u.CostNanos, LatencyMs: u.LatencyMs})
	}
	for i := range e.View.Scores {
		sc := &e.View.Scores[i]
		s := Score{Queue: sc.Queue, At: sc.At, Scorer: sc.Scorer, Comment: sc.Comment, Dimensions: []ScoreDim{}}
		for _, d := range sc.Dims {
			s.Dimensions = append(s.Dimensions, ScoreDim(d))
		}
		out.Scores = append(out.Scores, s)
	}
	if c := j.Chain; c != nil {
		out.Chain = &Chain{ID: c.ID, Step: c.Step, OnFailure: target(c.OnFailure), OnExit: target(c.OnExit), Config: raw(c.Config)}
		for i := range c.Steps {
			out.Chain.Steps = append(out.Chain.Steps, *target(&c.Steps[i]))
		}
	}
	for _, d := range j.DependsOn {
		out.DependsOn = append(out.DependsOn, Dep{ID: d.ID, Shard: d.Shard})
	}
	for _, e := range e.View.Errors {
		out.Errors = append(out.Errors, JobError(e))
	}
	return out
}

// ToJob is the state machine's form of a backed-up job; it fails on a
// field no corvo writes (an unknown state, priority or backoff, JSON that
// is not JSON).
func ToJob(j *Job) (*statemachine.JobExport, error) {
	st, ok := statemachine.ParseState(j.State)
	if !ok {
		return nil, fmt.Errorf("job %s: unknown state %q", j.ID, j.State)
	}
	prio, ok := statemachine.ParsePriority(j.Priority)
	if !ok {
		return nil, fmt.Errorf("job %s: unknown priority %q", j.ID, j.Priority)
	}
	bo, ok := statemachine.ParseBackoff(j.Backoff)
	if !ok {
		return nil, fmt.Errorf("job %s: unknown backoff %q", j.ID, j.Backoff)
	}
	e := &statemachine.JobExport{Resolved: j.Resolved}
	e.View.Job = statemachine.Job{
		ID: j.ID, Queue: j.Queue, Payload: unraw(j.Payload),
		JobOptions: statemachine.JobOptions{
			Priority: prio, MaxRetries: j.MaxRetries, Backoff: bo, BaseDelayMs: j.BaseDelayMs, MaxDelayMs: j.MaxDelayMs,
			BaseDelay: j.BaseDelay, MaxDelay: j.MaxDelay, LeaseSeconds: j.LeaseSeconds, ScheduledAt: j.ScheduledAt,
			ExpireAfter: j.ExpireAfter, ExpireAfterMs: j.ExpireAfterMs, Tags: unraw(j.Tags), UniqueKey: j.UniqueKey,
			UniquePeriod: j.UniquePeriod, ResultSchema: unraw(j.ResultSchema), CacheKey: j.CacheKey, CacheTTLms: j.CacheTTLms,
		},
		ExpireAt: j.ExpireAt, BatchID: j.BatchID, BatchShard: j.BatchShard, CreatedAt: j.CreatedAt,
		CachedFrom: j.CachedFrom, SavedNanos: j.SavedNanos,
	}
	if r := j.Routing; r != nil {
		strat, ok := statemachine.ParseRouteStrategy(r.Strategy)
		switch {
		case !ok:
			return nil, fmt.Errorf("job %s: unknown routing strategy %q", j.ID, r.Strategy)
		case len(r.Models) == 0 || len(r.Models) > statemachine.MaxRouteModels || len(r.PriceNanos) > len(r.Models):
			return nil, fmt.Errorf("job %s: routing names 1–%d models, and a price for at most each", j.ID, statemachine.MaxRouteModels)
		}
		e.View.Job.Routing = &statemachine.Routing{Strategy: strat, Models: r.Models, PriceNanos: r.PriceNanos, Start: r.Start}
	}
	for i := range j.Usage {
		u := &j.Usage[i]
		phase, ok := parsePhase(u.Phase)
		if !ok {
			return nil, fmt.Errorf("job %s: usage record with unknown phase %q", j.ID, u.Phase)
		}
		rec := statemachine.UsageRecord{N: uint32(i + 1), Attempt: u.Attempt, StartedAt: u.StartedAt, Phase: phase, At: u.At, Queue: u.Queue,
			Usage: statemachine.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheCreationTokens: u.CacheCreationTokens,
				CacheReadTokens: u.CacheReadTokens, Model: u.Model, Provider: u.Provider, CostNanos: u.CostNanos, LatencyMs: u.LatencyMs}}
		if err := rec.Usage.Check(); err != nil {
			return nil, fmt.Errorf("job %s: %v", j.ID, err)
		}
		e.View.Usage = append(e.View.Usage, rec)
	}
	if len(j.Scores) > statemachine.MaxScoresPerJob {
		return nil, fmt.Errorf("job %s: more than %d scores", j.ID, statemachine.MaxScoresPerJob)
	}
	for i := range j.Scores {
		s := &j.Scores[i]
		rec := statemachine.ScoreRecord{N: uint32(i), Queue: s.Queue, At: s.At, Score: statemachine.Score{Scorer: s.Scorer, Comment: s.Comment}}
		for _, d := range s.Dimensions {
			rec.Dims = append(rec.Dims, statemachine.ScoreDim(d))
		}
		if err := rec.Check(); err != nil {
			return nil, fmt.Errorf("job %s: score: %v", j.ID, err)
		}
		e.View.Scores = append(e.View.Scores, rec)
	}
	if c := j.Chain; c != nil {
		sc := &statemachine.Chain{ID: c.ID, Step: c.Step, OnFailure: untarget(c.OnFailure), OnExit: untarget(c.OnExit), Config: unraw(c.Config)}
		for i := range c.Steps {
			sc.Steps = append(sc.Steps, *untarget(&c.Steps[i]))
		}
		e.View.Job.Chain = sc
	}
	for _, d := range j.DependsOn {
		e.View.Job.DependsOn = append(e.View.Job.DependsOn, statemachine.Dep{ID: d.ID, Shard: d.Shard})
	}
	e.View.State = statemachine.JobState{
		State: st, Attempt: j.Attempt, WorkerID: j.WorkerID, Hostname: j.Hostname, LeaseExpiresAt: j.LeaseExpiresAt,
		StartedAt: j.StartedAt, CompletedAt: j.CompletedAt, FailedAt: j.FailedAt, DueAt: j.DueAt,
		CancelRequested: j.CancelRequested, Progress: unraw(j.Progress), Checkpoint: unraw(j.Checkpoint),
		Result: unraw(j.Result), Reason: j.Reason, Errors: uint32(len(j.Errors)), LastError: j.LastError,
		DepsDone: j.DepsDone, ProgressAt: j.ProgressAt, RouteIndex: j.RouteIndex, RouteFallbacks: j.RouteFallbacks,
	}
	for _, je := range j.Errors {
		e.View.Errors = append(e.View.Errors, statemachine.JobError(je))
	}
	return e, nil
}

// FromSchedule is the backup form of a schedule.
func FromSchedule(s *statemachine.Schedule) *Schedule {
	return &Schedule{ID: s.ID, Name: s.Name, Queue: s.Queue, Cron: s.Cron, Timezone: s.Timezone, Payload: raw(s.Payload),
		UniqueKey: s.UniqueKey, MaxRetries: s.MaxRetries, Priority: s.Priority.String(), NextRun: s.NextRun,
		LastRun: s.LastRun, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Paused: s.Paused, LastJobID: s.LastJobID}
}

// ToSchedule is the state machine's form of a backed-up schedule.
func ToSchedule(s *Schedule) (*statemachine.Schedule, error) {
	prio, ok := statemachine.ParsePriority(s.Priority)
	if !ok {
		return nil, fmt.Errorf("schedule %s: unknown priority %q", s.ID, s.Priority)
	}
	return &statemachine.Schedule{ID: s.ID, Name: s.Name, Queue: s.Queue, Cron: s.Cron, Timezone: s.Timezone,
		Payload: unraw(s.Payload), UniqueKey: s.UniqueKey, MaxRetries: s.MaxRetries, Priority: prio, NextRun: s.NextRun,
		LastRun: s.LastRun, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Paused: s.Paused, LastJobID: s.LastJobID}, nil
}

// FromBatch is the backup form of an exported batch.
func FromBatch(e *statemachine.BatchExport) *Batch {
	b := &e.Batch
	return &Batch{ID: b.ID, Total: b.Total, Succeeded: b.Succeeded, Failed: b.Failed, CallbackQueue: b.CallbackQueue,
		CallbackShard: b.CallbackShard, CallbackPayload: raw(b.CallbackPayload), CallbackJobID: b.CallbackJobID,
		CreatedAt: b.CreatedAt, CompletedAt: b.CompletedAt, Counted: e.Counted}
}

// ToBatch is the state machine's form of a backed-up batch.
func ToBatch(b *Batch) *statemachine.BatchExport {
	return &statemachine.BatchExport{Batch: statemachine.Batch{ID: b.ID, Total: b.Total, Succeeded: b.Succeeded,
		Failed: b.Failed, CallbackQueue: b.CallbackQueue, CallbackShard: b.CallbackShard,
		CallbackPayload: unraw(b.CallbackPayload), CallbackJobID: b.CallbackJobID, CreatedAt: b.CreatedAt,
		CompletedAt: b.CompletedAt}, Counted: b.Counted}
}

func parsePhase(s string) (statemachine.UsagePhase, bool) {
	for _, p := range []statemachine.UsagePhase{statemachine.PhaseHeartbeat, statemachine.PhaseAck, statemachine.PhaseFail} {
		if p.String() == s {
			return p, true
		}
	}
	return 0, false
}

// dayLayout is how a backup writes a UTC day.
const dayLayout = time.DateOnly

func dayString(day int64) string { return time.Unix(day*86400, 0).UTC().Format(dayLayout) }

func parseDay(s string) (int64, error) {
	t, err := time.Parse(dayLayout, s)
	if err != nil {
		return 0, fmt.Errorf("day %q is not YYYY-MM-DD", s)
	}
	day := statemachine.UsageDay(t.UnixNano())
	if day < 0 || day > math.MaxUint32 {
		return 0, fmt.Errorf("day %q is out of range", s)
	}
	return day, nil
}

// storedNamespace is a namespace as a budget stores it ("" the default).
func storedNamespace(ns string) string {
	if ns == router.DefaultNamespace {
		return ""
	}
	return ns
}

// FromBudget is the backup form of a budget with its spend by day.
func FromBudget(e *statemachine.BudgetExport) *Budget {
	b := &e.Budget
	ns := b.Namespace
	if ns == "" {
		ns = router.DefaultNamespace
	}
	out := &Budget{Namespace: ns, Queue: b.Queue, TagKey: b.TagKey, TagValue: b.TagValue, DailyNanos: b.DailyNanos,
		PerJobNanos: b.PerJobNanos, OnExceed: b.OnExceed.String()}
	for _, s := range e.Spend {
		out.Spend = append(out.Spend, DaySpend{Day: dayString(s.Day), SpentNanos: s.Nanos})
	}
	return out
}

// ToBudget is the state machine's form of a backed-up budget; it fails
// on a budget the server would refuse.
func ToBudget(b *Budget) (*statemachine.BudgetExport, error) {
	act, ok := statemachine.ParseBudgetAction(b.OnExceed)
	if !ok {
		return nil, fmt.Errorf("budget: unknown on_exceed %q", b.OnExceed)
	}
	if err := router.ValidateNamespace(b.Namespace); err != nil {
		return nil, fmt.Errorf("budget: %v", err)
	}
	out := &statemachine.BudgetExport{Budget: statemachine.Budget{Namespace: storedNamespace(b.Namespace), Queue: b.Queue,
		TagKey: b.TagKey, TagValue: b.TagValue, DailyNanos: b.DailyNanos, PerJobNanos: b.PerJobNanos, OnExceed: act}}
	if err := out.Budget.Check(); err != nil {
		return nil, fmt.Errorf("budget %s: %v", out.Budget.Scope(), err)
	}
	for _, s := range b.Spend {
		day, err := parseDay(s.Day)
		if err != nil {
			return nil, fmt.Errorf("budget %s: %v", out.Budget.Scope(), err)
		}
		out.Spend = append(out.Spend, statemachine.DaySpend{Day: day, Nanos: s.SpentNanos})
	}
	return out, nil
}

// SumSpend adds a shard's spends to a budget's (backup: one record per
// budget, its spend the sum over the shards), keeping the days in order.
func (b *Budget) SumSpend(more []DaySpend) {
	at := map[string]int{}
	for i, s := range b.Spend {
		at[s.Day] = i
	}
	for _, s := range more {
		if i, ok := at[s.Day]; ok {
			b.Spend[i].SpentNanos += s.SpentNanos
			continue
		}
		at[s.Day] = len(b.Spend)
		b.Spend = append(b.Spend, s)
	}
	slices.SortFunc(b.Spend, func(x, y DaySpend) int { return strings.Compare(x.Day, y.Day) })
}

// ID is the budget's identity: its namespace and scope.
func (b *Budget) ID() string {
	return b.Namespace + "\x00" + b.Queue + "\x00" + b.TagKey + "\x00" + b.TagValue
}

// FromCache is the backup form of a cache entry.
func FromCache(c *statemachine.CacheExport) *Cache {
	return &Cache{Queue: c.Queue, Key: c.Key, JobID: c.Entry.JobID, CompletedAt: c.Entry.CompletedAt, ExpiresAt: c.Entry.ExpiresAt,
		CostNanos: c.Entry.CostNanos}
}

// ToCache is the state machine's form of a backed-up cache entry.
func ToCache(c *Cache) (*statemachine.CacheExport, error) {
	switch {
	case c.Key == "":
		return nil, fmt.Errorf("cache entry of %s: no key", c.Queue)
	case router.ValidateStoredQueue(c.Queue) != nil:
		return nil, fmt.Errorf("cache entry: queue %q is not a queue name", c.Queue)
	}
	if _, err := router.ParseJobID(c.JobID); err != nil {
		return nil, fmt.Errorf("cache entry of %s: job id %q: %v", c.Queue, c.JobID, err)
	}
	return &statemachine.CacheExport{Queue: c.Queue, Key: c.Key, Entry: statemachine.CacheEntry{JobID: c.JobID,
		CompletedAt: c.CompletedAt, ExpiresAt: c.ExpiresAt, CostNanos: c.CostNanos}}, nil
}

// FromUsageDay is the backup form of a queue's usage totals of a day.
func FromUsageDay(u *statemachine.UsageDayExport) *UsageDay {
	return &UsageDay{Queue: u.Queue, Day: dayString(u.Day), InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationTokens: u.CacheCreationTokens, CacheReadTokens: u.CacheReadTokens, CostNanos: u.CostNanos, Reports: u.Reports}
}

// ToUsageDay is the state machine's form of a backed-up day's totals.
func ToUsageDay(u *UsageDay) (*statemachine.UsageDayExport, error) {
	if err := router.ValidateStoredQueue(u.Queue); err != nil {
		return nil, fmt.Errorf("usage totals: queue %q: %v", u.Queue, err)
	}
	day, err := parseDay(u.Day)
	if err != nil {
		return nil, fmt.Errorf("usage totals of %s: %v", u.Queue, err)
	}
	return &statemachine.UsageDayExport{Day: day, QueueUsage: statemachine.QueueUsage{Queue: u.Queue, UsageTotals: statemachine.UsageTotals{
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheCreationTokens: u.CacheCreationTokens,
		CacheReadTokens: u.CacheReadTokens, CostNanos: u.CostNanos, Reports: u.Reports}}}, nil
}

// Provider is a model provider of a namespace with its limits per
// minute (absent: no limit). Its windows (what was used in the last
// minute) and which shards share its pool are not kept: a restore
// recreates the provider on every shard and links the queues again, and
// the shares follow the restored cluster's links.
type Provider struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	RPMLimit       int64  `json:"rpm_limit,omitempty"`
	InputTPMLimit  int64  `json:"input_tpm_limit,omitempty"`
	OutputTPMLimit int64  `json:"output_tpm_limit,omitempty"`
}

// FromProvider is the backup form of a provider.
func FromProvider(p *statemachine.Provider) *Provider {
	ns := p.Namespace
	if ns == "" {
		ns = router.DefaultNamespace
	}
	return &Provider{Namespace: ns, Name: p.Name, RPMLimit: p.RPM, InputTPMLimit: p.InputTPM, OutputTPMLimit: p.OutputTPM}
}

// ToProvider is the state machine's form of a backed-up provider; it
// fails on a provider the server would refuse.
func ToProvider(p *Provider) (*statemachine.Provider, error) {
	if err := router.ValidateNamespace(p.Namespace); err != nil {
		return nil, fmt.Errorf("provider %s: %v", p.Name, err)
	}
	out := &statemachine.Provider{Namespace: storedNamespace(p.Namespace), Name: p.Name, RPM: p.RPMLimit, InputTPM: p.InputTPMLimit,
		OutputTPM: p.OutputTPMLimit}
	if err := out.Check(); err != nil {
		return nil, fmt.Errorf("provider %s: %v", p.Name, err)
	}
	return out, nil
}
