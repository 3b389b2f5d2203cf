package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// TestBackupRestoreAIState backs up one namespace of a server holding
// issue 20's state — usage on heartbeats, a fail and an ack, budgets with
// today's spend (the namespace's and another's), scores, a cache entry, a
// routed job on its fallback — with corvo backup, restores it with corvo
// restore into a server of another shard count, and compares what corvo
// usage, corvo budgets, corvo scores summary and corvo providers say on
// both: the same. The other namespace's budget and provider stay out; the
// restored cache serves a hit; the route goes on at its fallback; the
// restored queue keeps to its provider's requests per minute; a second
// restore duplicates nothing.
func TestBackupRestoreAIState(t *testing.T) {
	t.Parallel()
	// The budgets list today's spend: what they say is compared only when
	// no UTC midnight came during the test.
	day := func() string { return time.Now().UTC().Format(time.DateOnly) }
	firstDay := day()
	a := newServer(t, "--shards", "4", "--auth", "on")
	b := newServer(t, "--shards", "3", "--auth", "on")
	admin := map[string]string{"Authorization": "Bearer " + testAdminKey}
	must := func(url, method, path string, body any, hdr map[string]string, want int) []byte {
		t.Helper()
		code, out := doWith(t, method, url+path, body, hdr)
		require.Equal(t, want, code, "%s %s: %s", method, path, out)
		return out
	}
	nsKey := func(url string) (map[string]string, string) {
		t.Helper()
		k := decode[struct {
			Key string `json:"key"`
		}](t, must(url, "POST", "/api/v1/auth/keys", map[string]any{"name": "acme-admin", "namespace": "acme", "role": "admin"}, admin, 201)).Key
		return map[string]string{"Authorization": "Bearer " + k}, k
	}
	must(a.url, "POST", "/api/v1/namespaces", map[string]any{"name": "acme"}, admin, 201)
	acme, acmeKey := nsKey(a.url)

	// A queue 4 and 3 shards place apart: its jobs get new IDs.
	q := "llm"
	for i := 0; router.New(4).ShardForQueue("acme/"+q) == router.New(3).ShardForQueue("acme/"+q); i++ {
		q = fmt.Sprint("llm-", i)
	}
	cli := func(url, key string, args ...string) string {
		t.Helper()
		out, code := runCLIKey(t, url, key, args...)
		require.Equal(t, 0, code, "corvo %v:\n%s", args, out)
		return out
	}
	cli(a.url, acmeKey, "budgets", "set", "queue:"+q, "--daily-usd", "100", "--per-job-usd", "50")
	cli(a.url, acmeKey, "budgets", "set", "tag:team=search", "--daily-usd", "1", "--on-exceed", "reject")
	cli(a.url, testAdminKey, "budgets", "set", "global", "--daily-usd", "7", "--on-exceed", "alert_only") // the default namespace's
	cli(a.url, acmeKey, "providers", "set", "anthropic", "--rpm", "3", "--output-tpm", "50000")
	cli(a.url, acmeKey, "providers", "link", q, "anthropic")
	cli(a.url, testAdminKey, "providers", "set", "openai", "--rpm", "7") // the default namespace's

	usage := func(in int64, model string, cost float64) map[string]any {
		return map[string]any{"input_tokens": in, "output_tokens": in / 10, "model": model, "provider": "fake", "cost_usd": cost}
	}
	cache := map[string]any{"enabled": true, "ttl": "1h"}
	enqueue := func(job map[string]any) string {
		return decode[struct {
			JobID string `json:"job_id"`
		}](t, must(a.url, "POST", "/api/v1/enqueue", job, acme, 201)).JobID
	}
	fetch := func(url string, hdr map[string]string) fetched {
		t.Helper()
		return decode[fetched](t, must(url, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "timeout": 1}, hdr, 200))
	}
	cached := enqueue(map[string]any{"queue": q, "payload": map[string]any{"prompt": "capital of France"}, "tags": map[string]string{"team": "search"}, "cache": cache})
	require.Equal(t, cached, fetch(a.url, acme).JobID)
	must(a.url, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w", "jobs": map[string]any{cached: map[string]any{"usage": usage(1000, "claude", 0.02)}}}, acme, 200)
	must(a.url, "POST", "/api/v1/ack/"+cached, map[string]any{"worker_id": "w", "result": map[string]any{"answer": "Paris"}, "usage": usage(500, "claude", 0.01)}, acme, 200)
	must(a.url, "POST", "/api/v1/jobs/"+cached+"/score", map[string]any{"scorer": "human:ann", "dimensions": map[string]any{"accuracy": 0.75, "tone": -1}}, acme, 201)
	must(a.url, "POST", "/api/v1/jobs/"+cached+"/score", map[string]any{"scorer": "human:bob", "dimensions": map[string]any{"accuracy": 1}}, acme, 201)
	routed := enqueue(map[string]any{"queue": q, "payload": map[string]any{}, "retry_backoff": "none",
		"routing": map[string]any{"prefer": "claude", "fallback": []string{"gpt"}}})
	require.Equal(t, routed, fetch(a.url, acme).JobID)
	must(a.url, "POST", "/api/v1/fail/"+routed, map[string]any{"worker_id": "w", "attempt": 1, "error": "503", "provider_error": true,
		"usage": usage(10, "claude", 0.001)}, acme, 200)

	views := func(url, key string) []string {
		t.Helper()
		return []string{
			cli(url, key, "usage", "--period", "24h", "--group-by", "model", "-o", "json"),
			cli(url, key, "budgets", "-o", "json"),
			cli(url, key, "scores", "summary", "--queue", q, "--period", "24h", "-o", "json"),
			providersView(t, cli(url, key, "providers", "-o", "json")),
		}
	}
	before := views(a.url, acmeKey)
	if day() == firstDay {
		require.Contains(t, before[1], `"spent_usd":0.031`)
	}
	require.NotContains(t, before[1], "global")
	require.Contains(t, before[3], `"queues":["`+q+`"]`)

	file := filepath.Join(t.TempDir(), "acme.ndjson")
	cli(a.url, testAdminKey, "backup", "--namespace", "acme", "-o", file)
	_, recs := readBackup(t, file)
	kinds := map[string]int{}
	for _, r := range recs {
		kinds[r.Kind]++
		if r.Budget != nil {
			require.Equal(t, "acme", r.Budget.Namespace, "the default namespace's budget stays out")
		}
		if r.Provider != nil {
			require.Equal(t, "acme", r.Provider.Namespace, "the default namespace's provider stays out")
		}
		if r.Queue != nil {
			require.Equal(t, "anthropic", r.Queue.Provider)
		}
	}
	require.Equal(t, map[string]int{"namespace": 1, "key": 1, "budget": 2, "job": 2, "cache": 1, "usage_day": 1, "provider": 1, "queue": 1}, kinds)

	out := cli(b.url, testAdminKey, "restore", file)
	for _, line := range []string{"jobs       2 restored, 0 existed", "budgets    2 restored, 0 existed", "cache      1 restored, 0 existed",
		"usage days 1 restored, 0 existed", "providers  1 restored, 0 existed"} {
		require.Contains(t, out, line)
	}
	acmeB, acmeKeyB := nsKey(b.url) // the restored key has no hash (keys=metadata)
	after := views(b.url, acmeKeyB)
	for i, what := range []string{"usage", "budgets", "scores", "providers"} {
		if what == "budgets" && day() != firstDay {
			continue
		}
		require.JSONEq(t, lastLine(before[i]), lastLine(after[i]), what)
	}
	moved := func(id string) string {
		return fmt.Sprintf("%s%d_%s", router.JobIDPrefix, router.New(3).ShardForQueue("acme/"+q), ulidOf(id))
	}
	require.NotEqual(t, routed, moved(routed))
	next := fetch(b.url, acmeB)
	require.Equal(t, moved(routed), next.JobID)
	require.Contains(t, string(must(b.url, "GET", "/api/v1/jobs/"+next.JobID, nil, acmeB, 200)), `"target":"gpt"`)
	hit := string(must(b.url, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"prompt": "capital of France"}, "cache": cache}, acmeB, 201))
	require.Contains(t, hit, `"cached":true`)
	require.Contains(t, hit, `"cached_from":"`+moved(cached)+`"`)
	require.True(t, strings.Contains(hit, `"answer":"Paris"`), hit)

	out = cli(b.url, testAdminKey, "restore", file)
	require.Contains(t, out, "budgets    0 restored, 2 existed")
	require.Contains(t, out, "jobs       0 restored, 2 existed")
	require.Contains(t, out, "providers  0 restored, 1 existed")
	require.Equal(t, after[3], providersView(t, cli(b.url, acmeKeyB, "providers", "-o", "json")))

	// The restored queue keeps to its provider's 3 requests a minute: one
	// went to the routed job above, two more, then none.
	for range 3 {
		must(b.url, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{}}, acmeB, 201)
	}
	fetchN := func() int {
		t.Helper()
		code, out := doWith(t, "POST", b.url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w2", "count": 10}, acmeB)
		if code == 204 {
			return 0
		}
		require.Equal(t, 200, code, string(out))
		return len(decode[struct{ Jobs []fetched }](t, out).Jobs)
	}
	require.Equal(t, 2, fetchN(), "the rest of the minute's requests")
	require.Zero(t, fetchN(), "past the limit: nothing")
	if budgets := cli(b.url, acmeKeyB, "budgets", "-o", "json"); day() == firstDay {
		require.JSONEq(t, lastLine(after[1]), lastLine(budgets), "nothing added to the spend")
	}
}

// providersView is corvo providers -o json without what is the
// cluster's own — the shares' shard numbers, pending jobs and the last minute's use (a
// backup keeps neither): the limits, the queues and the shares' sizes.
func providersView(t *testing.T, out string) string {
	t.Helper()
	var v map[string][]map[string]any
	require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &v), out)
	for _, p := range v["providers"] {
		delete(p, "window")
		for _, sh := range p["shares"].([]any) {
			delete(sh.(map[string]any), "shard")
			delete(sh.(map[string]any), "window")
			delete(sh.(map[string]any), "pending") // the restored jobs wait differently
		}
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
