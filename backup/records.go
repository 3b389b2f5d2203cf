package backup

import (
	"encoding/json"
	"fmt"

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
			UniquePeriod: j.UniquePeriod,
		},
		ExpireAt: j.ExpireAt, BatchID: j.BatchID, BatchShard: j.BatchShard, CreatedAt: j.CreatedAt,
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
		DepsDone: j.DepsDone, ProgressAt: j.ProgressAt,
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
		LastRun: s.LastRun, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// ToSchedule is the state machine's form of a backed-up schedule.
func ToSchedule(s *Schedule) (*statemachine.Schedule, error) {
	prio, ok := statemachine.ParsePriority(s.Priority)
	if !ok {
		return nil, fmt.Errorf("schedule %s: unknown priority %q", s.ID, s.Priority)
	}
	return &statemachine.Schedule{ID: s.ID, Name: s.Name, Queue: s.Queue, Cron: s.Cron, Timezone: s.Timezone,
		Payload: unraw(s.Payload), UniqueKey: s.UniqueKey, MaxRetries: s.MaxRetries, Priority: prio, NextRun: s.NextRun,
		LastRun: s.LastRun, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}, nil
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
