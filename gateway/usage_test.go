package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/mirror"
	corvo "github.com/corvohq/corvo/sdk/go"
)

func usageGroup(t *testing.T, groupBy, key string) *corvo.UsageGroup {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/usage/summary?period=24h&group_by="+groupBy, nil)
	require.Equal(t, 200, code, string(body))
	s := mustJSON[corvo.UsageSummary](t, body)
	require.NotNil(t, s.GroupBy)
	for i := range s.Groups {
		if g := &s.Groups[i]; g.Key != nil && *g.Key == key {
			return g
		}
	}
	return nil
}

// TestAPIUsage: usage on heartbeats (cumulative per attempt), a fail, an
// ack and an ack batch item adds up exactly in the job document, the
// summary (by queue, model, provider and tag) and the metrics.
func TestAPIUsage(t *testing.T) {
	t.Parallel()
	q := uq("llm-usage")
	tenant := uq("tenant")
	model := uq("model")
	id := enqueue(t, map[string]any{"queue": q, "tags": map[string]string{"tenant": tenant}, "retry_backoff": "none"})
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	worker := "w-" + t.Name()

	hb := func(attempt int, in, out int64, cost float64) {
		t.Helper()
		code, body := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": worker, "jobs": map[string]any{
			id: map[string]any{"attempt": attempt, "usage": map[string]any{"input_tokens": in, "output_tokens": out, "model": model, "provider": "fake", "cost_usd": cost}}}})
		require.Equal(t, 200, code, string(body))
	}
	hb(1, 1000, 100, 0.01)
	hb(1, 2500, 300, 0.025) // cumulative: replaces the report above
	code, body := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"worker_id": worker, "attempt": 1, "error": "rate limited",
		"usage": map[string]any{"input_tokens": 10, "model": model, "provider": "fake", "cost_usd": 0.0001}})
	require.Equal(t, 200, code, string(body))
	_, ok = fetchOne(t, 1, q)
	require.True(t, ok)
	hb(2, 400, 40, 0.004)
	code, body = call(t, "POST", "/api/v1/ack/"+id, map[string]any{"worker_id": worker, "attempt": 2, "result": map[string]any{"ok": true},
		"usage": map[string]any{"input_tokens": 600, "output_tokens": 60, "cache_read_tokens": 5, "model": model, "provider": "fake", "cost_usd": 0.006, "latency_ms": 900}})
	require.Equal(t, 200, code, string(body))

	// A second job, acked in a batch.
	id2 := enqueue(t, map[string]any{"queue": q, "tags": map[string]string{"tenant": tenant}})
	_, ok = fetchOne(t, 1, q)
	require.True(t, ok)
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": []map[string]any{{"job_id": id2, "worker_id": worker,
		"usage": map[string]any{"input_tokens": 7, "output_tokens": 3, "model": model, "provider": "fake", "cost_usd": 0.0000007}}}})
	require.Equal(t, 200, code, string(body))

	code, body = call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	doc := mustJSON[corvo.Job](t, body)
	require.NotNil(t, doc.Usage)
	require.Equal(t, int64(2500+10+400+600), doc.Usage.InputTokens)
	require.Equal(t, int64(300+40+60), doc.Usage.OutputTokens)
	require.Equal(t, int64(5), doc.Usage.CacheReadTokens)
	require.Equal(t, 0.0351, doc.Usage.CostUSD, "exact: costs add as integers of 1e-9 USD")
	var phases []string
	for _, r := range doc.Usage.Reports {
		phases = append(phases, fmt.Sprint(r.Attempt, r.Phase))
	}
	require.Equal(t, []string{"1heartbeat", "1fail", "2heartbeat", "2ack"}, phases)

	for _, by := range []struct{ groupBy, key string }{{"queue", q}, {"model", model}, {"tag:tenant", tenant}} {
		g := usageGroup(t, by.groupBy, by.key)
		require.NotNil(t, g, by.groupBy)
		require.Equal(t, int64(3510+7), g.InputTokens, by.groupBy)
		require.Equal(t, int64(403), g.OutputTokens, by.groupBy)
		require.Equal(t, 0.0351007, g.CostUSD, by.groupBy)
		require.Equal(t, int64(2), g.Jobs, by.groupBy)
		require.Equal(t, int64(5), g.Reports, by.groupBy)
		require.Equal(t, 0.01755035, g.CostPerJobUSD, by.groupBy)
	}

	code, body = call(t, "GET", "/api/v1/metrics", nil)
	require.Equal(t, 200, code)
	labels := `{queue="` + q + `",model="` + model + `",provider="fake"}`
	for _, want := range []string{
		"corvo_usage_input_tokens_total" + labels + " 3517",
		"corvo_usage_output_tokens_total" + labels + " 403",
		"corvo_usage_cache_read_tokens_total" + labels + " 5",
		"corvo_usage_cost_usd_total" + labels + " 0.0351007",
		"corvo_usage_reports_total" + labels + " 6", // every report received, the replaced heartbeat too
	} {
		require.Contains(t, string(body), want+"\n")
	}
}

// TestAPIUsageBadInput: a negative count or cost, an unknown field, a
// wrong type: 400, and the job is left as it was (still active, no usage).
func TestAPIUsageBadInput(t *testing.T) {
	t.Parallel()
	q := uq("llm-bad")
	id := enqueue(t, map[string]any{"queue": q})
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	for _, u := range []string{`{"input_tokens":-1}`, `{"cost_usd":-0.5}`, `{"cost_usd":2000000}`, `{"tokens":5}`, `{"input_tokens":1.5}`,
		`{"model":"` + strings.Repeat("m", 300) + `"}`, `"lots"`} {
		for _, req := range []struct{ path, body string }{
			{"/api/v1/ack/" + id, `{"usage":` + u + `}`},
			{"/api/v1/fail/" + id, `{"error":"x","usage":` + u + `}`},
			{"/api/v1/heartbeat", `{"worker_id":"w","jobs":{"` + id + `":{"usage":` + u + `}}}`},
			{"/api/v1/ack/batch", `{"acks":[{"job_id":"` + id + `","usage":` + u + `}]}`},
		} {
			code, body := call(t, "POST", req.path, req.body)
			require.Equal(t, 400, code, "%s %s: %s", req.path, req.body, body)
			require.Contains(t, string(body), `"code":"invalid_request"`, string(body))
		}
	}
	doc := getJob(t, id)
	require.Equal(t, "active", doc.State)
	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	require.Nil(t, mustJSON[corvo.Job](t, body).Usage)

	for _, qs := range []string{"period=1y", "group_by=color", "group_by=tag:", `group_by=tag:a"b`} {
		code, body := call(t, "GET", "/api/v1/usage/summary?"+qs, nil)
		require.Equal(t, 400, code, "%s: %s", qs, body)
	}
}

// TestAPIResultSchema: a schema that does not compile is a 400 at
// enqueue; an ack whose result fails the schema is a 422 with the
// violations and leaves the job active under its lease, and the worker
// acks again with a valid result; in an ack batch the invalid item fails
// alone.
func TestAPIResultSchema(t *testing.T) {
	t.Parallel()
	q := uq("llm-schema")
	schema := map[string]any{"type": "object", "required": []string{"vendor", "amount"},
		"properties": map[string]any{"vendor": map[string]any{"type": "string"}, "amount": map[string]any{"type": "number"}}}
	code, body := call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "result_schema": map[string]any{"type": "wat"}})
	require.Equal(t, 400, code, string(body))
	require.Contains(t, string(body), "result_schema")
	code, body = call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{{"queue": q, "result_schema": map[string]any{"minimum": "x"}}}})
	require.Equal(t, 400, code, string(body))

	id := enqueue(t, map[string]any{"queue": q, "result_schema": schema})
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	worker := "w-" + t.Name()
	code, body = call(t, "POST", "/api/v1/ack/"+id, map[string]any{"worker_id": worker, "attempt": j.Attempt, "result": map[string]any{"vendor": 7},
		"usage": map[string]any{"input_tokens": 5}})
	require.Equal(t, 422, code, string(body))
	bad := mustJSON[struct {
		Code   string `json:"code"`
		Errors []struct {
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"validation_errors"`
	}](t, body)
	require.Equal(t, corvo.CodeResultSchemaInvalid, bad.Code)
	require.Len(t, bad.Errors, 2, string(body))
	require.Equal(t, "", bad.Errors[0].Path, "the missing member is the object's")
	require.Equal(t, "/vendor", bad.Errors[1].Path)
	doc := getJob(t, id)
	require.Equal(t, "active", doc.State)
	code, body = call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	require.Nil(t, mustJSON[corvo.Job](t, body).Usage, "a refused ack records no usage")

	code, body = call(t, "POST", "/api/v1/ack/"+id, map[string]any{"worker_id": worker, "attempt": j.Attempt, "result": map[string]any{"vendor": "Acme", "amount": 12.5}})
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "completed", getJob(t, id).State)

	// An ack batch: one valid, one invalid, one without a schema.
	ids := []string{enqueue(t, map[string]any{"queue": q, "result_schema": schema}), enqueue(t, map[string]any{"queue": q, "result_schema": schema}),
		enqueue(t, map[string]any{"queue": q})}
	for range ids {
		_, ok := fetchOne(t, 1, q)
		require.True(t, ok)
	}
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": []map[string]any{
		{"job_id": ids[0], "result": map[string]any{"vendor": "A", "amount": 1}},
		{"job_id": ids[1], "result": "nope"},
		{"job_id": ids[2], "result": "anything"}}})
	require.Equal(t, 200, code, string(body))
	res := mustJSON[corvo.AckBatchResult](t, body)
	require.Equal(t, 2, res.Acked)
	require.Len(t, res.Errors, 1)
	require.Equal(t, ids[1], res.Errors[0].JobID)
	require.Equal(t, corvo.CodeResultSchemaInvalid, res.Errors[0].Code)
	require.Equal(t, []string{"completed", "active", "completed"}, []string{getJob(t, ids[0]).State, getJob(t, ids[1]).State, getJob(t, ids[2]).State})
}

// TestAPIResultCache: a completed job with a cache answers a later enqueue
// of the same payload (exact, whatever its key order) or the same named
// members (key) in the queue at once, completed, with its result; the
// hit never reaches a worker; the summary counts hits, misses and the
// savings (the cost of the job the result came from); bad cache options
// are 400s.
func TestAPIResultCache(t *testing.T) {
	t.Parallel()
	q := uq("llm-cache")
	cache := map[string]any{"enabled": true, "ttl": "1h"}
	first := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{"q": "capital of France", "n": 1}, "cache": cache})
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, first, j.JobID)
	code, body := call(t, "POST", "/api/v1/ack/"+first, map[string]any{"result": map[string]any{"answer": "Paris"},
		"usage": map[string]any{"input_tokens": 100, "cost_usd": 0.25}})
	require.Equal(t, 200, code, string(body))

	code, body = call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"n": 1.0, "q": "capital of France"}, "cache": cache})
	require.Equal(t, 201, code, string(body))
	hit := mustJSON[corvo.Enqueued](t, body)
	require.True(t, hit.Cached)
	require.Equal(t, first, hit.CachedFrom)
	require.Equal(t, "completed", hit.Status)
	require.JSONEq(t, `{"answer":"Paris"}`, string(hit.Result))
	require.Equal(t, "completed", getJob(t, hit.JobID).State)
	_, ok = fetchOne(t, 0, q)
	require.False(t, ok, "a cache hit never reaches a worker")

	// key: only the named members count.
	keyed := map[string]any{"enabled": true, "ttl": "1h", "match": "key", "cache_key_fields": []string{"q"}}
	code, body = call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{
		{"queue": q, "payload": map[string]any{"q": "capital of France", "n": 2}, "cache": keyed},
		{"queue": q, "payload": map[string]any{"q": "capital of Spain"}, "cache": cache},
		{"queue": q, "payload": map[string]any{"q": "capital of France", "n": 1}, "cache": cache}}})
	require.Equal(t, 201, code, string(body))
	b := mustJSON[corvo.BatchEnqueued](t, body)
	require.Equal(t, []bool{false, false, true}, b.Cached, "a key-matched job has another key than an exact one: a miss")

	code, body = call(t, "GET", "/api/v1/usage/summary?period=24h&group_by=queue", nil)
	require.Equal(t, 200, code, string(body))
	s := mustJSON[corvo.UsageSummary](t, body)
	require.GreaterOrEqual(t, s.Cache.Hits, int64(1))
	require.GreaterOrEqual(t, s.Cache.EstimatedSavingsUSD, 0.25)

	for _, bad := range []map[string]any{{"enabled": true}, {"ttl": "1h"}, {"enabled": true, "ttl": "forever"}, {"enabled": true, "ttl": "1h", "match": "fuzzy"},
		{"enabled": true, "ttl": "1h", "match": "key"}, {"enabled": true, "ttl": "1h", "cache_key_fields": []string{"q"}}, {"enabled": true, "ttl": "1h", "color": 1}} {
		code, body := call(t, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"q": 1}, "cache": bad})
		require.Equal(t, 400, code, "%v: %s", bad, body)
	}
}

// TestSearchUsageFilters: model finds the jobs with a report of that
// model, min_cost_usd the jobs whose reports add up to at least that
// cost (exactly: a sum equal to the bound matches); a job without usage
// matches neither; a bad bound is a 400.
func TestSearchUsageFilters(t *testing.T) {
	t.Parallel()
	q := uq("llm-search")
	mA, mB := uq("model-a"), uq("model-b")
	a, b, c := enqueue(t, map[string]any{"queue": q}), enqueue(t, map[string]any{"queue": q}), enqueue(t, map[string]any{"queue": q})
	for range 3 {
		_, ok := fetchOne(t, 1, q)
		require.True(t, ok)
	}
	code, body := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w-" + t.Name(), "jobs": map[string]any{
		b: map[string]any{"usage": map[string]any{"model": mB, "cost_usd": 0.1}}}})
	require.Equal(t, 200, code, string(body))
	code, body = call(t, "POST", "/api/v1/ack/batch", map[string]any{"acks": []map[string]any{
		{"job_id": a, "usage": map[string]any{"model": mA, "cost_usd": 0.5}},
		{"job_id": b, "usage": map[string]any{"model": mB, "cost_usd": 0.2}},
		{"job_id": c}}})
	require.Equal(t, 200, code, string(body))

	ids := func(f map[string]any) []string {
		t.Helper()
		f["queue"], f["order"], f["sort"] = q, "asc", "created_at"
		var out []string
		for _, j := range search(t, f).Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	require.Equal(t, []string{a}, ids(map[string]any{"model": mA}))
	require.Equal(t, []string{b}, ids(map[string]any{"model": mB}))
	require.Equal(t, []string{a, b}, ids(map[string]any{"min_cost_usd": 0.3}), "0.1 + 0.2 is 0.3 exactly, in nano-dollars")
	require.Equal(t, []string{a}, ids(map[string]any{"min_cost_usd": 0.300000001}))
	require.Equal(t, []string{a, b}, ids(map[string]any{"min_cost_usd": 0}), "a job without usage never matches")
	require.Empty(t, ids(map[string]any{"model": mB, "min_cost_usd": 0.4}))
	for _, bad := range []string{`-1`, `"1"`, `1e10`} {
		code, body := call(t, "POST", "/api/v1/jobs/search", `{"queue":"`+q+`","min_cost_usd":`+bad+`}`)
		require.Equal(t, 400, code, "%s: %s", bad, body)
	}
}

// TestAPIUsageSummaryByTime: group_by hour and day answer the period's
// buckets, keyed by their start (UTC, RFC 3339), oldest first, adding up
// to the totals; this test's report is in the bucket of now.
func TestAPIUsageSummaryByTime(t *testing.T) {
	t.Parallel()
	q := uq("llm-time")
	id := enqueue(t, map[string]any{"queue": q})
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	before := time.Now().UTC()
	code, body := call(t, "POST", "/api/v1/ack/"+id, map[string]any{"usage": map[string]any{"input_tokens": 11, "cost_usd": 0.125}})
	require.Equal(t, 200, code, string(body))
	after := time.Now().UTC()
	for _, c := range []struct {
		groupBy string
		trunc   func(time.Time) time.Time
	}{
		{"hour", func(t time.Time) time.Time { return t.Truncate(time.Hour) }},
		{"day", func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC) }},
	} {
		code, body := call(t, "GET", "/api/v1/usage/summary?period=7d&group_by="+c.groupBy, nil)
		require.Equal(t, 200, code, string(body))
		s := mustJSON[corvo.UsageSummary](t, body)
		require.NotEmpty(t, s.Groups, c.groupBy)
		var cost float64
		var keys []string
		for _, g := range s.Groups {
			require.NotNil(t, g.Key)
			at, err := time.Parse(time.RFC3339, *g.Key)
			require.NoError(t, err, *g.Key)
			require.Equal(t, c.trunc(at), at, "%s: a bucket's key is its start", *g.Key)
			keys = append(keys, *g.Key)
			cost += g.CostUSD
		}
		require.True(t, slices.IsSorted(keys), "%s: oldest first: %v", c.groupBy, keys)
		require.InDelta(t, s.Totals.CostUSD, cost, 1e-6, "the buckets add up to the totals")
		last := keys[len(keys)-1]
		require.Contains(t, []string{c.trunc(before).Format(time.RFC3339), c.trunc(after).Format(time.RFC3339)}, last, "the report is in the bucket of now")
		require.GreaterOrEqual(t, s.Groups[len(s.Groups)-1].CostUSD, 0.125)
	}
}

// TestMergeUsageByTime: another node's buckets merge into this node's by
// key, and the merged buckets are ordered by key, not by cost.
func TestMergeUsageByTime(t *testing.T) {
	k := func(s string) *string { return &s }
	s := &mirror.UsageSummary{Groups: []mirror.UsageGroup{{Key: k("2026-02-11T10:00:00Z"), CostNanos: 5, Jobs: 1}, {Key: k("2026-02-11T12:00:00Z"), CostNanos: 1, Jobs: 1}}}
	mergeUsage(s, &usagePart{Groups: []usagePartGroup{{Key: k("2026-02-11T11:00:00Z"), CostNanos: 100, Jobs: 2}, {Key: k("2026-02-11T12:00:00Z"), CostNanos: 7, Jobs: 1}}}, true)
	var keys []string
	var costs []int64
	for _, g := range s.Groups {
		keys = append(keys, *g.Key)
		costs = append(costs, g.CostNanos)
	}
	require.Equal(t, []string{"2026-02-11T10:00:00Z", "2026-02-11T11:00:00Z", "2026-02-11T12:00:00Z"}, keys)
	require.Equal(t, []int64{5, 100, 8}, costs)
	require.Equal(t, int64(2), s.Groups[2].Jobs)

	mergeUsage(s, &usagePart{}, false)
	require.Equal(t, "2026-02-11T11:00:00Z", *s.Groups[0].Key, "by cost when not by time")
}
