package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/statemachine"
)

// Request limits (documented in docs/api.md).
const (
	MaxBatchJobsDefault  = 10000
	MaxPayloadDefault    = 1 << 20
	maxTags              = 64
	maxTagKey            = 128
	maxTagValue          = 1024
	maxFetchCount        = 1000
	maxFetchTimeout      = 120 // seconds
	maxErrorText         = 64 << 10
	maxLeaseSeconds      = 24 * 3600
	maxRetriesLimit      = 1000
	maxWorkerIDLen       = 256
	defaultFetchQueueMax = 64
	maxUniqueKey         = 1024
	maxDependsOn         = 100
	maxUniquePeriod      = 365 * 24 * 3600
)

// decodeBody parses a JSON object strictly: unknown or duplicate fields,
// wrong types, invalid UTF-8 and trailing data are errors. An empty body is
// allowed only when allowEmpty. It uses json v2 (go-json-experiment, the
// code behind encoding/json/v2): several times faster than encoding/json
// on the hot enqueue and fetch bodies, and strict by default.
func decodeBody(body []byte, v any, allowEmpty bool) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return codeInvalidJSON.errf("request body is required")
	}
	if err := json.Unmarshal(body, v, json.RejectUnknownMembers(true)); err != nil {
		return jsonError(err)
	}
	return nil
}

func jsonError(err error) *apiError {
	var se *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &syn):
		return codeInvalidJSON.errf("malformed JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	case errors.As(err, &se):
		field := strings.TrimPrefix(string(se.JSONPointer), "/")
		switch {
		case errors.Is(se.Err, json.ErrUnknownName):
			return invalid("unknown field %q", field)
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			return codeInvalidJSON.errf("malformed JSON: unexpected end of input")
		case field == "":
			return codeInvalidJSON.errf("request body must be a JSON object")
		case se.GoType != nil && se.JSONKind != 0:
			return invalid("field %q must be %s, not %s", field, jsonKind(se.GoType.String()), kindName(se.JSONKind))
		}
		return invalid("field %q: %v", field, se.Err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return codeInvalidJSON.errf("malformed JSON: unexpected end of input")
	}
	return codeInvalidJSON.errf("malformed JSON: %v", err)
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return k.String()
}

func jsonKind(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(goType, "map["):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	}
	return goType
}

// rawOrNil treats an absent or JSON-null raw value as unset.
func rawOrNil(r jsontext.Value) []byte {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return r
}

// enqueueRequest is one job as POST /enqueue and /enqueue/batch take it.
type enqueueRequest struct {
	Queue          *string           `json:"queue"`
	Payload        jsontext.Value    `json:"payload"`
	Priority       jsontext.Value    `json:"priority"`
	MaxRetries     *int64            `json:"max_retries"`
	RetryBackoff   *string           `json:"retry_backoff"`
	RetryBaseDelay *string           `json:"retry_base_delay"`
	RetryMaxDelay  *string           `json:"retry_max_delay"`
	LeaseDuration  *int64            `json:"lease_duration"`
	ScheduledAt    *string           `json:"scheduled_at"`
	ExpireAfter    *string           `json:"expire_after"`
	Tags           map[string]string `json:"tags"`
	UniqueKey      *string           `json:"unique_key"`
	UniquePeriod   *int64            `json:"unique_period"`
	Chain          *chainRequest     `json:"chain"`
	DependsOn      []string          `json:"depends_on"`
}

func parseDuration(field, s string, allowZero bool) (int64, *apiError) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid("field %q: %q is not a duration (use e.g. \"500ms\", \"5s\", \"10m\", \"1h\")", field, s)
	}
	if d < 0 || (!allowZero && d == 0) {
		return 0, invalid("field %q must be positive", field)
	}
	return d.Milliseconds(), nil
}

// toJob validates a request and builds the job an EnqueueOp carries (ID
// excluded; a chain's ID is the job's, set with it), from
// statemachine.DefaultJobOptions for the options not given. idx prefixes
// error messages inside a batch.
func (r *enqueueRequest) toJob(rt *router.Router, maxPayload int, idx string) (statemachine.Job, *apiError) {
	wrap := func(e *apiError) *apiError {
		if e != nil && idx != "" {
			e.msg = idx + ": " + e.msg
		}
		return e
	}
	j := statemachine.Job{JobOptions: statemachine.DefaultJobOptions()}
	if r.Queue == nil && r.Chain != nil && len(r.Chain.Steps) > 0 {
		r.Queue = r.Chain.Steps[0].Queue // a chain's job runs its first step
	}
	if r.Queue == nil {
		return j, wrap(invalid("field \"queue\" is required"))
	}
	if err := router.ValidateQueueName(*r.Queue); err != nil {
		return j, wrap(invalid("field \"queue\": %v", err))
	}
	j.Queue = *r.Queue
	switch {
	case len(r.Payload) == 0:
		j.Payload = []byte("{}")
	case len(r.Payload) > maxPayload:
		return j, wrap(codePayloadTooLarge.err(fmt.Sprintf("payload is %d bytes, over the %d-byte limit", len(r.Payload), maxPayload)))
	default:
		j.Payload = r.Payload
	}
	if p, set, err := parsePriority(r.Priority); err != nil {
		return j, wrap(invalid("field \"priority\": %v", err))
	} else if set {
		j.Priority = p
	}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 || *r.MaxRetries > maxRetriesLimit {
			return j, wrap(invalid("field \"max_retries\" must be 0–%d", maxRetriesLimit))
		}
		j.MaxRetries = uint32(*r.MaxRetries)
	}
	if r.RetryBackoff != nil {
		b, ok := statemachine.ParseBackoff(*r.RetryBackoff)
		if !ok {
			return j, wrap(invalid("field \"retry_backoff\": unknown value %q (use none, fixed, linear or exponential)", *r.RetryBackoff))
		}
		j.Backoff = b
	}
	var err *apiError
	if r.RetryBaseDelay != nil {
		if j.BaseDelayMs, err = parseDuration("retry_base_delay", *r.RetryBaseDelay, true); err != nil {
			return j, wrap(err)
		}
		j.BaseDelay = *r.RetryBaseDelay
	}
	if r.RetryMaxDelay != nil {
		if j.MaxDelayMs, err = parseDuration("retry_max_delay", *r.RetryMaxDelay, false); err != nil {
			return j, wrap(err)
		}
		j.MaxDelay = *r.RetryMaxDelay
	}
	if j.BaseDelayMs > j.MaxDelayMs {
		return j, wrap(invalid("retry_base_delay must not exceed retry_max_delay"))
	}
	if r.LeaseDuration != nil {
		if *r.LeaseDuration < 1 || *r.LeaseDuration > maxLeaseSeconds {
			return j, wrap(invalid("field \"lease_duration\" must be 1–%d seconds", maxLeaseSeconds))
		}
		j.LeaseSeconds = uint32(*r.LeaseDuration)
	}
	if r.ScheduledAt != nil {
		t, perr := time.Parse(time.RFC3339Nano, *r.ScheduledAt)
		if perr != nil {
			return j, wrap(invalid("field \"scheduled_at\": %q is not an RFC 3339 timestamp", *r.ScheduledAt))
		}
		j.ScheduledAt = t.UnixNano()
	}
	if r.ExpireAfter != nil {
		if j.ExpireAfterMs, err = parseDuration("expire_after", *r.ExpireAfter, false); err != nil {
			return j, wrap(err)
		}
		j.ExpireAfter = *r.ExpireAfter
	}
	if r.Tags != nil {
		if len(r.Tags) > maxTags {
			return j, wrap(invalid("at most %d tags", maxTags))
		}
		for k, v := range r.Tags {
			if k == "" || len(k) > maxTagKey || len(v) > maxTagValue {
				return j, wrap(invalid("tag keys must be 1–%d bytes and values at most %d bytes", maxTagKey, maxTagValue))
			}
		}
		if len(r.Tags) > 0 {
			j.Tags, _ = json.Marshal(r.Tags, json.Deterministic(true)) // sorted keys
		}
	}
	if r.Chain != nil {
		c, err := r.Chain.chain(rt, j.Queue, maxPayload)
		if err != nil {
			return j, wrap(err)
		}
		j.Chain = c
	}
	if r.UniqueKey != nil {
		if *r.UniqueKey == "" || len(*r.UniqueKey) > maxUniqueKey {
			return j, wrap(invalid("field \"unique_key\" must be 1–%d bytes", maxUniqueKey))
		}
		j.UniqueKey = *r.UniqueKey
	}
	if r.UniquePeriod != nil {
		if r.UniqueKey == nil {
			return j, wrap(invalid("field \"unique_period\" needs a \"unique_key\""))
		}
		if *r.UniquePeriod < 0 || *r.UniquePeriod > maxUniquePeriod {
			return j, wrap(invalid("field \"unique_period\" must be 0–%d seconds (0: until the job finishes)", maxUniquePeriod))
		}
		j.UniquePeriod = *r.UniquePeriod
	}
	if len(r.DependsOn) > maxDependsOn {
		return j, wrap(invalid("at most %d jobs in \"depends_on\"", maxDependsOn))
	}
	seen := map[string]bool{}
	for i, id := range r.DependsOn {
		sh, err := rt.ShardForJob(id)
		if err != nil {
			return j, wrap(invalid("depends_on[%d]: %q is not a job id", i, id))
		}
		if !seen[id] {
			seen[id] = true
			j.DependsOn = append(j.DependsOn, statemachine.Dep{ID: id, Shard: uint32(sh)})
		}
	}
	return j, nil
}

type batchEnqueueRequest struct {
	Jobs  []enqueueRequest `json:"jobs"`
	Batch *batchRequest    `json:"batch"`
}

type batchRequest struct {
	CallbackQueue   *string        `json:"callback_queue"`
	CallbackPayload jsontext.Value `json:"callback_payload"`
}

// parsePriority reads the "priority" of a request: a tier name, or the
// earlier Corvo's number (0 critical, 1 high, 2 normal), so producers
// written for it keep working; answers always name the tier. set is false
// when the field is absent or null. Every priority a request carries
// (enqueue, batch enqueue, schedules, bulk change_priority, search
// filters) goes through it.
func parsePriority(v jsontext.Value) (p statemachine.Priority, set bool, err error) {
	if len(v) == 0 || string(v) == "null" {
		return 0, false, nil
	}
	switch v.Kind() {
	case '"':
		var name string
		if json.Unmarshal(v, &name) == nil {
			if p, ok := statemachine.ParsePriority(name); ok {
				return p, true, nil
			}
		}
	case '0':
		if n, err := strconv.ParseUint(string(v), 10, 8); err == nil && n <= uint64(statemachine.PriorityNormal) {
			return statemachine.Priority(n), true, nil
		}
	}
	if len(v) > 40 {
		v = append(v[:37:37], "..."...)
	}
	return 0, false, fmt.Errorf("unknown value %s (use critical, high or normal, or 0, 1 or 2)", v)
}

// parsePriorityName reads a priority the SDK's Priority type decoded (a
// name; numbers became names): nil is unset.
func parsePriorityName(v *corvo.Priority) (p statemachine.Priority, set bool, err error) {
	if v == nil {
		return 0, false, nil
	}
	if p, ok := statemachine.ParsePriority(string(*v)); ok {
		return p, true, nil
	}
	return 0, false, fmt.Errorf("unknown value %q (use critical, high or normal, or 0, 1 or 2)", string(*v))
}

// chainTargetRequest is a step or handler of a chain.
type chainTargetRequest struct {
	Queue   *string        `json:"queue"`
	Payload jsontext.Value `json:"payload"`
}

type chainRequest struct {
	Steps     []chainTargetRequest `json:"steps"`
	OnFailure *chainTargetRequest  `json:"on_failure"`
	OnExit    *chainTargetRequest  `json:"on_exit"`
}

const maxChainSteps = 100

func (t *chainTargetRequest) target(rt *router.Router, field string, maxPayload int) (statemachine.ChainTarget, *apiError) {
	if t.Queue == nil {
		return statemachine.ChainTarget{}, invalid("%s: field \"queue\" is required", field)
	}
	if err := router.ValidateQueueName(*t.Queue); err != nil {
		return statemachine.ChainTarget{}, invalid("%s: %v", field, err)
	}
	if len(t.Payload) > maxPayload {
		return statemachine.ChainTarget{}, codePayloadTooLarge.err(field + ": payload over the limit")
	}
	return statemachine.ChainTarget{Queue: *t.Queue, Shard: uint32(rt.ShardForQueue(*t.Queue)), Payload: rawOrNil(t.Payload)}, nil
}

// chain validates a chain and builds the job's chain state (its ID is set
// by the caller once the job has one).
func (r *chainRequest) chain(rt *router.Router, queue string, maxPayload int) (*statemachine.Chain, *apiError) {
	if len(r.Steps) == 0 || len(r.Steps) > maxChainSteps {
		return nil, invalid("field \"chain.steps\" must hold 1–%d steps", maxChainSteps)
	}
	c := &statemachine.Chain{}
	for i := range r.Steps {
		t, err := r.Steps[i].target(rt, fmt.Sprintf("chain.steps[%d]", i), maxPayload)
		if err != nil {
			return nil, err
		}
		c.Steps = append(c.Steps, t)
	}
	if c.Steps[0].Queue != queue {
		return nil, invalid("chain.steps[0].queue (%q) must be the job's queue (%q): the first step is the job itself", c.Steps[0].Queue, queue)
	}
	for name, h := range map[string]*chainTargetRequest{"on_failure": r.OnFailure, "on_exit": r.OnExit} {
		if h == nil {
			continue
		}
		t, err := h.target(rt, "chain."+name, maxPayload)
		if err != nil {
			return nil, err
		}
		if name == "on_failure" {
			c.OnFailure = &t
		} else {
			c.OnExit = &t
		}
	}
	c.Config, _ = json.Marshal(r, json.Deterministic(true))
	return c, nil
}

type fetchRequest struct {
	Queues   []string `json:"queues"`
	WorkerID string   `json:"worker_id"`
	Hostname string   `json:"hostname"`
	Timeout  *float64 `json:"timeout"`
	Count    *int     `json:"count"`
}

func (r *fetchRequest) validate() (time.Duration, int, *apiError) {
	if len(r.Queues) == 0 {
		return 0, 0, invalid("field \"queues\" must list at least one queue")
	}
	if len(r.Queues) > defaultFetchQueueMax {
		return 0, 0, invalid("at most %d queues per fetch", defaultFetchQueueMax)
	}
	for _, q := range r.Queues {
		if err := router.ValidateQueueName(q); err != nil {
			return 0, 0, invalid("field \"queues\": %v", err)
		}
	}
	if len(r.WorkerID) > maxWorkerIDLen || len(r.Hostname) > maxWorkerIDLen {
		return 0, 0, invalid("worker_id and hostname must be at most %d bytes", maxWorkerIDLen)
	}
	var timeout time.Duration
	if r.Timeout != nil {
		t := *r.Timeout
		if t < 0 || t > maxFetchTimeout || math.IsNaN(t) {
			return 0, 0, invalid("field \"timeout\" must be 0–%d seconds", maxFetchTimeout)
		}
		timeout = time.Duration(t * float64(time.Second))
	}
	count := 1
	if r.Count != nil {
		if *r.Count < 1 || *r.Count > maxFetchCount {
			return 0, 0, invalid("field \"count\" must be 1–%d", maxFetchCount)
		}
		count = *r.Count
	}
	return timeout, count, nil
}

type holderFields struct {
	WorkerID string  `json:"worker_id"`
	Attempt  *uint32 `json:"attempt"`
}

// leaseRequired is the error for a request without the lease's attempt
// under Config.StrictLeases.
func leaseRequired(what string) *apiError {
	return codeLeaseRequired.errf("%s must name the lease's \"attempt\" (the server runs with --strict-leases)", what)
}

// noAttempt reports whether a request names no lease: attempts start at
// 1, and the state machine does not check a 0.
func noAttempt(a *uint32) bool { return a == nil || *a == 0 }

func (h holderFields) holder() statemachine.Holder {
	out := statemachine.Holder{WorkerID: h.WorkerID}
	if h.Attempt != nil {
		out.Attempt = *h.Attempt
	}
	return out
}

type ackRequest struct {
	Result     jsontext.Value `json:"result"`
	StepStatus *string        `json:"step_status"`
	holderFields
}

func (r *ackRequest) stepStatus() string {
	if r.StepStatus == nil {
		return ""
	}
	return *r.StepStatus
}

func (r *ackRequest) validate() *apiError {
	if r.StepStatus != nil && *r.StepStatus != "continue" && *r.StepStatus != "exit" {
		return invalid("field \"step_status\": unknown value %q (use continue or exit)", *r.StepStatus)
	}
	return nil
}

type ackBatchItem struct {
	JobID *string `json:"job_id"`
	ackRequest
}

type ackBatchRequest struct {
	Acks []ackBatchItem `json:"acks"`
}

type failRequest struct {
	Error      *string        `json:"error"`
	Backtrace  string         `json:"backtrace"`
	Checkpoint jsontext.Value `json:"checkpoint"`
	holderFields
}

func (r *failRequest) validate() *apiError {
	if r.Error == nil {
		return invalid("field \"error\" is required")
	}
	if len(*r.Error) > maxErrorText || len(r.Backtrace) > maxErrorText {
		return invalid("error and backtrace must be at most %d bytes each", maxErrorText)
	}
	return nil
}

type heartbeatJob struct {
	Progress   jsontext.Value `json:"progress"`
	Checkpoint jsontext.Value `json:"checkpoint"`
	Attempt    *uint32        `json:"attempt"` // the lease's; a wrong one: lost
}

type heartbeatRequest struct {
	WorkerID string                  `json:"worker_id"`
	Jobs     map[string]heartbeatJob `json:"jobs"`
}

func (r *heartbeatRequest) sortedIDs() []string {
	ids := make([]string, 0, len(r.Jobs))
	for id := range r.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
