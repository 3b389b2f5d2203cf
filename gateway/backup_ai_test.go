package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/node"
	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// openTestNode opens a node of its own (shards shards, open loopback
// API) for the test, closed when it ends, and returns its URL.
func openTestNode(t *testing.T, shards int) string {
	t.Helper()
	return openTestNodeFlush(t, shards, 10*time.Millisecond)
}

// openTestNodeFlush is openTestNode with the mirror's flush window.
func openTestNodeFlush(t *testing.T, shards int, flush time.Duration) string {
	t.Helper()
	raft, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	raftAddr := raft.Addr().String()
	raft.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Open(ctx, node.Config{DataDir: t.TempDir(), Bind: "127.0.0.1:0", RaftBind: raftAddr, Shards: shards, Logger: zerolog.Nop(),
		ClusterSecret: gateway.TestClusterSecret, Gateway: gateway.Config{EventsKeepalive: gateway.TestEventsKeepalive},
		Test: node.TestConfig{RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 20 * time.Millisecond, MirrorFlushWindow: flush}})
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	t.Cleanup(func() { n.Close() })
	return fmt.Sprintf("http://%s", n.Addr())
}

// nodeHTTP keeps no connection open: the test's nodes close when it
// ends, and the leak check after the tests finds none left.
var nodeHTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// do calls url through nodeHTTP: a JSON body (or a string as is); it
// answers the status and body.
func do(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	return gateway.CallWith(t, nodeHTTP, method, url, body)
}

// TestBackupRestoreAIState: a backup of a node with usage (heartbeat,
// fail and ack reports), budgets with today's spend, scores, a
// result-cache entry and a routed job moved to its fallback, restored
// into a fresh node of another shard count, gives the same usage summary,
// budgets list (today's spend included), scores summary and routing, and
// the cache answers a hit with the restored job's result; providers and
// the queues' links to them come back, the shares worked out on the
// restored cluster's shards (a fetch past a queue's share gets nothing);
// a second restore duplicates nothing.
func TestBackupRestoreAIState(t *testing.T) {
	if os.Getenv("CORVO_GATEWAY_NO_SERVER") != "" {
		t.Skip("needs nodes")
	}
	t.Parallel()
	// The budgets list today's spend: what they say is compared only when
	// no UTC midnight came during the test.
	day := func() string { return time.Now().UTC().Format(time.DateOnly) }
	firstDay := day()
	src, dst := openTestNode(t, 4), openTestNode(t, 3)
	must := func(url, method, path string, body any, want int) []byte {
		t.Helper()
		code, out := do(t, method, url+path, body)
		require.Equal(t, want, code, "%s %s: %s", method, path, out)
		return out
	}
	// A queue the two shard counts put on different shards: its jobs get
	// new IDs, and every reference follows.
	q := "llm"
	for i := 0; router.New(4).ShardForQueue(q) == router.New(3).ShardForQueue(q); i++ {
		q = fmt.Sprint("llm-", i)
	}
	for _, b := range []map[string]any{
		{"scope": "queue:" + q, "daily_usd": 100, "per_job_usd": 50, "on_exceed": "hold"},
		{"scope": "tag:team=search", "daily_usd": 1, "on_exceed": "reject"},
		{"scope": "global", "daily_usd": 1000, "on_exceed": "alert_only"},
	} {
		must(src, "PUT", "/api/v1/budgets", b, 200)
	}
	// A provider two queues share, on different shards of both clusters,
	// and one no queue links to.
	var pq []string
	for i := 0; len(pq) < 2; i++ {
		c := fmt.Sprint("prov-", i)
		if len(pq) == 0 || router.New(4).ShardForQueue(c) != router.New(4).ShardForQueue(pq[0]) &&
			router.New(3).ShardForQueue(c) != router.New(3).ShardForQueue(pq[0]) {
			pq = append(pq, c)
		}
	}
	must(src, "PUT", "/api/v1/providers", map[string]any{"name": "anthropic", "rpm_limit": 5, "input_tpm_limit": 100000}, 200)
	must(src, "PUT", "/api/v1/providers", map[string]any{"name": "spare", "output_tpm_limit": 700}, 200)
	for _, c := range pq {
		must(src, "POST", "/api/v1/queues/"+c+"/provider", map[string]any{"provider": "anthropic"}, 200)
	}
	enqueue := func(job map[string]any) string {
		t.Helper()
		return gateway.MustJSON[corvo.Enqueued](t, must(src, "POST", "/api/v1/enqueue", job, 201)).JobID
	}
	fetch := func(worker string) corvo.FetchedJob {
		t.Helper()
		return gateway.MustJSON[corvo.FetchedJob](t, must(src, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": worker}, 200))
	}
	usage := func(in, out int64, model string, cost float64) map[string]any {
		return map[string]any{"input_tokens": in, "output_tokens": out, "model": model, "provider": "fake", "cost_usd": cost}
	}
	cache := map[string]any{"enabled": true, "ttl": "1h"}

	// A job with a cache key: heartbeat and ack usage, two scores.
	cached := enqueue(map[string]any{"queue": q, "payload": map[string]any{"prompt": "capital of France"}, "tags": map[string]string{"team": "search"}, "cache": cache})
	require.Equal(t, cached, fetch("w1").JobID)
	must(src, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w1", "jobs": map[string]any{cached: map[string]any{"usage": usage(1000, 100, "claude", 0.02)}}}, 200)
	must(src, "POST", "/api/v1/ack/"+cached, map[string]any{"worker_id": "w1", "result": map[string]any{"answer": "Paris"}, "usage": usage(500, 50, "claude", 0.01)}, 200)
	for _, s := range []map[string]any{
		{"scorer": "human:ann", "dimensions": map[string]any{"accuracy": 0.75, "tone": -1}, "comment": "ok"},
		{"scorer": "human:bob", "dimensions": map[string]any{"accuracy": 1}},
	} {
		must(src, "POST", "/api/v1/jobs/"+cached+"/score", s, 201)
	}
	// A routed job, moved to its fallback by a provider error.
	routed := enqueue(map[string]any{"queue": q, "payload": map[string]any{}, "retry_backoff": "none",
		"routing": map[string]any{"prefer": "claude", "fallback": []string{"gpt", "local"}}})
	j := fetch("w2")
	require.Equal(t, routed, j.JobID)
	require.Equal(t, "claude", j.Routing.Target)
	must(src, "POST", "/api/v1/fail/"+routed, map[string]any{"worker_id": "w2", "attempt": 1, "error": "503", "provider_error": true,
		"usage": usage(10, 0, "claude", 0.001)}, 200)

	type view struct {
		usage, budgets, scores, providers []byte
		routing                           *corvo.JobRouting
	}
	read := func(url, routedID string) view {
		t.Helper()
		var v view
		v.usage = must(url, "GET", "/api/v1/usage/summary?period=24h&group_by=model", nil, 200)
		v.budgets = must(url, "GET", "/api/v1/budgets", nil, 200)
		v.scores = must(url, "GET", "/api/v1/scores/summary?period=24h&queue="+q, nil, 200)
		v.routing = gateway.MustJSON[corvo.Job](t, must(url, "GET", "/api/v1/jobs/"+routedID, nil, 200)).Routing
		// The shares' shard numbers are the cluster's: the rest is
		// compared.
		var ps map[string][]map[string]any
		require.NoError(t, json.Unmarshal(must(url, "GET", "/api/v1/providers", nil, 200), &ps))
		for _, p := range ps["providers"] {
			for _, sh := range p["shares"].([]any) {
				delete(sh.(map[string]any), "shard")
			}
		}
		var err error
		v.providers, err = json.Marshal(ps)
		require.NoError(t, err)
		return v
	}
	before := read(src, routed)
	if day() == firstDay {
		require.Contains(t, string(before.budgets), `"spent_usd":0.031`, "the budgets have today's spend")
	}
	require.Contains(t, string(before.usage), `"claude"`)
	require.Contains(t, string(before.scores), `"accuracy"`)
	require.Equal(t, "gpt", before.routing.Target)
	require.Contains(t, string(before.providers), `"rpm":3`, "the lower shard's share of 5")
	require.Contains(t, string(before.providers), `"rpm":2`)

	code, backupFile := do(t, "GET", src+"/api/v1/backup?namespace=default", nil)
	require.Equal(t, 200, code, string(backupFile))
	for _, kind := range []string{`"kind":"budget"`, `"kind":"cache"`, `"kind":"usage_day"`, `"usage":[`, `"scores":[`, `"routing":{`,
		`"kind":"provider"`, `"provider":"anthropic"`} {
		require.Contains(t, string(backupFile), kind)
	}
	rep := gateway.MustJSON[corvo.RestoreReport](t, must(dst, "POST", "/api/v1/restore", string(backupFile), 200))
	require.Equal(t, map[string]int{"job": 2, "budget": 3, "cache": 1, "usage_day": 1, "provider": 2, "queue": 2}, rep.Restored, "%+v", rep)
	require.Zero(t, rep.Failed)
	require.Equal(t, 2, rep.Remapped)

	rt := router.New(3)
	move := func(id string) string {
		_, ulid, _ := strings.Cut(strings.TrimPrefix(id, router.JobIDPrefix), "_")
		return fmt.Sprintf("%s%d_%s", router.JobIDPrefix, rt.ShardForQueue(q), ulid)
	}
	after := read(dst, move(routed))
	require.JSONEq(t, string(before.usage), string(after.usage), "the usage summary")
	if day() == firstDay {
		require.JSONEq(t, string(before.budgets), string(after.budgets), "the budgets with today's spend")
	}
	require.JSONEq(t, string(before.scores), string(after.scores), "the scores summary")
	require.Equal(t, before.routing, after.routing, "the route goes on at its fallback")
	require.JSONEq(t, string(before.providers), string(after.providers), "the providers, their queues and shares")
	next := gateway.MustJSON[corvo.FetchedJob](t, must(dst, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w3"}, 200))
	require.Equal(t, move(routed), next.JobID)
	require.Equal(t, "gpt", next.Routing.Target)

	// The cache answers a hit with the restored job's result.
	hit := must(dst, "POST", "/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"prompt": "capital of France"}, "cache": cache}, 201)
	res := gateway.MustJSON[corvo.Enqueued](t, hit)
	require.True(t, res.Cached, string(hit))
	require.Equal(t, move(cached), res.CachedFrom)
	require.JSONEq(t, `{"answer":"Paris"}`, string(res.Result))

	// Again: everything exists, nothing is added (the queues' settings
	// are set again, the same).
	rep = gateway.MustJSON[corvo.RestoreReport](t, must(dst, "POST", "/api/v1/restore", string(backupFile), 200))
	require.Equal(t, map[string]int{"queue": 2}, rep.Restored, "%+v", rep)
	require.Equal(t, map[string]int{"namespace": 1, "job": 2, "budget": 3, "cache": 1, "usage_day": 1, "provider": 2}, rep.Exists, "%+v", rep)
	require.Zero(t, rep.Failed)
	require.JSONEq(t, string(after.providers), string(read(dst, move(routed)).providers))

	// The restored queues share the provider's 5 requests a minute: 3
	// for the lower shard's, 2 for the other's, then nothing.
	lo, hi := pq[0], pq[1]
	if rt.ShardForQueue(lo) > rt.ShardForQueue(hi) {
		lo, hi = hi, lo
	}
	fetchN := func(queue string) int {
		t.Helper()
		code, out := do(t, "POST", dst+"/api/v1/fetch", map[string]any{"queues": []string{queue}, "count": 10, "worker_id": "w4"})
		if code == 204 {
			return 0
		}
		require.Equal(t, 200, code, string(out))
		return len(gateway.MustJSON[struct{ Jobs []corvo.FetchedJob }](t, out).Jobs)
	}
	for _, c := range pq {
		for range 4 {
			must(dst, "POST", "/api/v1/enqueue", map[string]any{"queue": c, "payload": map[string]any{}}, 201)
		}
	}
	require.Equal(t, 3, fetchN(lo), "the lower shard's share")
	require.Equal(t, 2, fetchN(hi))
	require.Zero(t, fetchN(lo), "past the share: nothing")
	require.Zero(t, fetchN(hi))
	if budgets := must(dst, "GET", "/api/v1/budgets", nil, 200); day() == firstDay {
		require.JSONEq(t, string(after.budgets), string(budgets), "nothing added to the spend")
	}

	// A cache entry that has expired is left out, and said so; a budget
	// no server would hold refuses the file, and nothing changes.
	file := func(rec string) string {
		kind, _, _ := strings.Cut(strings.TrimPrefix(rec, `{"kind":"`), `"`)
		return `{"kind":"header","format":1,"created_at":1,"shards":4,"namespace":"default","keys":"metadata"}` + "\n" + rec + "\n" +
			`{"kind":"trailer","counts":{"` + kind + `":1}}` + "\n"
	}
	rep = gateway.MustJSON[corvo.RestoreReport](t, must(dst, "POST", "/api/v1/restore", file(`{"kind":"cache","cache":{"queue":"`+q+`","key":"old",`+
		`"job_id":"`+move(cached)+`","completed_at":1,"expires_at":2}}`), 200))
	require.Equal(t, map[string]int{"cache": 1}, rep.Expired, "%+v", rep)
	require.Empty(t, rep.Restored)
	code, out := do(t, "POST", dst+"/api/v1/restore", file(`{"kind":"budget","budget":{"namespace":"default","on_exceed":"pause","daily_nanos":1}}`))
	require.Equal(t, 400, code, string(out))
	require.Contains(t, string(out), "on_exceed")
	if budgets := must(dst, "GET", "/api/v1/budgets", nil, 200); day() == firstDay {
		require.JSONEq(t, string(after.budgets), string(budgets), "nothing added to the spend")
	}
	// A provider with no limit, or a link to a name no provider could
	// have, refuses the file; a link to a provider neither the file nor
	// the server holds fails alone.
	for rec, want := range map[string]string{
		`{"kind":"provider","provider":{"namespace":"default","name":"x"}}`:                 "needs rpm_limit",
		`{"kind":"provider","provider":{"namespace":"default","name":"a b","rpm_limit":1}}`: "invalid character",
		`{"kind":"queue","queue":{"name":"` + pq[0] + `","provider":"a/b"}}`:                "invalid character",
	} {
		code, out := do(t, "POST", dst+"/api/v1/restore", file(rec))
		require.Equal(t, 400, code, string(out))
		require.Contains(t, string(out), want)
	}
	prev := read(dst, move(routed)).providers
	code, out = do(t, "POST", dst+"/api/v1/restore", file(`{"kind":"queue","queue":{"name":"`+pq[0]+`","provider":"nope"}}`))
	require.Equal(t, 207, code, string(out))
	rep = gateway.MustJSON[corvo.RestoreReport](t, out)
	require.Equal(t, 1, rep.Failed)
	require.Contains(t, rep.Errors[0], "no provider nope")
	require.JSONEq(t, string(prev), string(read(dst, move(routed)).providers), "the queue keeps its provider")
}
