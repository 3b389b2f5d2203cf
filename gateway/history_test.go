package gateway

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/history"
	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// queueOnShard is a queue name (prefix-n) the router puts on shard sh.
func queueOnShard(t *testing.T, prefix string, sh int) string {
	t.Helper()
	rt := router.New(testEngine.Shards())
	for i := 0; i < 10000; i++ {
		if q := fmt.Sprintf("%s-%d", prefix, i); rt.ShardForQueue(q) == sh {
			return q
		}
	}
	t.Fatalf("no queue on shard %d", sh)
	return ""
}

// TestQueueHistoryMergesShards: two nodes each record the shards they host
// (A 0–1, B 2–3) over ten minutes of load; a third node hosting none
// answers the history of all four queues from them, each shard once, the
// totals their sums, and the same again on a second load (a reloaded
// page).
func TestQueueHistoryMergesShards(t *testing.T) {
	end := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	// The recorders' clock is an hour on: the gateways' own samples land
	// there, past the range asked (until=end).
	now := func() time.Time { return end.Add(time.Hour) }
	newRec := func() *history.Recorder {
		r, err := history.New(history.Config{Shards: testEngine.Shards(), Now: now})
		require.NoError(t, err)
		t.Cleanup(r.Close)
		return r
	}
	recA, recB := newRec(), newRec()
	queues := make([]string, 4)
	for sh := range queues {
		queues[sh] = queueOnShard(t, "hist-merge", sh)
	}
	// Shard sh's queue: enqueued (sh+1)·10 a bucket, completed sh·10,
	// pending sh+1.
	const buckets = 60
	start := end.Add(-(buckets - 1) * history.Step)
	for b := 0; b < buckets; b++ {
		at := start.Add(time.Duration(b) * history.Step)
		for sh, q := range queues {
			rec := recA
			if sh >= 2 {
				rec = recB
			}
			rec.Sample(sh, at, []history.QueueSample{{Name: q, Enqueued: int64((sh + 1) * 10 * (b + 1)), Completed: int64(sh * 10 * (b + 1)), Pending: int64(sh + 1)}})
		}
	}
	var addrA, addrB atomic.Pointer[string]
	targets := func(sh int) []string {
		p := addrB.Load()
		if sh < 2 {
			p = addrA.Load()
		}
		if p == nil {
			return nil
		}
		return []string{*p}
	}
	_, a := frontServer(t, Config{History: recA, Peer: peerTo(targets)}, hostingSet{testEngine, []int{0, 1}})
	addrA.Store(&a)
	_, b := frontServer(t, Config{History: recB, Peer: peerTo(targets)}, hostingSet{testEngine, []int{2, 3}})
	addrB.Store(&b)
	_, f := frontServer(t, Config{History: newRec(), Peer: peerTo(targets)}, hostingSet{testEngine, nil})

	path := fmt.Sprintf("/api/v1/queues/history?since=10m&until=%d", end.Unix())
	for _, q := range queues {
		path += "&queue=" + q
	}
	load := func() corvo.QueueHistory {
		code, body := callAt(t, "GET", "http://"+f+path, nil)
		require.Equal(t, 200, code, string(body))
		var h corvo.QueueHistory
		require.NoError(t, json.Unmarshal(body, &h))
		return h
	}
	h := load()
	require.Equal(t, 10, h.StepS)
	require.Len(t, h.T, buckets)
	require.Equal(t, start.Unix(), h.T[0])
	require.Equal(t, end.Unix(), h.T[buckets-1])
	require.Len(t, h.Queues, 4)
	byName := map[string]corvo.QueueHistorySeries{}
	for _, s := range h.Queues {
		byName[s.Name] = s
	}
	for sh, q := range queues {
		s, ok := byName[q]
		require.True(t, ok, q)
		require.Nil(t, s.EnqueuedPerS[0], "the first sample has no rate")
		for i := 1; i < buckets; i++ {
			require.Equal(t, float64(sh+1), *s.EnqueuedPerS[i], "%s point %d", q, i)
			require.Equal(t, float64(sh), *s.CompletedPerS[i])
			require.Equal(t, 0.0, *s.FailedPerS[i])
			require.Equal(t, int64(sh+1), *s.Pending[i])
		}
	}
	for i := 1; i < buckets; i++ {
		require.Equal(t, 10.0, *h.Total.EnqueuedPerS[i], "1+2+3+4 a second, each shard once")
		require.Equal(t, 6.0, *h.Total.CompletedPerS[i])
		require.Equal(t, int64(10), *h.Total.Pending[i])
	}
	require.Equal(t, h, load(), "a second load shows the same")

	// Coarser steps average the rates.
	code, body := callAt(t, "GET", "http://"+f+fmt.Sprintf("/api/v1/queues/history?since=10m&step=1m&until=%d&queue=%s", end.Unix(), queues[3]), nil)
	require.Equal(t, 200, code, string(body))
	var coarse corvo.QueueHistory
	require.NoError(t, json.Unmarshal(body, &coarse))
	require.Equal(t, 60, coarse.StepS)
	require.Len(t, coarse.T, 10)
	require.Equal(t, 4.0, *coarse.Queues[0].EnqueuedPerS[9])
	require.Equal(t, 4.0, *coarse.Total.EnqueuedPerS[9])

	for _, bad := range []string{"step=15s", "step=-10s", "since=25h", "since=abc", "until=x", "queue=bad%20name", "since=24h&step=1s"} {
		code, body := callAt(t, "GET", "http://"+f+"/api/v1/queues/history?"+bad, nil)
		require.Equal(t, 400, code, "%s: %s", bad, body)
	}
	_, none := frontServer(t, Config{}, testEngine)
	code, _ = callAt(t, "GET", "http://"+none+"/api/v1/queues/history", nil)
	require.Equal(t, 503, code, "no recorder, no history")
}
