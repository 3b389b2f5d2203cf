package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// TestClusterFetchWaitsOnEveryNode: a 3-node cluster whose 6 shards each
// live on one node (--replicas 1, two per node), a fetch through one node
// over a queue on every shard (so its queues live on all three nodes).
// A job enqueued on another node's shard while the fetch long-polls is
// handed to it before the long-poll's (generous) timeout; then many
// fetchers through every node, with count 3, against producers through
// every node: no fetch gets more than its count, and every job is handed
// out exactly once.
func TestClusterFetchWaitsOnEveryNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	nodes, v := newSpreadCluster(t)
	n1 := nodes[0]
	self, ok := clusterStatusOf(t, n1)
	require.True(t, ok)
	// One queue per shard, and the shards n1 does not host.
	rt := router.New(6)
	queues := make([]string, 6)
	for i := 0; ; i++ {
		q := fmt.Sprintf("fw.q%d", i)
		if sh := rt.ShardForQueue(q); queues[sh] == "" {
			queues[sh] = q
		}
		if done := func() bool {
			for _, q := range queues {
				if q == "" {
					return false
				}
			}
			return true
		}(); done {
			break
		}
	}
	var remote []string
	for _, sh := range v.Shards {
		require.Len(t, sh.Placed, 1)
		if sh.Placed[0] != self.NodeID {
			remote = append(remote, queues[sh.ShardID])
		}
	}
	require.Len(t, remote, 4, "n1 hosts two of the six shards")

	type fetched struct {
		code int
		jobs []string
		err  error
	}
	fetch := func(s *server, count int, timeout float64) fetched {
		code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": queues, "worker_id": "fw", "count": count, "timeout": timeout})
		f := fetched{code: code}
		if code == 200 {
			var r struct {
				Jobs []struct {
					JobID string `json:"job_id"`
				} `json:"jobs"`
			}
			f.err = json.Unmarshal(body, &r)
			for _, j := range r.Jobs {
				f.jobs = append(f.jobs, j.JobID)
			}
		} else if code != 204 {
			f.err = fmt.Errorf("fetch: %d %s", code, body)
		}
		return f
	}
	enqueue := func(s *server, q string) string {
		code, body := do(t, "POST", s.url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]int{}})
		require.Equal(t, 201, code, string(body))
		return decode[struct {
			JobID string `json:"job_id"`
		}](t, body).JobID
	}

	// A job on another node's shard reaches a fetch waiting through n1.
	const longPoll = 60.0
	for i, q := range remote[:2] {
		done := make(chan fetched, 1)
		start := time.Now()
		go func() { done <- fetch(n1, 2, longPoll) }()
		id := enqueue(nodes[1+i], q)
		f := <-done
		require.NoError(t, f.err)
		require.Equal(t, 200, f.code, "the job on %s was not handed out during the long-poll", q)
		require.Equal(t, []string{id}, f.jobs)
		require.Less(t, time.Since(start), time.Duration(longPoll*float64(time.Second)))
	}

	// Many fetchers through every node, producers through every node.
	const total = 240
	var (
		mu       sync.Mutex
		seen     = map[string]int{}
		over     atomic.Int64
		produced = make(chan string, total)
		wg       sync.WaitGroup
		stop     atomic.Bool
	)
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range total / 3 {
				produced <- enqueue(nodes[(p+i)%3], queues[(p*7+i)%6])
			}
		}()
	}
	var fetchErr atomic.Value
	giveUp := time.AfterFunc(2*time.Minute, func() { stop.Store(true) }) // then the counts below fail
	defer giveUp.Stop()
	var fw sync.WaitGroup
	for w := range 9 {
		fw.Add(1)
		go func() {
			defer fw.Done()
			for !stop.Load() {
				f := fetch(nodes[w%3], 3, 2)
				if f.err != nil {
					fetchErr.Store(f.err)
					return
				}
				if len(f.jobs) > 3 {
					over.Add(1)
				}
				mu.Lock()
				for _, id := range f.jobs {
					seen[id]++
				}
				n := len(seen)
				mu.Unlock()
				for _, id := range f.jobs {
					code, body := do(t, "POST", nodes[(w+1)%3].url+"/api/v1/ack/"+id, map[string]any{})
					if code != 200 {
						fetchErr.Store(fmt.Errorf("ack %s: %d %s", id, code, body))
						return
					}
				}
				if n >= total {
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	close(produced)
	fw.Wait()
	if err, _ := fetchErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	require.Zero(t, over.Load(), "a fetch got more than its count")
	n := 0
	for id := range produced {
		n++
		require.Equal(t, 1, seen[id], "job %s handed out %d times", id, seen[id])
	}
	require.Equal(t, total, n)
	require.Len(t, seen, total, "only the produced jobs were handed out")
}
