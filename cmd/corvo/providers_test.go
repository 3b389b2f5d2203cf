package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestProvidersAcrossShards: a provider set and linked through the CLI
// on a cluster whose shards live on different nodes; two queues on
// different shards, with more jobs than the pool, and workers fetching
// both as fast as they can through every node: together they get
// exactly the provider's requests per minute, each shard its half, and
// nothing more while the window holds them; acks with usage fill the
// token window; deleting the provider unlinks the queues.
func TestProvidersAcrossShards(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	nodes, _ := newSpreadCluster(t)
	rt := router.New(6)
	var queues []string
	for i := 0; len(queues) < 2; i++ {
		q := fmt.Sprintf("prov.q%d", i)
		if len(queues) == 0 || rt.ShardForQueue(q) != rt.ShardForQueue(queues[0]) {
			queues = append(queues, q)
		}
	}
	run := func(via *server, want int, args ...string) string {
		t.Helper()
		out, code := runCLI(t, via.url, args...)
		require.Equal(t, want, code, "corvo %v:\n%s", args, out)
		return out
	}
	const rpm = 30
	require.Equal(t, "fake-llm: rpm 30, input tpm 100000, output tpm -\n",
		run(nodes[0], 0, "providers", "set", "fake-llm", "--rpm", fmt.Sprint(rpm), "--input-tpm", "100000"))
	run(nodes[0], exitUsage, "providers", "set", "fake-llm")
	for i, q := range queues {
		require.Equal(t, q+": provider fake-llm\n", run(nodes[(i+1)%3], 0, "providers", "link", q, "fake-llm"))
	}
	run(nodes[0], exitNotFound, "providers", "link", queues[0], "no-such")

	var jobs []map[string]any
	for i := 0; i < 2*rpm; i++ {
		for _, q := range queues {
			jobs = append(jobs, map[string]any{"queue": q, "payload": map[string]int{"i": i}})
		}
	}
	code, body := do(t, "POST", nodes[0].url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))

	// Workers fetch both queues flat out until a long-poll comes back
	// empty: with jobs left in both, only the provider stops them.
	var mu sync.Mutex
	got := map[string][]string{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			via := nodes[w%3]
			for {
				code, body := do(t, "POST", via.url+"/api/v1/fetch", map[string]any{"queues": queues, "worker_id": fmt.Sprint("pw-", w), "count": 4, "timeout": 1})
				if code == 204 {
					return
				}
				require.Equal(t, 200, code, string(body))
				var r struct{ Jobs []fetched }
				require.NoError(t, json.Unmarshal(body, &r))
				mu.Lock()
				for _, j := range r.Jobs {
					got[j.Queue] = append(got[j.Queue], j.JobID)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, got[queues[0]], rpm/2, "one shard's half of the pool")
	require.Len(t, got[queues[1]], rpm/2)
	code, _ = do(t, "POST", nodes[2].url+"/api/v1/fetch", map[string]any{"queues": queues, "worker_id": "late", "count": 10, "timeout": 2})
	require.Equal(t, 204, code, "the window still holds the pool")

	// Usage reported on acks fills the input token window.
	var input int64
	for i, id := range got[queues[0]][:5] {
		u := corvo.Usage{InputTokens: int64(100 * (i + 1)), OutputTokens: 7, Model: "fake", Provider: "fake-llm"}
		input += u.InputTokens
		code, body := do(t, "POST", nodes[i%3].url+"/api/v1/ack/"+id, map[string]any{"usage": u})
		require.Equal(t, 200, code, string(body))
	}
	var list struct{ Providers []corvo.Provider }
	require.NoError(t, json.Unmarshal([]byte(run(nodes[1], 0, "providers", "list", "-o", "json")), &list))
	require.Len(t, list.Providers, 1)
	p := list.Providers[0]
	require.ElementsMatch(t, queues, p.Queues)
	require.Equal(t, int64(rpm), p.Window.Requests)
	require.Equal(t, input, p.Window.InputTokens)
	require.Equal(t, int64(35), p.Window.OutputTokens)
	require.Len(t, p.Shares, 2)
	for _, s := range p.Shares {
		require.Equal(t, int64(rpm/2), *s.RPM)
		require.Equal(t, int64(rpm/2), s.Window.Requests)
	}
	require.Regexp(t, `fake-llm\s+30\s+100000\s+-\s+30\s+1500\s+35\s+`, run(nodes[2], 0, "providers"))

	require.Equal(t, "deleted\n", run(nodes[2], 0, "providers", "delete", "fake-llm"))
	run(nodes[2], exitNotFound, "providers", "delete", "fake-llm")
	code, body = do(t, "GET", nodes[0].url+"/api/v1/queues", nil)
	require.Equal(t, 200, code, string(body))
	for _, q := range decode[corvo.QueueList](t, body).Queues {
		require.Nil(t, q.Provider, q.Name)
	}
	code, body = do(t, "POST", nodes[1].url+"/api/v1/fetch", map[string]any{"queues": queues, "worker_id": "after", "count": 100, "timeout": 5})
	require.Equal(t, 200, code, "unlinked, the queues hand out their jobs: %s", body)
}

// TestProviderRebalanceUneven: a provider's two queues on different
// shards, one with far more jobs than the limit and one idle. Without
// rebalancing the busy one would get half the limit a minute; with it
// (every 200ms here) it gets nearly all of it within the first minute,
// and never more than the limit: the idle queue, given a job, fetches it
// within its floor and then nothing more is handed out in the window.
func TestProviderRebalanceUneven(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t, "--shards", "4", "--provider-rebalance", "200ms")
	rt := router.New(4)
	busy, idle := "rebal.busy", ""
	for i := 0; idle == ""; i++ {
		if q := fmt.Sprintf("rebal.idle%d", i); rt.ShardForQueue(q) != rt.ShardForQueue(busy) {
			idle = q
		}
	}
	const rpm = 60
	code, body := do(t, "PUT", s.url+"/api/v1/providers", map[string]any{"name": "fake-llm", "rpm_limit": rpm})
	require.Equal(t, 200, code, string(body))
	for _, q := range []string{busy, idle} {
		code, body = do(t, "POST", s.url+"/api/v1/queues/"+q+"/provider", map[string]any{"provider": "fake-llm"})
		require.Equal(t, 200, code, string(body))
	}
	var jobs []map[string]any
	for i := 0; i < 2*rpm; i++ {
		jobs = append(jobs, map[string]any{"queue": busy, "payload": map[string]int{"i": i}})
	}
	code, body = do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))

	fetch := func(q string, timeout int) int {
		code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "count": 10, "timeout": timeout})
		if code == 204 {
			return 0
		}
		require.Equal(t, 200, code, string(body))
		var r struct{ Jobs []fetched }
		require.NoError(t, json.Unmarshal(body, &r))
		return len(r.Jobs)
	}
	// Fetch the busy queue for most of one window (everything fetched
	// lies in the minute after the first fetch), stopping early once it
	// has all the rebalanced share can give.
	got := fetch(busy, 5)
	require.Positive(t, got)
	start := time.Now()
	for got < rpm-1 && time.Since(start) < 45*time.Second {
		got += fetch(busy, 1)
	}
	require.Greater(t, got, rpm*3/4, "the busy queue gets most of the limit, not half")
	require.LessOrEqual(t, got, rpm)
	// The idle queue fetches a job that arrives (its floor), and then the
	// pool is at its limit: nothing more from either.
	code, body = do(t, "POST", s.url+"/api/v1/enqueue", map[string]any{"queue": idle, "payload": map[string]int{}})
	require.Equal(t, 201, code, string(body))
	require.Equal(t, 1, fetch(idle, 5))
	require.Equal(t, 0, fetch(busy, 1))
	var list struct{ Providers []corvo.Provider }
	code, body = do(t, "GET", s.url+"/api/v1/providers", nil)
	require.Equal(t, 200, code, string(body))
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list.Providers, 1)
	require.Equal(t, int64(got+1), list.Providers[0].Window.Requests, "all of them in the window: one minute's count")
	require.LessOrEqual(t, list.Providers[0].Window.Requests, int64(rpm), "never more than the limit in a minute")
}
