package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/node"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// stepClock is a clock a test sets.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *stepClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// TestLatencyAgreesEverywhere runs a workload with known delays on a node
// whose clock the test steps (Raft entries are stamped with it): four
// jobs waiting 1, 2, 3 and 4 s before they start and running 5, 6, 7 and
// 8 s. GET /api/v1/queues, the history, /metrics and `corvo queues` must
// all say p95 wait 4 s and p95 run 8 s (the largest samples, exact), and
// p50 2 s and 6 s within the sketch's 1.6%.
func TestLatencyAgreesEverywhere(t *testing.T) {
	t.Parallel()
	clk := &stepClock{t: time.Now().Truncate(time.Second)}
	t0 := clk.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Open(ctx, node.Config{DataDir: t.TempDir(), Bind: "127.0.0.1:0", RaftBind: freeAddr(t), Shards: 2, Logger: zerolog.Nop(),
		Auth: node.AuthOff,
		Test: node.TestConfig{RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 20 * time.Millisecond, Clock: clk}})
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	defer n.Close()
	url := "http://" + n.Addr()

	const q = "lat.known"
	for range 4 {
		code, body := do(t, "POST", url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]any{}})
		require.Equal(t, 201, code, string(body))
	}
	type lease struct {
		ID      string `json:"job_id"`
		Attempt int    `json:"attempt"`
	}
	var leases []lease
	for i := 1; i <= 4; i++ {
		clk.set(t0.Add(time.Duration(i) * time.Second))
		code, body := do(t, "POST", url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "timeout": 0})
		require.Equal(t, 200, code, string(body))
		var l lease
		require.NoError(t, json.Unmarshal(body, &l))
		require.NotEmpty(t, l.ID, string(body))
		leases = append(leases, l)
	}
	for i, l := range leases {
		clk.set(t0.Add(time.Duration(i+1)*time.Second + time.Duration(i+5)*time.Second)) // 6, 8, 10, 12 s
		code, body := do(t, "POST", url+"/api/v1/ack/"+l.ID, map[string]any{"attempt": l.Attempt})
		require.Equal(t, 200, code, string(body))
	}
	n.History().Sync()

	check := func(where string, l *corvo.QueueLatency) {
		t.Helper()
		require.NotNil(t, l, where)
		require.NotNil(t, l.WaitMs, where)
		require.NotNil(t, l.RunMs, where)
		require.Equal(t, 300, l.WindowS, where)
		require.Equal(t, uint64(4), l.WaitMs.Samples, where)
		require.Equal(t, uint64(4), l.RunMs.Samples, where)
		require.Equal(t, 4000.0, l.WaitMs.P95, where)
		require.Equal(t, 4000.0, l.WaitMs.P99, where)
		require.Equal(t, 8000.0, l.RunMs.P95, where)
		require.Equal(t, 8000.0, l.RunMs.P99, where)
		require.InDelta(t, 2000.0, l.WaitMs.P50, 2000*0.016, where)
		require.InDelta(t, 6000.0, l.RunMs.P50, 6000*0.016, where)
	}
	queueOf := func(list corvo.QueueList) corvo.Queue {
		for _, x := range list.Queues {
			if x.Name == q {
				return x
			}
		}
		t.Fatalf("no queue %s in %+v", q, list)
		return corvo.Queue{}
	}

	code, body := do(t, "GET", url+"/api/v1/queues", nil)
	require.Equal(t, 200, code, string(body))
	var list corvo.QueueList
	require.NoError(t, json.Unmarshal(body, &list))
	api := queueOf(list).Latency
	check("GET /api/v1/queues", api)

	code, body = do(t, "GET", url+"/api/v1/queues/history?since=1m&queue="+q, nil)
	require.Equal(t, 200, code, string(body))
	var hist corvo.QueueHistory
	require.NoError(t, json.Unmarshal(body, &hist))
	require.Len(t, hist.Queues, 1)
	check("GET /api/v1/queues/history", hist.Queues[0].Latency)
	require.Equal(t, *api, *hist.Queues[0].Latency)

	code, body = do(t, "GET", url+"/api/v1/metrics", nil)
	require.Equal(t, 200, code)
	for _, m := range []struct {
		name, quantile string
		ms             float64
	}{{"wait", "0.5", api.WaitMs.P50}, {"wait", "0.95", api.WaitMs.P95}, {"wait", "0.99", api.WaitMs.P99},
		{"run", "0.5", api.RunMs.P50}, {"run", "0.95", api.RunMs.P95}, {"run", "0.99", api.RunMs.P99}} {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^corvo_queue_%s_seconds\{queue="%s",quantile="%s"\} (\S+)$`, m.name, regexp.QuoteMeta(q), regexp.QuoteMeta(m.quantile)))
		got := re.FindSubmatch(body)
		require.NotNil(t, got, "%s p%s in /metrics", m.name, m.quantile)
		v, err := strconv.ParseFloat(string(got[1]), 64)
		require.NoError(t, err)
		require.InDelta(t, m.ms/1e3, v, 1e-9, "%s p%s: /metrics says %v s, the API %v ms", m.name, m.quantile, v, m.ms)
	}
	require.Contains(t, string(body), "# TYPE corvo_queue_wait_seconds gauge")

	out, exit := runCLI(t, url, "queues", "-o", "json")
	require.Equal(t, 0, exit, out)
	var cli corvo.QueueList
	require.NoError(t, json.Unmarshal([]byte(out), &cli), out)
	require.Equal(t, *api, *queueOf(cli).Latency, "corvo queues -o json")
	out, exit = runCLI(t, url, "queues")
	require.Equal(t, 0, exit, out)
	require.Regexp(t, `WAIT P95\s+RUN P95`, out)
	require.Regexp(t, regexp.QuoteMeta(q)+`\s.*\s4\.00s\s+8\.00s\s*$`, out, "corvo queues shows p95 wait 4 s and run 8 s")

	// Past the window: no latency.
	clk.set(t0.Add(6 * time.Minute))
	code, body = do(t, "GET", url+"/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NoError(t, json.Unmarshal(body, &list))
	require.Nil(t, queueOf(list).Latency, "nothing started or finished in the last 5 minutes")
}
