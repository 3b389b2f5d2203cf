package statemachine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRoutingOrder(t *testing.T) {
	t.Parallel()
	m := []string{"a", "b", "c"}
	require.Equal(t, m, (&Routing{Models: m}).Order())
	require.Equal(t, []string{"b", "c", "a"}, (&Routing{Strategy: RouteRoundRobin, Models: m, Start: 1}).Order())
	require.Equal(t, []string{"c", "a", "b"}, (&Routing{Strategy: RouteRoundRobin, Models: m, Start: 5}).Order())
	// Lowest price first; ties keep the order given.
	require.Equal(t, []string{"c", "a", "b"}, (&Routing{Strategy: RouteLowestCost, Models: m, PriceNanos: []int64{5, 9, 1}}).Order())
	require.Equal(t, []string{"b", "a", "c"}, (&Routing{Strategy: RouteLowestCost, Models: m, PriceNanos: []int64{3, 1, 3}}).Order())
	require.Equal(t, "a", (&Routing{Strategy: RouteLowestCost, Models: m, PriceNanos: []int64{3, 3, 3}}).Target(0))
	require.Empty(t, (&Routing{Models: m}).Target(3))
	for _, name := range []string{"fallback_on_error", "round_robin", "lowest_cost"} {
		s, ok := ParseRouteStrategy(name)
		require.True(t, ok)
		require.Equal(t, name, s.String())
	}
	_, ok := ParseRouteStrategy("random")
	require.False(t, ok)
}

// TestRoutingFallbackThenRetries: provider errors walk a routed job down
// its models, each time back to pending at once and without using a
// retry; a provider error on the last model (or a plain error) is an
// ordinary failure with backoff, after which the job starts again from
// its first model; retries run out only by ordinary failures.
func TestRoutingFallbackThenRetries(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("llm", PriorityNormal, func(j *Job) {
		j.MaxRetries = 2
		j.Routing = &Routing{Models: []string{"big", "mid", "small"}}
	})
	failProvider := func(attempt uint32, target string) Result {
		t.Helper()
		jobs := tb.fetch(1, "llm")
		require.Len(t, jobs, 1)
		require.Equal(t, attempt, jobs[0].State.Attempt)
		require.Equal(t, target, jobs[0].Job.Routing.Target(jobs[0].State.RouteIndex))
		return tb.one(&FailOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: attempt}, Error: "503", ProviderError: true})
	}
	r := failProvider(1, "big")
	require.Equal(t, StatePending, r.State, "a fallback goes back to pending at once")
	require.Equal(t, uint32(2), r.AttemptsRemaining, "and uses no retry")
	r = failProvider(2, "mid")
	require.Equal(t, StatePending, r.State)
	r = failProvider(3, "small")
	require.Equal(t, StateRetrying, r.State, "the list is exhausted: an ordinary retry with backoff")
	require.Equal(t, uint32(1), r.AttemptsRemaining)
	v := tb.get(id)
	require.Equal(t, uint32(0), v.State.RouteIndex, "the next attempt starts from the first model")
	require.Equal(t, uint32(2), v.State.RouteFallbacks)
	require.Len(t, v.Errors, 3)

	tb.advance(time.Duration(v.State.DueAt - tb.now.UnixNano()))
	tb.one(&PromoteOp{})
	r = failProvider(4, "big")
	require.Equal(t, StatePending, r.State, "the list is walked again on the last retry")
	// A plain error on a fallback model is an ordinary failure: no retry
	// is left, so the job dies, and keeps the model it died on.
	jobs := tb.fetch(1, "llm")
	require.Equal(t, "mid", jobs[0].Job.Routing.Target(jobs[0].State.RouteIndex))
	r = tb.one(&FailOp{JobID: id, Holder: Holder{WorkerID: "w1", Attempt: 5}, Error: "bad output"})
	require.Equal(t, StateDead, r.State)
	require.Equal(t, uint32(1), tb.get(id).State.RouteIndex)

	// An unrouted job ignores provider_error.
	plain := tb.enqueue("plain", PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
	tb.fetch(1, "plain")
	r = tb.one(&FailOp{JobID: plain, Error: "503", ProviderError: true})
	require.Equal(t, StateDead, r.State)

	// An admin retry starts from the first model with every attempt back.
	require.Equal(t, StatusOK, tb.one(&RetryJobOp{JobID: id}).Status)
	v = tb.get(id)
	require.Equal(t, uint32(0), v.State.RouteIndex)
	require.Equal(t, uint32(0), v.State.RouteFallbacks)
}

// TestRoutingRoundRobinStarts: successive round-robin jobs of a queue
// start at successive models, by the queue's enqueue count; the state
// machine sets Start whatever the op said.
func TestRoutingRoundRobinStarts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var targets []string
	for range 4 {
		id := tb.enqueue("rr", PriorityNormal, func(j *Job) {
			j.Routing = &Routing{Strategy: RouteRoundRobin, Models: []string{"a", "b", "c"}, Start: 7}
		})
		v := tb.get(id)
		targets = append(targets, v.Job.Routing.Target(v.State.RouteIndex))
	}
	require.Equal(t, []string{"a", "b", "c", "a"}, targets)
}
