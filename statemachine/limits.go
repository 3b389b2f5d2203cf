package statemachine

import "math"

// fetchRoom is how many jobs queue q may hand out now under its concurrency
// cap and throttle (math.MaxInt: unlimited).
func (a *applier) fetchRoom(q string) int {
	c := a.config(q)
	room := math.MaxInt
	if c.MaxConcurrency > 0 {
		room = int(c.MaxConcurrency) - int(a.stats(q).Counts[StateActive])
	}
	if c.RateLimit > 0 {
		if r := int(c.RateLimit) - len(a.rateWindow(q, c)); r < room {
			room = r
		}
	}
	return max(room, 0)
}

// rateWindow returns the queue's fetch times inside its window, dropping
// (and deleting) older ones.
func (a *applier) rateWindow(q string, c *QueueConfig) []int64 {
	times, ok := a.s.rates[q]
	if !ok {
		times = a.loadRates(q)
	}
	cutoff := a.now - c.RateWindowMs*1e6 // times ≤ cutoff are outside the window
	drop := 0
	for drop < len(times) && times[drop] <= cutoff {
		drop++
	}
	if drop > 0 {
		times = times[drop:]
		if err := a.b.DeleteRange(ratePrefix(q), rateKey(q, cutoff+1, 0), nil); err != nil {
			a.fail(err)
		}
	}
	a.s.rates[q] = times
	return times
}

func (a *applier) loadRates(q string) []int64 {
	pfx := ratePrefix(q)
	var times []int64
	a.eachKey(pfx, func(k, _ []byte) bool {
		if at, _, ok := splitTimeIndexKey(string(pfx), k); ok {
			times = append(times, at)
		}
		return true
	})
	return times
}

// recordFetch notes one job handed out from a throttled queue or one
// linked to a provider.
func (a *applier) recordFetch(q string) {
	a.recordProviderFetch(q)
	c := a.config(q)
	if c.RateLimit == 0 {
		return
	}
	a.rateSeq++
	a.set(rateKey(q, a.now, a.index<<20|uint64(a.rateSeq)), nil)
	a.s.rates[q] = append(a.rateWindow(q, c), a.now)
}

// blockedUntil is the QueueSignal.BlockedUntil of a queue with pending jobs.
// It runs once per Update (not per entry), so it must change nothing: how
// entries are grouped into Updates must never show in the state.
func (a *applier) blockedUntil(q string) int64 {
	c := a.config(q)
	if c.MaxConcurrency > 0 && a.stats(q).Counts[StateActive] >= int64(c.MaxConcurrency) {
		return math.MaxInt64
	}
	// Both the queue's throttle and its provider must let it: blocked
	// until the later of the two frees.
	until := a.providerBlockedUntil(q)
	if until == math.MaxInt64 {
		return until
	}
	return max(until, a.throttledUntil(q, c))
}

// throttledUntil is when the queue's own throttle window frees (0: it
// does now).
func (a *applier) throttledUntil(q string, c *QueueConfig) int64 {
	if c.RateLimit > 0 {
		times, ok := a.s.rates[q]
		if !ok {
			times = a.loadRates(q)
		}
		cutoff := a.now - c.RateWindowMs*1e6
		inWindow := 0
		for _, t := range times {
			if t > cutoff {
				inWindow++
			}
		}
		if inWindow >= int(c.RateLimit) {
			return times[len(times)-int(c.RateLimit)] + c.RateWindowMs*1e6 + 1
		}
	}
	return 0
}

func (a *applier) setLimits(o *SetLimitsOp) Result {
	c := a.config(o.Queue)
	if o.SetConcurrency {
		c.MaxConcurrency = o.MaxConcurrency
	}
	if o.SetThrottle {
		c.RateLimit, c.RateWindowMs = o.RateLimit, o.RateWindowMs
		if o.RateLimit == 0 {
			c.RateWindowMs = 0
			delete(a.s.rates, o.Queue)
			pfx := ratePrefix(o.Queue)
			if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
				a.fail(err)
			}
		}
	}
	a.set(queueCfgKey(o.Queue), c.appendTo(nil))
	a.stats(o.Queue)
	a.dirty[o.Queue] = struct{}{}
	a.ready[o.Queue] = struct{}{} // a raised limit may unblock waiting fetches
	return Result{}
}
