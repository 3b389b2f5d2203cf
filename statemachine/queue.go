package statemachine

// QueueStats counts a queue's jobs by state, plus running totals. It is
// kept exact inside the state machine (key qs|{queue}).
type QueueStats struct {
	Counts [StateHeld + 1]int64 // indexed by State
	// Running totals since the queue was first seen.
	Enqueued  int64
	Completed int64
	Failed    int64 // failed attempts, including reclaimed leases
	Dead      int64
}

func (s *QueueStats) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(1)
	e.uvarint(uint64(len(s.Counts)))
	for _, c := range s.Counts {
		e.varint(c)
	}
	e.varint(s.Enqueued)
	e.varint(s.Completed)
	e.varint(s.Failed)
	e.varint(s.Dead)
	return e.b
}

func (s *QueueStats) decode(d *dec) {
	if d.u8() != 1 {
		d.fail()
		return
	}
	n := d.uvarint()
	for i := uint64(0); i < n && d.err == nil; i++ {
		c := d.varint()
		if i < uint64(len(s.Counts)) {
			s.Counts[i] = c
		}
	}
	s.Enqueued = d.varint()
	s.Completed = d.varint()
	s.Failed = d.varint()
	s.Dead = d.varint()
}

// QueueConfig is a queue's settings (key qc|{queue}).
type QueueConfig struct {
	Paused bool
	// MaxConcurrency caps the queue's active jobs across every worker (0:
	// no cap; 1: a singleton queue).
	MaxConcurrency uint32
	// RateLimit jobs may be fetched in any RateWindowMs window (0: no
	// throttle).
	RateLimit    uint32
	RateWindowMs int64
	// Provider names the provider of the queue's namespace whose limits
	// the queue shares (provider.go; "": none).
	Provider string
}

func (c *QueueConfig) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(1)
	e.boolean(c.Paused)
	e.uvarint(uint64(c.MaxConcurrency))
	e.uvarint(uint64(c.RateLimit))
	e.varint(c.RateWindowMs)
	if c.Provider != "" { // appended (wire.go, rules 2 and 6)
		e.str(c.Provider)
	}
	return e.b
}

func (c *QueueConfig) decode(d *dec) {
	if d.u8() != 1 {
		d.fail()
		return
	}
	c.Paused = d.boolean()
	c.MaxConcurrency = uint32(d.uvarint())
	c.RateLimit = uint32(d.uvarint())
	c.RateWindowMs = d.varint()
	if d.more() {
		c.Provider = d.str()
	}
}

// QueueInfo is a queue's stats and settings as a lookup returns them.
type QueueInfo struct {
	Name   string
	Stats  QueueStats
	Config QueueConfig
}

// BackoffDelayMs is the delay before retrying after failed attempt number
// attempt (1-based), per DECISIONS.md: exponential base·2^(attempt−1),
// linear base·attempt, fixed base, none 0; capped at maxMs when maxMs > 0.
func BackoffDelayMs(b Backoff, baseMs, maxMs int64, attempt uint32) int64 {
	if attempt < 1 {
		attempt = 1
	}
	var d int64
	switch b {
	case BackoffNone:
		return 0
	case BackoffFixed:
		d = baseMs
	case BackoffLinear:
		d = baseMs * int64(attempt)
		if attempt > 0 && d/int64(attempt) != baseMs { // overflow
			d = maxMs
		}
	default: // exponential
		d = baseMs
		for i := uint32(1); i < attempt; i++ {
			if maxMs > 0 && d >= maxMs {
				break
			}
			if d > (1<<62)/2 {
				break
			}
			d *= 2
		}
	}
	if maxMs > 0 && d > maxMs {
		d = maxMs
	}
	return d
}

// total keeps the shard-wide active and due counts in step with a state
// count change.
func (s *StateMachine) total(st State, d int64) {
	switch st {
	case StateActive:
		s.active += d
	case StateScheduled, StateRetrying:
		s.due += d
	}
}
