package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestAPIRouting: a routed job's fetches carry the model to call; a fail
// with provider_error moves it to the next model at once (pending, no
// retry used), the last model's provider error is an ordinary retry; the
// job document shows the routing and its target.
func TestAPIRouting(t *testing.T) {
	t.Parallel()
	q := uq("llm-routing")
	worker := "w-" + t.Name()
	id := enqueue(t, map[string]any{"queue": q, "retry_backoff": "none", "max_retries": 3,
		"routing": map[string]any{"prefer": "claude", "fallback": []string{"gpt", "local"}}})
	fetch := func() corvo.FetchedJob {
		t.Helper()
		code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": worker})
		require.Equal(t, 200, code, string(body))
		return mustJSON[corvo.FetchedJob](t, body)
	}
	fail := func(attempt int, provider bool) corvo.FailResult {
		t.Helper()
		code, body := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"worker_id": worker, "attempt": attempt, "error": "503", "provider_error": provider})
		require.Equal(t, 200, code, string(body))
		return mustJSON[corvo.FailResult](t, body)
	}
	var targets []string
	for attempt := 1; attempt <= 3; attempt++ {
		j := fetch()
		require.NotNil(t, j.Routing)
		require.Equal(t, attempt-1, j.Routing.Index)
		targets = append(targets, j.Routing.Target)
		fail(attempt, true)
	}
	require.Equal(t, []string{"claude", "gpt", "local"}, targets)
	j := fetch()
	require.Equal(t, corvo.RouteTarget{Target: "claude", Index: 0}, *j.Routing, "after the list, an ordinary retry from the first model")

	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	doc := mustJSON[corvo.Job](t, body)
	require.Equal(t, &corvo.JobRouting{Prefer: "claude", Fallback: []string{"gpt", "local"}, Strategy: "fallback_on_error",
		Order: []string{"claude", "gpt", "local"}, Target: "claude", Index: 0, Fallbacks: 2}, doc.Routing)
	require.Equal(t, 1, doc.AttemptsRemaining, "four attempts, two of them fallbacks: two count against max_retries 3")

	// lowest_cost orders by the prices given.
	cheap := enqueue(t, map[string]any{"queue": q, "routing": map[string]any{"prefer": "big", "fallback": []string{"small"},
		"strategy": "lowest_cost", "prices": map[string]any{"big": 15, "small": 0.8}}})
	code, body = call(t, "GET", "/api/v1/jobs/"+cheap, nil)
	require.Equal(t, 200, code)
	doc = mustJSON[corvo.Job](t, body)
	require.Equal(t, []string{"small", "big"}, doc.Routing.Order)
	require.Equal(t, "small", doc.Routing.Target)
	require.Equal(t, map[string]float64{"big": 15, "small": 0.8}, doc.Routing.Prices)

	// A job without routing shows none.
	plain := enqueue(t, map[string]any{"queue": uq("plain")})
	code, body = call(t, "GET", "/api/v1/jobs/"+plain, nil)
	require.Equal(t, 200, code)
	require.Nil(t, mustJSON[corvo.Job](t, body).Routing)
}

func TestAPIRoutingInvalid(t *testing.T) {
	t.Parallel()
	q := uq("bad-routing")
	for name, r := range map[string]any{
		"no prefer":          map[string]any{"fallback": []string{"a"}},
		"empty prefer":       map[string]any{"prefer": ""},
		"duplicate":          map[string]any{"prefer": "a", "fallback": []string{"b", "a"}},
		"unknown strategy":   map[string]any{"prefer": "a", "strategy": "random"},
		"lowest_cost priced": map[string]any{"prefer": "a", "fallback": []string{"b"}, "strategy": "lowest_cost", "prices": map[string]any{"a": 1}},
		"negative price":     map[string]any{"prefer": "a", "strategy": "lowest_cost", "prices": map[string]any{"a": -1}},
		"stray price":        map[string]any{"prefer": "a", "strategy": "lowest_cost", "prices": map[string]any{"a": 1, "z": 2}},
		"prices without":     map[string]any{"prefer": "a", "prices": map[string]any{"a": 1}},
		"too many":           map[string]any{"prefer": "a", "fallback": []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16"}},
		"not an object":      "claude",
	} {
		code, body := call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "routing": r})
		require.Equal(t, 400, code, "%s: %s", name, body)
		require.Contains(t, string(body), "routing", name)
	}
}
