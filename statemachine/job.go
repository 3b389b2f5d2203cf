package statemachine

import "fmt"

// State is a job's lifecycle state. Values are stored; never renumber.
type State uint8

// Job states (spec 000 "Job states", spec 001 for held).
const (
	StatePending   State = 1
	StateScheduled State = 2
	StateActive    State = 3
	StateRetrying  State = 4
	StateCompleted State = 5
	StateDead      State = 6
	StateCancelled State = 7
	StateHeld      State = 8
)

var stateNames = [...]string{
	StatePending: "pending", StateScheduled: "scheduled", StateActive: "active",
	StateRetrying: "retrying", StateCompleted: "completed", StateDead: "dead",
	StateCancelled: "cancelled", StateHeld: "held",
}

func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseState maps a state name to its State.
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if n != "" && n == name {
			return State(i), true
		}
	}
	return 0, false
}

// Terminal reports whether no worker will touch the job again on its own.
func (s State) Terminal() bool {
	return s == StateCompleted || s == StateDead || s == StateCancelled
}

// Priority is a job's tier; lower is fetched first.
type Priority uint8

// Priority tiers (spec 000 "Priority system").
const (
	PriorityCritical Priority = 0
	PriorityHigh     Priority = 1
	PriorityNormal   Priority = 2
)

var priorityNames = [...]string{"critical", "high", "normal"}

func (p Priority) String() string {
	if int(p) < len(priorityNames) {
		return priorityNames[p]
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// ParsePriority maps a tier name to its Priority.
func ParsePriority(name string) (Priority, bool) {
	for i, n := range priorityNames {
		if n == name {
			return Priority(i), true
		}
	}
	return 0, false
}

// Backoff is a retry backoff strategy.
type Backoff uint8

// Backoff strategies (spec 000 "Retry and backoff").
const (
	BackoffNone        Backoff = 1
	BackoffFixed       Backoff = 2
	BackoffLinear      Backoff = 3
	BackoffExponential Backoff = 4
)

var backoffNames = [...]string{BackoffNone: "none", BackoffFixed: "fixed", BackoffLinear: "linear", BackoffExponential: "exponential"}

func (b Backoff) String() string {
	if int(b) < len(backoffNames) && backoffNames[b] != "" {
		return backoffNames[b]
	}
	return fmt.Sprintf("backoff(%d)", uint8(b))
}

// ParseBackoff maps a strategy name to its Backoff.
func ParseBackoff(name string) (Backoff, bool) {
	for i, n := range backoffNames {
		if n != "" && n == name {
			return Backoff(i), true
		}
	}
	return 0, false
}

// Job option defaults (DECISIONS.md: max_retries 3; exponential backoff
// from 5s, capped at 10m; a 60 s lease; normal priority). They apply to
// every job created without the option: a job the gateway enqueues, a
// batch callback, a cron run.
const (
	DefaultPriority     = PriorityNormal
	DefaultMaxRetries   = 3
	DefaultBackoff      = BackoffExponential
	DefaultBaseDelayMs  = 5000
	DefaultMaxDelayMs   = 600000
	DefaultLeaseSeconds = 60
)

// JobOptions are the options a job is created with: what POST /enqueue
// takes beside its queue, payload and links to other jobs (chain,
// depends_on, batch). Job embeds them, so that code making a job from
// another copies them in one assignment and a new option cannot be left
// behind.
//
// To add an option, in this file: a field here and its default in
// DefaultJobOptions; its encoding at the end of Job.appendTo and
// Job.decode (the rule in wire.go); a copy in clone if it is a slice; a
// reset in inherited if a job another leads to must not carry it. Then
// the gateway's enqueue request (gateway/decode.go, whose
// TestEnqueueJobOptions fails until it sets the field) and job document
// (gateway/render.go).
type JobOptions struct {
	Priority      Priority
	MaxRetries    uint32
	Backoff       Backoff
	BaseDelayMs   int64
	MaxDelayMs    int64
	BaseDelay     string // as sent, e.g. "5s"; "" when defaulted
	MaxDelay      string
	LeaseSeconds  uint32
	ScheduledAt   int64  // Unix ns; 0: run now
	ExpireAfter   string // as sent
	ExpireAfterMs int64
	Tags          []byte // raw JSON object, nil when none
	UniqueKey     string
	UniquePeriod  int64 // seconds
	// ResultSchema is the JSON Schema (2020-12) an ack's result must
	// satisfy (raw JSON, nil: none). The gateway validates (the state
	// machine only asks that it did: AckOp.SchemaChecked).
	ResultSchema []byte
	// CacheKey, when set, makes the job's result a cache entry of its
	// queue for CacheTTLms once it completes, and lets the job complete
	// at once from an entry younger than CacheTTLms (cache.go). The
	// gateway hashes it from the payload.
	CacheKey   string
	CacheTTLms int64
	// Routing names the models a worker may call for the job, in the
	// order its strategy gives (routing.go); nil: none.
	Routing *Routing
}

// DefaultJobOptions are the options of a job created without any.
func DefaultJobOptions() JobOptions {
	return JobOptions{
		Priority:     DefaultPriority,
		MaxRetries:   DefaultMaxRetries,
		Backoff:      DefaultBackoff,
		BaseDelayMs:  DefaultBaseDelayMs,
		MaxDelayMs:   DefaultMaxDelayMs,
		LeaseSeconds: DefaultLeaseSeconds,
	}
}

// inherited is what a job another leads to (a chain's next step or
// handler) is created with: every option but those that belong to the one
// job they were sent with — when it runs, when it expires, and its unique
// key.
func (o JobOptions) inherited() JobOptions {
	o.ScheduledAt = 0
	o.ExpireAfter, o.ExpireAfterMs = "", 0
	o.UniqueKey, o.UniquePeriod = "", 0
	o.ResultSchema = nil
	o.CacheKey, o.CacheTTLms = "", 0
	o.Routing = nil
	return o
}

// clone copies the options' slices (decoded ones alias their input).
func (o JobOptions) clone() JobOptions {
	o.Tags = cloneBytes(o.Tags)
	o.ResultSchema = cloneBytes(o.ResultSchema)
	o.Routing = o.Routing.clone()
	return o
}

// Job is the part of a job that is written once at enqueue (key j|{id}). The
// enqueue op carries it; the state machine fills CreatedAt, Seq and
// ExpireAt. Times are Unix nanoseconds, 0 meaning unset.
type Job struct {
	ID      string
	Queue   string
	Payload []byte // raw JSON
	JobOptions
	ExpireAt   int64 // CreatedAt + expire_after, set by the state machine
	BatchID    string
	CreatedAt  int64
	Seq        uint64 // shard-wide FIFO tiebreak: raft index<<24 | creation order in the entry
	BatchShard uint32 // the shard holding the batch record, when BatchID is set
	Chain      *Chain // nil unless the job is a step of a chain
	DependsOn  []Dep  // jobs that must complete before this one may run
	// A job completed from the cache at enqueue: the job whose result it
	// took, and that job's cost (what the hit saved).
	CachedFrom string
	SavedNanos int64
}

// Dep names a job another job waits for, with the shard it lives on.
type Dep struct {
	ID    string
	Shard uint32
}

// ChainTarget is a queue a chain may send work to, with its shard (the
// gateway routes; the state machine only follows).
type ChainTarget struct {
	Queue   string
	Shard   uint32
	Payload []byte // raw JSON; nil: none given
}

// Chain is a job's place in a sequential pipeline (spec 000 "job chain").
type Chain struct {
	ID        string // the first step's job ID
	Step      uint32 // this job's index in Steps
	Steps     []ChainTarget
	OnFailure *ChainTarget
	OnExit    *ChainTarget
	Config    []byte // the chain object as sent, for display
}

func (t *ChainTarget) append(e *enc) {
	e.str(t.Queue)
	e.uvarint(uint64(t.Shard))
	e.bytes(t.Payload)
}

func (t *ChainTarget) decode(d *dec) {
	t.Queue = d.str()
	t.Shard = uint32(d.uvarint())
	t.Payload = d.bytes()
}

func (c *Chain) append(e *enc) {
	e.str(c.ID)
	e.uvarint(uint64(c.Step))
	e.uvarint(uint64(len(c.Steps)))
	for i := range c.Steps {
		c.Steps[i].append(e)
	}
	for _, h := range []*ChainTarget{c.OnFailure, c.OnExit} {
		e.boolean(h != nil)
		if h != nil {
			h.append(e)
		}
	}
	e.bytes(c.Config)
}

func (c *Chain) decode(d *dec) {
	c.ID = d.str()
	c.Step = uint32(d.uvarint())
	n := d.uvarint()
	if n > 1000 {
		d.fail()
		return
	}
	c.Steps = make([]ChainTarget, n)
	for i := range c.Steps {
		c.Steps[i].decode(d)
	}
	for _, h := range []**ChainTarget{&c.OnFailure, &c.OnExit} {
		if d.boolean() {
			*h = &ChainTarget{}
			(*h).decode(d)
		}
	}
	c.Config = d.bytes()
}

// jobVersion is the first byte of every job record. It never changes: the
// record grows by appending fields (wire.go).
const jobVersion = 1

// appendTo writes the job record. Fields added from now on go at the end,
// after DependsOn, and are read back under d.more() (wire.go); the fields
// of JobOptions are spread over the record as they were added.
func (j *Job) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(jobVersion)
	e.str(j.ID)
	e.str(j.Queue)
	e.bytes(j.Payload)
	e.u8(uint8(j.Priority))
	e.uvarint(uint64(j.MaxRetries))
	e.u8(uint8(j.Backoff))
	e.varint(j.BaseDelayMs)
	e.varint(j.MaxDelayMs)
	e.str(j.BaseDelay)
	e.str(j.MaxDelay)
	e.uvarint(uint64(j.LeaseSeconds))
	e.varint(j.ScheduledAt)
	e.str(j.ExpireAfter)
	e.varint(j.ExpireAfterMs)
	e.varint(j.ExpireAt)
	e.bytes(j.Tags)
	e.str(j.UniqueKey)
	e.varint(j.UniquePeriod)
	e.str(j.BatchID)
	e.varint(j.CreatedAt)
	e.uvarint(j.Seq)
	e.uvarint(uint64(j.BatchShard))
	e.boolean(j.Chain != nil)
	if j.Chain != nil {
		j.Chain.append(&e)
	}
	e.uvarint(uint64(len(j.DependsOn)))
	for _, d := range j.DependsOn {
		e.str(d.ID)
		e.uvarint(uint64(d.Shard))
	}
	// Appended fields (wire.go), each left out while it and every later
	// one are empty.
	cache := j.CacheKey != "" || j.CacheTTLms != 0
	routing := j.Routing != nil
	cached := j.CachedFrom != "" || j.SavedNanos != 0 || routing
	if len(j.ResultSchema) > 0 || cache || cached {
		e.bytes(j.ResultSchema)
	}
	if cache || cached {
		e.str(j.CacheKey)
		e.varint(j.CacheTTLms)
	}
	if cached {
		e.str(j.CachedFrom)
		e.varint(j.SavedNanos)
	}
	if routing {
		e.boolean(true)
		j.Routing.append(&e)
	}
	return e.b
}

// decode reads a job record; d must end where the record ends (a Pebble
// value, a length-prefixed field, or EnqueueOp's bounded job).
func (j *Job) decode(d *dec) {
	if v := d.u8(); v != jobVersion {
		d.fail()
		return
	}
	j.ID = d.str()
	j.Queue = d.name()
	j.Payload = d.bytes()
	j.Priority = Priority(d.u8())
	j.MaxRetries = uint32(d.uvarint())
	j.Backoff = Backoff(d.u8())
	j.BaseDelayMs = d.varint()
	j.MaxDelayMs = d.varint()
	j.BaseDelay = d.str()
	j.MaxDelay = d.str()
	j.LeaseSeconds = uint32(d.uvarint())
	j.ScheduledAt = d.varint()
	j.ExpireAfter = d.str()
	j.ExpireAfterMs = d.varint()
	j.ExpireAt = d.varint()
	j.Tags = d.bytes()
	j.UniqueKey = d.str()
	j.UniquePeriod = d.varint()
	j.BatchID = d.str()
	j.CreatedAt = d.varint()
	j.Seq = d.uvarint()
	j.BatchShard = uint32(d.uvarint())
	if d.boolean() {
		j.Chain = &Chain{}
		j.Chain.decode(d)
	}
	n := d.uvarint()
	if n > 1000 {
		d.fail()
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		j.DependsOn = append(j.DependsOn, Dep{ID: d.str(), Shard: uint32(d.uvarint())})
	}
	if d.more() {
		j.ResultSchema = d.bytes()
	}
	if d.more() {
		j.CacheKey = d.str()
		j.CacheTTLms = d.varint()
	}
	if d.more() {
		j.CachedFrom = d.str()
		j.SavedNanos = d.varint()
	}
	if d.more() && d.boolean() {
		j.Routing = &Routing{}
		j.Routing.decode(d)
	}
}

// JobState is the small, mutable part of a job (key js|{id}). A pending job
// that was never touched after enqueue has none: its state is implied.
type JobState struct {
	State           State
	Attempt         uint32
	WorkerID        string
	Hostname        string
	LeaseExpiresAt  int64
	StartedAt       int64
	CompletedAt     int64
	FailedAt        int64
	DueAt           int64 // when a scheduled or retrying job becomes pending
	CancelRequested bool
	Progress        []byte // raw JSON
	Checkpoint      []byte // raw JSON
	Result          []byte // raw JSON
	Reason          string // why a job is dead or cancelled ("expired", …)
	Errors          uint32 // number of error records (je|)
	LastError       string
	DepsDone        uint32 // dependencies reported completed (a held job waiting on depends_on)
	ProgressAt      int64  // when Progress was reported (0: never, or before it was recorded)
	UsageKeys       uint32 // number of usage records (ju|, usage.go)
	CostNanos       int64  // the job's cost so far, the sum of its usage records (1e-9 USD)
	// Routed jobs (routing.go): the place of the current target in the
	// job's try order, and how many attempts were handed to a fallback
	// model after a provider error (they do not count against
	// max_retries).
	RouteIndex     uint32
	RouteFallbacks uint32
	// ScoreKeys is the number of score records (sj|, scores.go).
	ScoreKeys uint32
}

// stateVersion is the first byte of every state record; it never changes
// (wire.go).
const stateVersion = 1

func (s *JobState) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(stateVersion)
	e.u8(uint8(s.State))
	e.uvarint(uint64(s.Attempt))
	e.str(s.WorkerID)
	e.str(s.Hostname)
	e.varint(s.LeaseExpiresAt)
	e.varint(s.StartedAt)
	e.varint(s.CompletedAt)
	e.varint(s.FailedAt)
	e.varint(s.DueAt)
	e.boolean(s.CancelRequested)
	e.bytes(s.Progress)
	e.bytes(s.Checkpoint)
	e.bytes(s.Result)
	e.str(s.Reason)
	e.uvarint(uint64(s.Errors))
	e.str(s.LastError)
	e.uvarint(uint64(s.DepsDone))
	// Appended fields (wire.go). Each is left out while it and every
	// field after it are zero, so a state that never used them keeps its
	// earlier bytes; a field is written whenever a later one is.
	scores := s.ScoreKeys != 0
	route := s.RouteIndex != 0 || s.RouteFallbacks != 0 || scores
	usage := s.UsageKeys != 0 || s.CostNanos != 0 || route
	if s.ProgressAt != 0 || usage {
		e.varint(s.ProgressAt)
	}
	if usage {
		e.uvarint(uint64(s.UsageKeys))
		e.varint(s.CostNanos)
	}
	if route {
		e.uvarint(uint64(s.RouteIndex))
		e.uvarint(uint64(s.RouteFallbacks))
	}
	if scores {
		e.uvarint(uint64(s.ScoreKeys))
	}
	return e.b
}

func (s *JobState) decode(d *dec) {
	if v := d.u8(); v != stateVersion {
		d.fail()
		return
	}
	s.State = State(d.u8())
	s.Attempt = uint32(d.uvarint())
	s.WorkerID = d.str()
	s.Hostname = d.str()
	s.LeaseExpiresAt = d.varint()
	s.StartedAt = d.varint()
	s.CompletedAt = d.varint()
	s.FailedAt = d.varint()
	s.DueAt = d.varint()
	s.CancelRequested = d.boolean()
	s.Progress = d.bytes()
	s.Checkpoint = d.bytes()
	s.Result = d.bytes()
	s.Reason = d.str()
	s.Errors = uint32(d.uvarint())
	s.LastError = d.str()
	s.DepsDone = uint32(d.uvarint())
	if d.more() {
		s.ProgressAt = d.varint()
	}
	if d.more() {
		s.UsageKeys = uint32(d.uvarint())
		s.CostNanos = d.varint()
	}
	if d.more() {
		s.RouteIndex = uint32(d.uvarint())
		s.RouteFallbacks = uint32(d.uvarint())
	}
	if d.more() {
		s.ScoreKeys = uint32(d.uvarint())
	}
}

// JobError is one failed attempt (key je|{id}\x00{attempt}). StartedAt,
// WorkerID and RetryAt were appended (the first byte then went from 1 to
// 2, the last change made that way: records now grow by the rule in
// wire.go), so the job's timeline can be told from its records alone.
type JobError struct {
	Attempt   uint32
	Error     string
	Backtrace string
	At        int64
	StartedAt int64  // when the attempt started (0: unknown, an old record)
	WorkerID  string // the worker that held it
	RetryAt   int64  // when the next attempt became due (0: none followed)
}

// jobErrorVersion is the first byte error records are written with; 1
// marks records written before StartedAt existed, which end after At.
const jobErrorVersion = 2

func (e *JobError) appendTo(b []byte) []byte {
	w := enc{b: b}
	w.u8(jobErrorVersion)
	w.uvarint(uint64(e.Attempt))
	w.str(e.Error)
	w.str(e.Backtrace)
	w.varint(e.At)
	w.varint(e.StartedAt)
	w.str(e.WorkerID)
	w.varint(e.RetryAt)
	return w.b
}

func (e *JobError) decode(d *dec) {
	if v := d.u8(); v != 1 && v != jobErrorVersion {
		d.fail()
		return
	}
	e.Attempt = uint32(d.uvarint())
	e.Error = d.str()
	e.Backtrace = d.str()
	e.At = d.varint()
	if d.more() {
		e.StartedAt = d.varint()
		e.WorkerID = d.str()
		e.RetryAt = d.varint()
	}
}

// JobView is everything known about one job: what lookups and op results
// hand to the gateway.
type JobView struct {
	Job    Job
	State  JobState
	Errors []JobError
	Usage  []UsageRecord // its usage records, oldest first (lookups; not in op results)
	Scores []ScoreRecord // its scores, oldest first (lookups; not in op results)
}

// AttemptsRemaining follows DECISIONS.md: max_retries − attempt, never
// negative.
// Attempts handed to a fallback model after a provider error
// (JobState.RouteFallbacks) are not counted.
func (v *JobView) AttemptsRemaining() uint32 {
	used := v.State.Attempt - min(v.State.Attempt, v.State.RouteFallbacks)
	if used >= v.Job.MaxRetries {
		return 0
	}
	return v.Job.MaxRetries - used
}

func (v *JobView) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.bytes(v.Job.appendTo(nil))
	e.bytes(v.State.appendTo(nil))
	e.uvarint(uint64(len(v.Errors)))
	for i := range v.Errors {
		e.bytes(v.Errors[i].appendTo(nil))
	}
	return e.b
}

func (v *JobView) decode(d *dec) {
	jd := dec{b: d.bytes()}
	v.Job.decode(&jd)
	sd := dec{b: d.bytes()}
	v.State.decode(&sd)
	n := d.uvarint()
	if n > 1<<20 {
		d.fail()
		return
	}
	v.Errors = make([]JobError, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		ed := dec{b: d.bytes()}
		var je JobError
		je.decode(&ed)
		if ed.err != nil {
			d.fail()
			return
		}
		v.Errors = append(v.Errors, je)
	}
	if jd.err != nil || sd.err != nil {
		d.fail()
	}
}

// appendUsageScores appends a job's usage records, then its scores, to a
// record that carries them after a JobView (MoveInOp, ImportOp's job).
// They were appended later (wire.go): each list is left out while it and
// the later one are empty, so a job without them keeps its earlier bytes.
func appendUsageScores(e *enc, usage []UsageRecord, scores []ScoreRecord) {
	if len(usage) > 0 || len(scores) > 0 {
		e.uvarint(uint64(len(usage)))
		for i := range usage {
			e.bytes(usage[i].appendTo(nil))
		}
	}
	if len(scores) > 0 {
		e.uvarint(uint64(len(scores)))
		for i := range scores {
			e.bytes(scores[i].appendTo(nil))
		}
	}
}

// decodeUsageScores reads what appendUsageScores wrote: none of the lists
// when the record ends before them (written before their release).
func decodeUsageScores(d *dec) (usage []UsageRecord, scores []ScoreRecord) {
	if !d.more() {
		return nil, nil
	}
	n := d.uvarint()
	if n > 1<<20 || n > uint64(len(d.b)) {
		d.fail()
		return nil, nil
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var rec UsageRecord
		rd := dec{b: d.bytes()}
		rec.decode(&rd)
		if rd.err != nil {
			d.fail()
			return nil, nil
		}
		usage = append(usage, rec)
	}
	if !d.more() {
		return usage, nil
	}
	n = d.uvarint()
	if n > MaxScoresPerJob {
		d.fail()
		return nil, nil
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var rec ScoreRecord
		rd := dec{b: d.bytes()}
		rec.decode(&rd)
		if rd.err != nil {
			d.fail()
			return nil, nil
		}
		scores = append(scores, rec)
	}
	return usage, scores
}
