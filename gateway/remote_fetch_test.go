package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/peer"
)

// fetchRaw long-polls a fetch at a server and returns the status, the jobs
// (as raw JSON) and the time it took (usable off the test goroutine).
func fetchRaw(addr string, req map[string]any) (int, []json.RawMessage, time.Duration, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, nil, 0, err
	}
	start := time.Now()
	resp, err := httpc.Post("http://"+addr+"/api/v1/fetch", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	switch {
	case err != nil:
		return 0, nil, took, err
	case resp.StatusCode == 204:
		return 204, nil, took, nil
	case resp.StatusCode != 200:
		return resp.StatusCode, nil, took, fmt.Errorf("fetch: %d %s", resp.StatusCode, out)
	case req["count"] == nil:
		return 200, []json.RawMessage{out}, took, nil
	}
	var r struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 200, nil, took, fmt.Errorf("fetch answer %s: %w", out, err)
	}
	return 200, r.Jobs, took, nil
}

func fetchAt(t *testing.T, addr string, req map[string]any) (int, []json.RawMessage, time.Duration) {
	t.Helper()
	code, jobs, took, err := fetchRaw(addr, req)
	require.NoError(t, err)
	return code, jobs, took
}

// jobIDOf reads a fetched job's ID ("" if it has none).
func jobIDOf(raw json.RawMessage) string {
	var j fetchedJob
	_ = json.Unmarshal(raw, &j)
	return j.JobID
}

// fetchedKeys is the field list of a fetched job, in order.
func fetchedKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	var keys []string
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
		case string:
			if depth == 1 && dec.More() {
				keys = append(keys, v)
				var skip json.RawMessage
				require.NoError(t, dec.Decode(&skip))
			}
		}
	}
	return keys
}

// TestRemoteFetchForwardedWhole: a fetch over queues on shards this node
// does not host, all hosted by one other node, is sent there whole and
// long-polls with that node's signals: a job enqueued during the poll is
// handed out at once; nothing → 204 at the timeout.
func TestRemoteFetchForwardedWhole(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "rfwdfetch", 3)
	all := newHostsOnly(0, 1, 2, 3)
	_, backend := frontServer(t, Config{}, all)
	eng := newHostsOnly(rt4.ShardForQueue(qs[0])) // hosts one: still forwarded, another node hosts all
	_, front := frontServer(t, Config{Peer: peerTo(func(int) []string { return []string{backend} })}, eng)
	req := map[string]any{"queues": qs, "worker_id": uq("w"), "timeout": 20}
	done := make(chan struct{})
	var id string
	go func() {
		defer close(done)
		code, jobs, _, err := fetchRaw(front, req)
		if err != nil {
			t.Error(err)
		}
		if code == 200 && len(jobs) == 1 {
			id = jobIDOf(jobs[0])
		}
	}()
	waitFor(t, "the poll to wait on the hosting node", func() bool { return all.watches.Load() > 0 })
	want := enqueue(t, map[string]any{"queue": qs[2], "payload": 1})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the forwarded long-poll was not woken by the new job")
	}
	require.Equal(t, want, id)
	code, _, took := fetchAt(t, front, map[string]any{"queues": qs, "timeout": 0.4})
	require.Equal(t, 204, code)
	require.GreaterOrEqual(t, took, 350*time.Millisecond)
	require.Zero(t, eng.wrong.Load())
	require.Zero(t, eng.watches.Load(), "the front did not poll itself")
}

// TestRemoteFetchSplit: a fetch over queues no single node hosts is split
// between this node and the nodes hosting the rest. Jobs arriving during
// the long-poll, here or there, are handed out; no fetch claims more than
// its count, none is lost or handed out twice; an empty poll is a 204 at
// its timeout; the jobs' JSON is the same as a local fetch's.
func TestRemoteFetchSplit(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "rsplit", 4)
	sh := make([]int, 4)
	for i, q := range qs {
		sh[i] = rt4.ShardForQueue(q)
	}
	// F hosts qs[0]'s shard, A qs[1]'s, B qs[2]'s and qs[3]'s.
	a := newHostsOnly(sh[1])
	b := newHostsOnly(sh[2], sh[3])
	_, aAddr := frontServer(t, Config{}, a)
	_, bAddr := frontServer(t, Config{}, b)
	f := newHostsOnly(sh[0])
	deadAddr := freeLocalAddr(t)
	targets := map[int][]string{sh[1]: {deadAddr, aAddr}, sh[2]: {bAddr}, sh[3]: {bAddr}}
	_, front := frontServer(t, Config{Peer: peerTo(func(s int) []string { return targets[s] })}, f)
	wid := uq("rsplit-w")

	// A fetch forwarded here by a node that took this one for a host of
	// every queue is refused, never forwarded again.
	req, err := http.NewRequest("POST", "http://"+front+"/api/v1/fetch", strings.NewReader(`{"queues":["`+qs[1]+`"]}`))
	require.NoError(t, err)
	req.Header.Set(peer.HopHeader, "1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get(peer.NotHostedHeader))

	// Empty: a 204 when the timeout passes.
	code, _, took := fetchAt(t, front, map[string]any{"queues": qs, "worker_id": wid, "timeout": 0.6, "count": 3})
	require.Equal(t, 204, code)
	require.GreaterOrEqual(t, took, 550*time.Millisecond)
	require.Less(t, took, 5*time.Second)

	// A job arriving on another node's queue during the poll.
	for _, i := range []int{1, 3, 0} {
		done := make(chan []json.RawMessage, 1)
		before := f.watches.Load()
		go func() {
			_, jobs, _, err := fetchRaw(front, map[string]any{"queues": qs, "worker_id": wid, "timeout": 20, "count": 5})
			if err != nil {
				t.Error(err)
			}
			done <- jobs
		}()
		waitFor(t, "the poll to start", func() bool { return f.watches.Load() > before })
		want := enqueue(t, map[string]any{"queue": qs[i], "payload": map[string]int{"i": i}, "tags": map[string]string{"k": "v"}})
		select {
		case jobs := <-done:
			require.Len(t, jobs, 1)
			require.Equal(t, want, jobIDOf(jobs[0]))
			var local json.RawMessage
			// The same job JSON as a local fetch: one of the same shape from
			// the real node.
			other := enqueue(t, map[string]any{"queue": qs[i], "payload": map[string]int{"i": i}, "tags": map[string]string{"k": "v"}})
			_, lj, _ := fetchAt(t, realAddr(), map[string]any{"queues": []string{qs[i]}, "worker_id": wid, "count": 1})
			require.Len(t, lj, 1)
			local = lj[0]
			require.Equal(t, other, jobIDOf(local))
			require.Equal(t, fetchedKeys(t, local), fetchedKeys(t, jobs[0]))
			code, _ := call(t, "POST", "/api/v1/ack/"+other, map[string]any{})
			require.Equal(t, 200, code)
		case <-time.After(10 * time.Second):
			t.Fatalf("job on %s not handed out during the poll", qs[i])
		}
	}

	// Many jobs, several pollers: at most count each, every job once.
	var all []string
	for i := 0; i < 20; i++ {
		all = append(all, enqueue(t, map[string]any{"queue": qs[i%4], "payload": i}))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				code, jobs, _, err := fetchRaw(front, map[string]any{"queues": qs, "worker_id": wid, "timeout": 0.5, "count": 3})
				if err != nil {
					t.Error(err)
					return
				}
				if code == 204 {
					return
				}
				if len(jobs) > 3 {
					t.Errorf("%d jobs for count 3", len(jobs))
				}
				mu.Lock()
				for _, j := range jobs {
					seen[jobIDOf(j)]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, id := range all {
		require.Equal(t, 1, seen[id], "job %s handed out %d times", id, seen[id])
	}
	require.Len(t, seen, len(all))
	// Nothing claimed and dropped: every job is active, none pending.
	var r struct {
		Queues []struct {
			Name    string `json:"name"`
			Pending int    `json:"pending"`
			Active  int    `json:"active"`
		} `json:"queues"`
	}
	code, body := call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NoError(t, json.Unmarshal(body, &r))
	active := 0
	for _, q := range r.Queues {
		for _, name := range qs {
			if q.Name == name {
				require.Zero(t, q.Pending, name)
				active += q.Active
			}
		}
	}
	require.Equal(t, len(all)+3, active, "the 20 jobs and the 3 fetched during the polls")
	require.Zero(t, f.wrong.Load(), "the front used a shard it does not host")
	require.Zero(t, a.wrong.Load())
	require.Zero(t, b.wrong.Load())
}
