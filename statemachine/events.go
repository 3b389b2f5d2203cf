package statemachine

import "unicode/utf8"

// EventType is the kind of a job lifecycle event (GET /api/v1/events).
type EventType uint8

// Event types. Each names the transition a job just made.
const (
	EventEnqueued  EventType = 1  // entered its queue's pending list: created pending, or became due, released, retried by hand
	EventStarted   EventType = 2  // fetched by a worker (a new attempt)
	EventCompleted EventType = 3  // acked
	EventFailed    EventType = 4  // an attempt failed (fail, or its lease expired)
	EventRetrying  EventType = 5  // after a failure: another attempt follows (state retrying, or pending without backoff)
	EventDead      EventType = 6  // dead (out of attempts, expired, rejected, a dependency failed)
	EventCancelled EventType = 7  // cancelled
	EventProgress  EventType = 8  // a heartbeat reported progress
	EventScheduled EventType = 9  // created with a run time in the future
	EventHeld      EventType = 10 // created waiting on its dependencies
	EventMoved     EventType = 11 // re-filed under another queue (across shards: under a new ID)
	EventDeleted   EventType = 12 // deleted (by hand, with its queue, or by retention)
	// EventBudgetExceeded: enqueued while a budget with on_exceed
	// alert_only was spent (the job is pending as usual).
	EventBudgetExceeded EventType = 13
)

var eventNames = [...]string{EventEnqueued: "enqueued", EventStarted: "started", EventCompleted: "completed",
	EventFailed: "failed", EventRetrying: "retrying", EventDead: "dead", EventCancelled: "cancelled",
	EventProgress: "progress", EventScheduled: "scheduled", EventHeld: "held", EventMoved: "moved", EventDeleted: "deleted",
	EventBudgetExceeded: "budget_exceeded"}

func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "unknown"
}

// ParseEventType maps an event type name to its EventType.
func ParseEventType(name string) (EventType, bool) {
	for i, n := range eventNames {
		if n != "" && n == name {
			return EventType(i), true
		}
	}
	return 0, false
}

// Bounds on what an event carries, so a ring of them stays small.
const (
	eventErrorMax    = 1024
	eventProgressMax = 4096
)

// JobEvent is one lifecycle transition, in apply order. (Index, Pos) is
// its place in the shard's history: the same on every replica and every
// replay, whatever the Update batching.
type JobEvent struct {
	Index     uint64 // the Raft entry that made it
	Pos       uint32 // its order among the entry's events
	Type      EventType
	JobID     string
	Queue     string
	FromQueue string // moved: the queue it left
	MovedTo   string // moved to another shard: the job's new ID
	State     State  // the job's state after the event (deleted: the state it was deleted in)
	Attempt   uint32
	At        int64 // Unix ns, the entry's time
	WorkerID  string
	Error     string // failed: the error (first 1 KiB)
	Reason    string // dead, cancelled: why
	Progress  []byte // progress: the reported JSON (omitted above 4 KiB)
	DueAt     int64  // retrying, scheduled: when it becomes pending
}

// event records a transition of j (EmitEvents only).
func (a *applier) event(t EventType, j *Job, st *JobState) *JobEvent {
	if !a.s.cfg.EmitEvents {
		return nil
	}
	e := JobEvent{Index: a.index, Pos: a.evPos, Type: t, JobID: j.ID, Queue: j.Queue, At: a.now}
	a.evPos++
	if st != nil {
		e.State, e.Attempt, e.WorkerID = st.State, st.Attempt, st.WorkerID
		switch t {
		case EventDead, EventCancelled:
			e.Reason = st.Reason
		case EventRetrying, EventScheduled:
			e.DueAt = st.DueAt
			if st.State == StatePending {
				e.DueAt = a.now
			}
		}
	}
	a.events = append(a.events, e)
	return &a.events[len(a.events)-1]
}

// truncUTF8 cuts s to at most n bytes on a rune boundary.
func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
