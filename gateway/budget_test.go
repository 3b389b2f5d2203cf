package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

type budgetDoc struct {
	Scope     string   `json:"scope"`
	DailyUSD  *float64 `json:"daily_usd"`
	PerJobUSD *float64 `json:"per_job_usd"`
	OnExceed  string   `json:"on_exceed"`
	Day       string   `json:"day"`
	SpentUSD  float64  `json:"spent_usd"`
	Exceeded  bool     `json:"exceeded"`
}

func setBudget(t *testing.T, b map[string]any) budgetDoc {
	t.Helper()
	code, body := call(t, "PUT", "/api/v1/budgets", b)
	require.Equal(t, 200, code, string(body))
	return mustJSON[budgetDoc](t, body)
}

func budgetOf(t *testing.T, scope string) *budgetDoc {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/budgets", nil)
	require.Equal(t, 200, code, string(body))
	for _, b := range mustJSON[struct {
		Budgets []budgetDoc `json:"budgets"`
	}](t, body).Budgets {
		if b.Scope == scope {
			return &b
		}
	}
	return nil
}

// spend runs one job of queue (with tags) to an ack reporting cost.
func spend(t *testing.T, queue string, tags map[string]string, cost float64) string {
	t.Helper()
	id := enqueue(t, map[string]any{"queue": queue, "tags": tags})
	j, ok := fetchOne(t, 1, queue)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	code, body := call(t, "POST", "/api/v1/ack/"+id, map[string]any{"worker_id": "w-" + t.Name(), "result": 1,
		"usage": map[string]any{"input_tokens": 10, "model": "m", "provider": "fake", "cost_usd": cost}})
	require.Equal(t, 200, code, string(body))
	return id
}

func enqueueStatus(t *testing.T, job map[string]any) (string, string) {
	t.Helper()
	code, body := call(t, "POST", "/api/v1/enqueue", job)
	require.Equal(t, 201, code, string(body))
	r := mustJSON[struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}](t, body)
	return r.JobID, r.Status
}

// TestAPIBudgetHold: once a queue's daily budget is spent, new jobs of the
// queue enter held (reason budget) until approved; other queues are not
// touched; the list shows the day's spend.
func TestAPIBudgetHold(t *testing.T) {
	t.Parallel()
	q, other := uq("budget-hold"), uq("budget-free")
	b := setBudget(t, map[string]any{"scope": "queue:" + q, "daily_usd": 0.05, "on_exceed": "hold"})
	require.Equal(t, "hold", b.OnExceed)
	require.Nil(t, b.PerJobUSD)

	spend(t, q, nil, 0.03)
	_, st := enqueueStatus(t, map[string]any{"queue": q})
	require.Equal(t, "pending", st, "0.03 of 0.05: under the limit")
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	spend(t, q, nil, 0.02)
	got := budgetOf(t, "queue:"+q)
	require.NotNil(t, got)
	require.Equal(t, 0.05, got.SpentUSD)
	require.True(t, got.Exceeded)

	id, st := enqueueStatus(t, map[string]any{"queue": q})
	require.Equal(t, "held", st)
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	require.Equal(t, "budget", *mustJSON[jobDoc](t, body).Reason)
	_, st = enqueueStatus(t, map[string]any{"queue": other})
	require.Equal(t, "pending", st, "another queue is not covered")

	code, body = call(t, "POST", "/api/v1/jobs/"+id+"/approve", nil)
	require.Equal(t, 200, code, string(body))
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)

	// Deleted: new jobs are pending again; a second delete is 404.
	code, body = call(t, "DELETE", "/api/v1/budgets/"+url.PathEscape("queue:"+q), nil)
	require.Equal(t, 200, code, string(body))
	_, st = enqueueStatus(t, map[string]any{"queue": q})
	require.Equal(t, "pending", st)
	code, _ = call(t, "DELETE", "/api/v1/budgets/"+url.PathEscape("queue:"+q), nil)
	require.Equal(t, 404, code)
	require.Nil(t, budgetOf(t, "queue:"+q))
}

// TestAPIBudgetReject: a spent tag budget with on_exceed reject refuses
// a covered enqueue with 429 budget_exceeded and Retry-After, and a batch
// holding one covered job whole; jobs without the tag go in.
func TestAPIBudgetReject(t *testing.T) {
	t.Parallel()
	q, tenant := uq("budget-reject"), uq("tenant")
	setBudget(t, map[string]any{"scope": "tag:tenant=" + tenant, "daily_usd": 0.01, "on_exceed": "reject"})
	tags := map[string]string{"tenant": tenant}
	spend(t, q, tags, 0.004)
	spend(t, q, tags, 0.006)

	req, err := http.NewRequest("POST", baseURL+"/api/v1/enqueue", bytes.NewReader([]byte(`{"queue":"`+q+`","tags":{"tenant":"`+tenant+`"}}`)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 429, resp.StatusCode, string(body))
	var e struct {
		Error, Code, Budget string
		ResetsAt            time.Time `json:"resets_at"`
	}
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, "budget_exceeded", e.Code)
	require.Contains(t, e.Error, "tag:tenant="+tenant)
	require.Equal(t, "tag:tenant="+tenant, e.Budget)
	require.Equal(t, e.ResetsAt.UTC().Truncate(24*time.Hour), e.ResetsAt.UTC(), "a UTC midnight")
	require.WithinRange(t, e.ResetsAt, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour), "the next one")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))

	code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{{"queue": q}, {"queue": q, "tags": tags}}})
	require.Equal(t, 429, code, string(body))
	require.Contains(t, string(body), `"budget_exceeded"`)
	_, ok := fetchOne(t, 0, q)
	require.False(t, ok, "nothing of the refused enqueues is in the queue")

	_, st := enqueueStatus(t, map[string]any{"queue": q, "tags": map[string]string{"tenant": tenant + "-other"}})
	require.Equal(t, "pending", st)
}

// TestAPIBudgetAlertOnly: a spent alert_only budget lets jobs in as usual,
// with a budget_exceeded event and corvo_budget_exceeded_total.
func TestAPIBudgetAlertOnly(t *testing.T) {
	t.Parallel()
	q := uq("budget-alert")
	setBudget(t, map[string]any{"scope": "queue:" + q, "daily_usd": 0.001, "per_job_usd": 5, "on_exceed": "alert_only"})
	spend(t, q, nil, 0.002)
	s := openSSE(t, "/api/v1/events?queue="+q+"&type=budget_exceeded", "")
	id, st := enqueueStatus(t, map[string]any{"queue": q})
	require.Equal(t, "pending", st)
	evs, _ := s.collect(t, 1)
	require.Equal(t, "budget_exceeded", evs[0].Type)
	require.Equal(t, id, evs[0].JobID)
	enqueueStatus(t, map[string]any{"queue": q})

	code, body := call(t, "GET", "/api/v1/metrics", nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `corvo_budget_exceeded_total{budget="queue:`+q+`",action="alert_only"} 2`+"\n")
}

// TestAPIBudgetPerJob: a heartbeat of a job whose cost is past a per-job
// budget answers ok with "budget_exceeded": true (its lease extended);
// one under it has no such member.
func TestAPIBudgetPerJob(t *testing.T) {
	t.Parallel()
	q := uq("budget-job")
	setBudget(t, map[string]any{"scope": "queue:" + q, "per_job_usd": 0.1, "on_exceed": "hold"})
	id := enqueue(t, map[string]any{"queue": q})
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	hb := func(cost float64) string {
		code, body := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w-" + t.Name(), "jobs": map[string]any{
			id: map[string]any{"attempt": 1, "usage": map[string]any{"input_tokens": 1, "cost_usd": cost}}}})
		require.Equal(t, 200, code, string(body))
		return string(body)
	}
	require.JSONEq(t, `{"jobs":{"`+id+`":{"status":"ok"}}}`, hb(0.1))
	require.JSONEq(t, `{"jobs":{"`+id+`":{"status":"ok","budget_exceeded":true}}}`, hb(0.15))
}

// TestAPIBudgetBadInput: bad scopes, limits and actions answer 400 and
// set nothing.
func TestAPIBudgetBadInput(t *testing.T) {
	t.Parallel()
	q := uq("budget-bad")
	for _, b := range []map[string]any{
		{"scope": "queue:" + q, "on_exceed": "hold"},                           // no limit
		{"scope": "queue:" + q, "daily_usd": -1},                               // negative
		{"scope": "queue:" + q, "daily_usd": 1, "on_exceed": "pause"},          // unknown action
		{"scope": "queues:" + q, "daily_usd": 1},                               // unknown scope
		{"scope": "tag:tenant", "daily_usd": 1},                                // no value
		{"scope": "queue:bad name!", "daily_usd": 1},                           // bad queue
		{"scope": "queue:" + q, "daily_usd": 1, "limit": 2},                    // unknown field
		{"scope": "queue:" + q, "daily_usd": 2_000_000, "on_exceed": "reject"}, // too large
		{"scope": "queue:" + q, "daily_usd": "1", "on_exceed": "alert_only"},   // wrong type
	} {
		code, body := call(t, "PUT", "/api/v1/budgets", b)
		require.Equal(t, 400, code, "%v: %s", b, body)
	}
	require.Nil(t, budgetOf(t, "queue:"+q))
	code, _ := call(t, "DELETE", "/api/v1/budgets/nonsense", nil)
	require.Equal(t, 400, code)
}

// budgetEngine answers BudgetsQuery from spends by day and shard, and
// counts the reads.
type budgetEngine struct {
	busyEngine
	mu     sync.Mutex
	reads  int
	spends map[int64][]int64 // day → spend of shard 0, 1, …
	budget statemachine.Budget
	fail   bool
}

func (e *budgetEngine) Read(sh int, q interface{}) (interface{}, error) {
	bq, ok := q.(statemachine.BudgetsQuery)
	if !ok {
		return nil, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if sh == 0 {
		e.reads++
	}
	if e.fail {
		return nil, errors.New("shard unreachable")
	}
	var spent int64
	if s := e.spends[bq.Day]; sh < len(s) {
		spent = s[sh]
	}
	return []statemachine.BudgetSpend{{Budget: e.budget, SpentNanos: spent}}, nil
}

type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// TestBudgetViewSumsShardsAndRollsOver: the enqueue's verdict is taken on
// the spend summed over every shard; the view is read once and kept
// until the UTC day changes (with BudgetRefresh negative, nothing else
// here makes it stale), and the new day starts from that day's spend.
func TestBudgetViewSumsShardsAndRollsOver(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 2, 11, 23, 59, 59, 0, time.UTC)
	d := statemachine.UsageDay(day.UnixNano())
	eng := &budgetEngine{budget: statemachine.Budget{Queue: "llm", DailyNanos: 5e9, OnExceed: statemachine.BudgetActionHold},
		spends: map[int64][]int64{d: {3e9, 2e9}, d + 1: {1e9}}}
	s := New(Config{Logger: zerolog.Nop(), BudgetRefresh: -1}, eng)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	clk := &stepClock{t: day}
	s.clock = clk

	v, rej := s.budgetVerdict("llm", nil)
	require.Nil(t, rej)
	require.Equal(t, statemachine.BudgetHold, v, "3 + 2 of 5: spent, though no shard alone is")
	v, _ = s.budgetVerdict("other", nil)
	require.Equal(t, statemachine.BudgetOK, v, "another queue")
	require.Equal(t, 1, eng.reads, "one read for both")

	clk.set(day.Add(2 * time.Second)) // 00:00:01 of the next day
	v, _ = s.budgetVerdict("llm", nil)
	require.Equal(t, statemachine.BudgetOK, v, "a new day: 1 of 5")
	require.Equal(t, 2, eng.reads)

	// A budget changed through this node makes the view stale at once.
	s.budgetGen.Add(1)
	eng.mu.Lock()
	eng.spends[d+1] = []int64{1e9, 4e9}
	eng.mu.Unlock()
	v, _ = s.budgetVerdict("llm", nil)
	require.Equal(t, statemachine.BudgetHold, v)
	require.Equal(t, 3, eng.reads)

	// A read that fails keeps the view it had, and is not tried again
	// by every enqueue (here: until the next change).
	eng.mu.Lock()
	eng.fail = true
	eng.mu.Unlock()
	s.budgetGen.Add(1)
	v, _ = s.budgetVerdict("llm", nil)
	require.Equal(t, statemachine.BudgetHold, v)
	v, _ = s.budgetVerdict("llm", nil)
	require.Equal(t, statemachine.BudgetHold, v)
	require.Equal(t, 4, eng.reads)
}
