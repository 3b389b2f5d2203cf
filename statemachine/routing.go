package statemachine

import "slices"

// Model routing (issue 20): a job enqueued with "routing" names the models
// a worker may call for it — the preferred one first, then fallbacks — and
// a strategy that orders them into the job's try order. The job's state
// holds its place in that order (JobState.RouteIndex): a fetch hands the
// worker the model at that place (the target), and a fail with
// ProviderError moves the job to the next model and back to pending at
// once, without counting against max_retries (JobState.RouteFallbacks).
// A fail on the last model, or any fail without ProviderError, is an
// ordinary failure (retries, backoff, dead); the attempt after it starts
// again from the first model of the order.

// RouteStrategy orders a job's models.
type RouteStrategy uint8

const (
	// RouteFallbackOnError tries the models in the order given.
	RouteFallbackOnError RouteStrategy = iota
	// RouteRoundRobin rotates the order by the queue's enqueue count, so
	// successive jobs of a queue start at successive models.
	RouteRoundRobin
	// RouteLowestCost orders the models by their price, lowest first
	// (ties keep the order given).
	RouteLowestCost
)

var routeStrategyNames = [...]string{"fallback_on_error", "round_robin", "lowest_cost"}

func (s RouteStrategy) String() string {
	if int(s) < len(routeStrategyNames) {
		return routeStrategyNames[s]
	}
	return "unknown"
}

// ParseRouteStrategy reads a strategy's name.
func ParseRouteStrategy(name string) (RouteStrategy, bool) {
	i := slices.Index(routeStrategyNames[:], name)
	return RouteStrategy(i), i >= 0
}

// MaxRouteModels bounds a job's models (prefer and fallbacks together).
const MaxRouteModels = 16

// Routing is a job's "routing" option.
type Routing struct {
	Strategy RouteStrategy
	// Models: the preferred model, then the fallbacks, as sent.
	Models []string
	// PriceNanos: with RouteLowestCost, each model's price (1e-9 USD per
	// unit the sender chose — only the order matters), aligned with
	// Models; empty otherwise.
	PriceNanos []int64
	// Start: with RouteRoundRobin, the place in Models the order starts
	// at; set by the state machine at enqueue (the queue's enqueue count
	// modulo len(Models)).
	Start uint32
}

// Order is the job's try order: Models arranged by the strategy.
func (r *Routing) Order() []string {
	n := len(r.Models)
	if n == 0 {
		return nil
	}
	switch r.Strategy {
	case RouteRoundRobin:
		s := int(r.Start) % n
		return append(slices.Clone(r.Models[s:]), r.Models[:s]...)
	case RouteLowestCost:
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		price := func(i int) int64 {
			if i < len(r.PriceNanos) {
				return r.PriceNanos[i]
			}
			return 0
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			pa, pb := price(a), price(b)
			switch {
			case pa < pb:
				return -1
			case pa > pb:
				return 1
			}
			return 0
		})
		out := make([]string, n)
		for i, k := range idx {
			out[i] = r.Models[k]
		}
		return out
	default:
		return slices.Clone(r.Models)
	}
}

// Target is the model at place i of the try order ("" when out of range).
func (r *Routing) Target(i uint32) string {
	o := r.Order()
	if int(i) < len(o) {
		return o[i]
	}
	return ""
}

func (r *Routing) append(e *enc) {
	e.u8(uint8(r.Strategy))
	e.uvarint(uint64(len(r.Models)))
	for _, m := range r.Models {
		e.str(m)
	}
	e.uvarint(uint64(len(r.PriceNanos)))
	for _, p := range r.PriceNanos {
		e.varint(p)
	}
	e.uvarint(uint64(r.Start))
}

func (r *Routing) decode(d *dec) {
	r.Strategy = RouteStrategy(d.u8())
	n := d.uvarint()
	if n > MaxRouteModels {
		d.fail()
		return
	}
	r.Models = make([]string, n)
	for i := range r.Models {
		r.Models[i] = d.str()
	}
	n = d.uvarint()
	if n > MaxRouteModels {
		d.fail()
		return
	}
	if n > 0 {
		r.PriceNanos = make([]int64, n)
		for i := range r.PriceNanos {
			r.PriceNanos[i] = d.varint()
		}
	}
	r.Start = uint32(d.uvarint())
}

func (r *Routing) clone() *Routing {
	if r == nil {
		return nil
	}
	c := *r
	c.Models = slices.Clone(r.Models)
	c.PriceNanos = slices.Clone(r.PriceNanos)
	return &c
}

// routed reports whether a job has a routing with models.
func routed(j *Job) bool { return j.Routing != nil && len(j.Routing.Models) > 0 }

// routeFallback moves a job that failed with a provider error to the next
// model of its order and back to pending at once, when there is a next
// model; it reports whether it did. The lease is already released and the
// attempt's error record je made.
func (a *applier) routeFallback(j *Job, st *JobState, je *JobError) (Result, bool) {
	if !routed(j) || st.CancelRequested || a.expired(j) || int(st.RouteIndex)+1 >= len(j.Routing.Models) {
		return Result{}, false
	}
	st.RouteIndex++
	st.RouteFallbacks++
	st.State, st.DueAt = StatePending, 0
	je.RetryAt = a.now
	a.storeError(j.ID, st.Errors, je)
	a.putState(j, st)
	a.addPending(j)
	a.move(j.Queue, StateActive, StatePending)
	a.event(EventRetrying, j, st)
	view := JobView{Job: *j, State: *st}
	return Result{State: StatePending, NextAttemptAt: a.now, AttemptsRemaining: view.AttemptsRemaining()}, true
}
