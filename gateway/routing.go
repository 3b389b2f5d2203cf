package gateway

import (
	"math"
	"slices"

	"github.com/corvohq/corvo/statemachine"
)

// Model routing (issue 20): "routing" on enqueue and batch items becomes
// the job's statemachine.Routing; fetch answers and the job document show
// the model the worker should call now (statemachine/routing.go has the
// rules).

type routingRequest struct {
	Prefer   *string            `json:"prefer"`
	Fallback []string           `json:"fallback"`
	Strategy *string            `json:"strategy"`
	Prices   map[string]float64 `json:"prices"` // lowest_cost: USD per model, in a unit of the sender's choosing
}

const (
	maxModelName = 128
	maxModelUSD  = 1e6
)

// apply validates a routing request and sets the job's routing (nothing
// when it is absent).
func (r *routingRequest) apply(j *statemachine.Job) *apiError {
	if r == nil {
		return nil
	}
	if r.Prefer == nil || *r.Prefer == "" {
		return invalid("field \"routing.prefer\" is required (the model to try first)")
	}
	models := append([]string{*r.Prefer}, r.Fallback...)
	if len(models) > statemachine.MaxRouteModels {
		return invalid("field \"routing\" names at most %d models (prefer and fallback together)", statemachine.MaxRouteModels)
	}
	for i, m := range models {
		if m == "" || len(m) > maxModelName {
			return invalid("field \"routing\": model names are 1–%d bytes", maxModelName)
		}
		if slices.Contains(models[:i], m) {
			return invalid("field \"routing\": model %q is named twice", m)
		}
	}
	rt := &statemachine.Routing{Models: models}
	if r.Strategy != nil {
		s, ok := statemachine.ParseRouteStrategy(*r.Strategy)
		if !ok {
			return invalid("field \"routing.strategy\": unknown value %q (use fallback_on_error, round_robin or lowest_cost)", *r.Strategy)
		}
		rt.Strategy = s
	}
	switch {
	case rt.Strategy == statemachine.RouteLowestCost:
		rt.PriceNanos = make([]int64, len(models))
		for i, m := range models {
			p, ok := r.Prices[m]
			if !ok {
				return invalid("field \"routing.prices\" must give a price for every model with \"lowest_cost\" (missing %q)", m)
			}
			if p < 0 || p > maxModelUSD || math.IsNaN(p) {
				return invalid("field \"routing.prices\": the price of %q must be 0–%g", m, maxModelUSD)
			}
			rt.PriceNanos[i] = int64(math.Round(p * statemachine.NanosPerUSD))
		}
		for m := range r.Prices {
			if !slices.Contains(models, m) {
				return invalid("field \"routing.prices\" names %q, which is neither prefer nor a fallback", m)
			}
		}
	case r.Prices != nil:
		return invalid("field \"routing.prices\" needs \"strategy\": \"lowest_cost\"")
	}
	j.Routing = rt
	return nil
}

// appendFetchedRouting writes a fetched job's "routing": the model to call
// now and its place in the job's try order.
func appendFetchedRouting(b []byte, v *statemachine.JobView) []byte {
	b = append(b, `{"target":`...)
	b = appendString(b, v.Job.Routing.Target(v.State.RouteIndex))
	b = append(b, `,"index":`...)
	b = appendInt(b, int64(v.State.RouteIndex))
	return append(b, '}')
}

// appendJobRouting writes the job document's "routing" (null without).
func appendJobRouting(b []byte, v *statemachine.JobView) []byte {
	r := v.Job.Routing
	if r == nil || len(r.Models) == 0 {
		return append(b, "null"...)
	}
	b = append(b, `{"prefer":`...)
	b = appendString(b, r.Models[0])
	b = append(b, `,"fallback":`...)
	b = appendStrings(b, r.Models[1:])
	b = append(b, `,"strategy":`...)
	b = appendString(b, r.Strategy.String())
	if len(r.PriceNanos) == len(r.Models) {
		b = append(b, `,"prices":{`...)
		for i, m := range r.Models {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m)
			b = append(b, ':')
			b = appendUSD(b, r.PriceNanos[i])
		}
		b = append(b, '}')
	}
	b = append(b, `,"order":`...)
	b = appendStrings(b, r.Order())
	b = append(b, `,"target":`...)
	b = appendString(b, r.Target(v.State.RouteIndex))
	b = append(b, `,"index":`...)
	b = appendInt(b, int64(v.State.RouteIndex))
	b = append(b, `,"fallbacks":`...)
	b = appendInt(b, int64(v.State.RouteFallbacks))
	return append(b, '}')
}
