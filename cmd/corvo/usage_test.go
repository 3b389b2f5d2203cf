package main

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// fakeLLM is the test's provider: what a call costs is a pure function of
// the prompt and the model, so the test knows every total in advance.
type fakeLLM struct{}

// price is USD per input and per output token, in nano-dollars.
var fakePrices = map[string][2]int64{"fake-large": {3000, 15000}, "fake-small": {250, 1250}}

func (fakeLLM) call(model, prompt string, step int) corvo.Usage {
	in := int64(100*len(prompt) + 37*step)
	out := int64(20*len(prompt) + 11*step)
	p := fakePrices[model]
	return corvo.Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: int64(step), Model: model, Provider: "fake",
		CostUSD: float64(in*p[0]+out*p[1]) / 1e9, LatencyMs: int64(200 + step)}
}

// usageSum adds reports up exactly (nano-dollars).
type usageSum struct {
	in, out, cacheRead, costNanos, jobs int64
}

func (s *usageSum) add(u corvo.Usage) {
	s.in += u.InputTokens
	s.out += u.OutputTokens
	s.cacheRead += u.CacheReadTokens
	s.costNanos += int64(u.CostUSD*1e9 + 0.5)
}

// TestUsageLLMWorkload: an LLM-shaped workload on a 3-node cluster whose
// six shards each live on one node (so a summary merges parts from every
// node): each job makes three calls to a fake provider, heartbeats the
// attempt's running total after each of the first two and acks with the
// third call's usage; some jobs fail their first attempt (a provider
// error, with that call's usage) and are retried. The usage sums exactly
// in each job, in the summary by queue, by model and by tag, and in the
// metrics of the three nodes together.
func TestUsageLLMWorkload(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	nodes, _ := newSpreadCluster(t)
	rt := router.New(6)
	var queues []string
	for i, seen := 0, map[int]bool{}; len(queues) < 6; i++ {
		q := fmt.Sprintf("llm.q%d", i)
		if sh := rt.ShardForQueue(q); !seen[sh] {
			seen[sh] = true
			queues = append(queues, q)
		}
	}
	models := []string{"fake-large", "fake-small"}
	tenants := []string{"acme", "globex", "initech"}
	byQueue, byModel, byTenant := map[string]*usageSum{}, map[string]*usageSum{}, map[string]*usageSum{}
	sum := func(m map[string]*usageSum, k string) *usageSum {
		if m[k] == nil {
			m[k] = &usageSum{}
		}
		return m[k]
	}
	perJob := map[string]*usageSum{}
	llm := fakeLLM{}
	const jobs = 24
	for i := 0; i < jobs; i++ {
		q, model, tenant := queues[i%len(queues)], models[i%len(models)], tenants[i%len(tenants)]
		via := nodes[i%len(nodes)]
		prompt := strings.Repeat("x", 5+i)
		code, body := do(t, "POST", via.url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{"prompt": prompt, "model": model},
			"tags": map[string]string{"tenant": tenant}, "retry_backoff": "none"})
		require.Equal(t, 201, code, string(body))
		id := decode[struct {
			JobID string `json:"job_id"`
		}](t, body).JobID
		js := &usageSum{jobs: 1}
		perJob[id] = js
		record := func(u corvo.Usage) {
			js.add(u)
			for _, s := range []*usageSum{sum(byQueue, q), sum(byModel, model), sum(byTenant, tenant)} {
				s.add(u)
			}
		}
		worker := fmt.Sprintf("llm-worker-%d", i%3)
		attempts := 1 + i%4/3 // every fourth job fails once
		for attempt := 1; attempt <= attempts; attempt++ {
			wnode := nodes[(i+attempt)%len(nodes)]
			code, body := do(t, "POST", wnode.url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": worker, "timeout": 5})
			require.Equal(t, 200, code, string(body))
			f := decode[fetched](t, body)
			require.Equal(t, id, f.JobID)
			var running corvo.Usage
			for step := 1; step <= 2; step++ {
				u := llm.call(model, prompt, step+10*attempt)
				record(u)
				running.Add(u)
				running.LatencyMs = 0 // latency is the call's, not cumulative here
				code, body := do(t, "POST", wnode.url+"/api/v1/heartbeat", map[string]any{"worker_id": worker,
					"jobs": map[string]any{id: map[string]any{"attempt": attempt, "usage": running, "progress": map[string]int{"current": step, "total": 3}}}})
				require.Equal(t, 200, code, string(body))
			}
			last := llm.call(model, prompt, 3+10*attempt)
			record(last)
			if attempt < attempts {
				code, body = do(t, "POST", wnode.url+"/api/v1/fail/"+id, map[string]any{"worker_id": worker, "attempt": attempt,
					"error": "fake provider: 529 overloaded", "usage": last})
				require.Equal(t, 200, code, string(body))
				continue
			}
			code, body = do(t, "POST", wnode.url+"/api/v1/ack/"+id, map[string]any{"worker_id": worker, "attempt": attempt,
				"result": map[string]string{"answer": "ok"}, "usage": last})
			require.Equal(t, 200, code, string(body))
		}
	}

	// Each job, read through any node.
	var total usageSum
	for id, want := range perJob {
		code, body := do(t, "GET", nodes[0].url+"/api/v1/jobs/"+id, nil)
		require.Equal(t, 200, code, string(body))
		doc := decode[corvo.Job](t, body)
		require.Equal(t, "completed", doc.State)
		require.NotNil(t, doc.Usage)
		got := usageSum{in: doc.Usage.InputTokens, out: doc.Usage.OutputTokens, cacheRead: doc.Usage.CacheReadTokens,
			costNanos: int64(doc.Usage.CostUSD*1e9 + 0.5), jobs: 1}
		require.Equal(t, *want, got, id)
		total.in, total.out, total.cacheRead, total.costNanos = total.in+want.in, total.out+want.out, total.cacheRead+want.cacheRead, total.costNanos+want.costNanos
	}

	// The summary, through each node (each merges the others' shards).
	for _, c := range []struct {
		groupBy string
		want    map[string]*usageSum
	}{{"queue", byQueue}, {"model", byModel}, {"tag:tenant", byTenant}} {
		for _, via := range nodes {
			code, body := do(t, "GET", via.url+"/api/v1/usage/summary?period=24h&group_by="+c.groupBy, nil)
			require.Equal(t, 200, code, string(body))
			s := decode[corvo.UsageSummary](t, body)
			require.Len(t, s.Groups, len(c.want), c.groupBy)
			var jobsSeen int64
			for _, g := range s.Groups {
				require.NotNil(t, g.Key)
				w := c.want[*g.Key]
				require.NotNil(t, w, "%s: unexpected group %q", c.groupBy, *g.Key)
				require.Equal(t, usageSum{in: w.in, out: w.out, cacheRead: w.cacheRead, costNanos: w.costNanos},
					usageSum{in: g.InputTokens, out: g.OutputTokens, cacheRead: g.CacheReadTokens, costNanos: int64(g.CostUSD*1e9 + 0.5)}, "%s %s", c.groupBy, *g.Key)
				jobsSeen += g.Jobs
			}
			require.Equal(t, int64(jobs), jobsSeen, c.groupBy)
			require.Equal(t, total.in, s.Totals.InputTokens)
			require.Equal(t, total.costNanos, int64(s.Totals.CostUSD*1e9+0.5))
			require.Equal(t, int64(jobs), s.Totals.Jobs)
		}
	}

	// The metrics: each report is counted by the node that applied it, so
	// the three nodes' counters add up to the totals.
	metric := map[string]float64{}
	for _, n := range nodes {
		code, body := do(t, "GET", n.url+"/api/v1/metrics", nil)
		require.Equal(t, 200, code)
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "corvo_usage_") {
				continue
			}
			name, rest, _ := strings.Cut(line, "{")
			labels, val, _ := strings.Cut(rest, "} ")
			v, err := strconv.ParseFloat(val, 64)
			require.NoError(t, err, line)
			for _, m := range models {
				if strings.Contains(labels, `model="`+m+`"`) {
					metric[name+"/"+m] += v
				}
			}
			metric[name] += v
		}
	}
	require.Equal(t, float64(total.in), metric["corvo_usage_input_tokens_total"])
	require.Equal(t, float64(total.out), metric["corvo_usage_output_tokens_total"])
	require.Equal(t, float64(total.cacheRead), metric["corvo_usage_cache_read_tokens_total"])
	require.InDelta(t, float64(total.costNanos)/1e9, metric["corvo_usage_cost_usd_total"], 1e-9)
	for _, m := range models {
		require.Equal(t, float64(byModel[m].in), metric["corvo_usage_input_tokens_total/"+m], m)
		require.InDelta(t, float64(byModel[m].costNanos)/1e9, metric["corvo_usage_cost_usd_total/"+m], 1e-9, m)
	}

	// The CLI reads the same summary.
	out, code := runCLIKey(t, nodes[1].url, testAdminKey, "usage", "--period", "7d", "--group-by", "model", "-o", "json")
	require.Equal(t, 0, code, out)
	s := decode[corvo.UsageSummary](t, []byte(out))
	require.Equal(t, total.in, s.Totals.InputTokens)
	table, code := runCLIKey(t, nodes[2].url, testAdminKey, "usage", "--group-by", "tag:tenant")
	require.Equal(t, 0, code, table)
	for _, tenant := range tenants {
		require.Contains(t, table, tenant)
	}
	// corvo search by model and by cost finds the jobs the workload made.
	out, code = runCLIKey(t, nodes[0].url, testAdminKey, "search", "--model", models[0], "-o", "json")
	require.Equal(t, 0, code, out)
	require.Len(t, decode[[]corvo.SearchHit](t, []byte(out)), jobs/len(models))
	var costs []int64
	for _, js := range perJob {
		costs = append(costs, js.costNanos)
	}
	slices.Sort(costs)
	threshold := costs[len(costs)/2]
	want := len(costs) - slices.Index(costs, threshold)
	out, code = runCLIKey(t, nodes[0].url, testAdminKey, "search", "--min-cost", fmt.Sprintf("%.9f", float64(threshold)/1e9), "-o", "json")
	require.Equal(t, 0, code, out)
	require.Len(t, decode[[]corvo.SearchHit](t, []byte(out)), want)
}
