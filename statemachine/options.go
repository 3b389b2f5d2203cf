package statemachine

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
// To add an option: a field here (and its default in DefaultJobOptions);
// its encoding at the end of Job.appendTo and Job.decode (the rule in
// wire.go); a copy in clone if it is a slice; a reset in inherited if a
// job another leads to must not carry it. Then the gateway's enqueue
// request (gateway/decode.go) and job document (gateway/render.go).
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
	return o
}

// clone copies the options' slices (decoded ones alias their input).
func (o JobOptions) clone() JobOptions {
	o.Tags = cloneBytes(o.Tags)
	return o
}
