package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/router"
)

// hostingSet is the real engine, except that this node hosts only some
// shards.
type hostingSet struct {
	Engine
	hosts []int
}

func (h hostingSet) Hosts(sh int) bool { return slices.Contains(h.hosts, sh) }

// heldMirror is the shared mirror as a node that holds only some shards
// has it: a search sees the rows of those shards alone.
type heldMirror struct {
	*mirror.Mirror
	shards []int
}

func (m heldMirror) Holds(sh int) bool { return slices.Contains(m.shards, sh) }

func (m heldMirror) Search(ctx context.Context, f mirror.Filter) (*mirror.Page, error) {
	if f.Shards == nil {
		f.Shards = m.shards
	} else {
		f.Shards = slices.DeleteFunc(slices.Clone(f.Shards), func(sh int) bool { return !m.Holds(sh) })
	}
	return m.Mirror.Search(ctx, f)
}

// cluster3 starts two backends over the shared engine, A holding shards
// 0–1 and B shards 2–3, and a front node that hosts front (its mirror
// holding only held of them), whose other shards live on A and B.
func cluster3(t *testing.T, front, held []int) (frontURL, a, b string) {
	t.Helper()
	// Set after the servers start, read by their background samplers.
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
	_, a = frontServer(t, Config{Mirror: heldMirror{testMirror, []int{0, 1}}, Peer: peerTo(targets)}, hostingSet{testEngine, []int{0, 1}})
	addrA.Store(&a)
	_, b = frontServer(t, Config{Mirror: heldMirror{testMirror, []int{2, 3}}, Peer: peerTo(targets)}, hostingSet{testEngine, []int{2, 3}})
	addrB.Store(&b)
	_, f := frontServer(t, Config{Mirror: heldMirror{testMirror, held}, Peer: peerTo(targets)}, hostingSet{testEngine, front})
	return "http://" + f, a, b
}

// searchAt runs a search on one node and returns its status and body
// without duration_ms (the one field that differs between two nodes).
func searchAt(t *testing.T, url string, f map[string]any) (int, map[string]json.RawMessage) {
	t.Helper()
	code, body := callAt(t, "POST", url+"/api/v1/jobs/search", f)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m), string(body))
	delete(m, "duration_ms")
	return code, m
}

// walk pages through a search with limit 50 and returns every page.
func walk(t *testing.T, url string, filter map[string]any) []map[string]json.RawMessage {
	t.Helper()
	var pages []map[string]json.RawMessage
	f := map[string]any{"limit": 50}
	for k, v := range filter {
		f[k] = v
	}
	for {
		code, p := searchAt(t, url, f)
		require.Equal(t, 200, code, "%s", p)
		pages = append(pages, p)
		if string(p["has_more"]) != "true" {
			return pages
		}
		var cur string
		require.NoError(t, json.Unmarshal(p["cursor"], &cur))
		f["cursor"] = cur
	}
}

// TestSearchFanOutMatchesFullNode: through a node that lacks shards, a
// search over every queue returns byte for byte the pages of a node that
// has them all — rows, order, totals, cursors — over a cursor walk of 400
// jobs in pages of 50, in several sort orders (ties broken by job ID across
// shards); with parts searched locally, on one node, or on two.
func TestSearchFanOutMatchesFullNode(t *testing.T) {
	t.Parallel()
	set := uq("fanout")
	qs := queuesOnDistinctShards(t, "fanout", 4)
	var jobs []map[string]any
	for i := 0; i < 400; i++ {
		jobs = append(jobs, map[string]any{"queue": qs[i%4], "tags": map[string]string{"set": set},
			"priority": []string{"critical", "high", "normal"}[i%3], "payload": map[string]int{"i": i}})
	}
	for i := 0; i < 400; i += 100 { // four batches: many jobs share a creation time
		code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": jobs[i : i+100]})
		require.Equal(t, 201, code, string(body))
	}
	filter := map[string]any{"tags": map[string]string{"set": set}}
	waitSearchTotal(t, filter, 400)

	fronts := map[string]string{}
	fronts["hosts shard 1"], _, _ = cluster3(t, []int{1}, []int{1})
	fronts["hosts none"], _, _ = cluster3(t, nil, nil)
	fronts["hosts 0–1, holds 0"], _, _ = cluster3(t, []int{0, 1}, []int{0}) // shard 1 refilling: asked of A
	fronts["hosts all"], _, _ = cluster3(t, []int{0, 1, 2, 3}, []int{0, 1, 2, 3})
	for _, order := range []map[string]any{{}, {"order": "asc"}, {"sort": "priority", "order": "asc"}, {"sort": "priority"}, {"sort": "attempt"}} {
		f := map[string]any{}
		for k, v := range filter {
			f[k] = v
		}
		for k, v := range order {
			f[k] = v
		}
		want := walk(t, baseURL, f)
		require.Equal(t, 8, len(want), "400 jobs in pages of 50")
		seen := map[string]bool{}
		for _, p := range want {
			var rows []struct{ ID string }
			require.NoError(t, json.Unmarshal(p["jobs"], &rows))
			for _, r := range rows {
				require.False(t, seen[r.ID], "%s twice", r.ID)
				seen[r.ID] = true
			}
			require.Equal(t, "400", string(p["total"]))
		}
		require.Equal(t, 400, len(seen))
		for name, url := range fronts {
			got := walk(t, url, f)
			require.Equal(t, len(want), len(got), "%s %v: pages", name, order)
			for i := range want {
				for k := range want[i] {
					require.JSONEq(t, string(want[i][k]), string(got[i][k]), "%s %v page %d: %s", name, order, i, k)
				}
				require.Len(t, got[i], len(want[i]), "%s: no extra fields (keys are for node-to-node parts)", name)
			}
		}
	}
	// A queue and a job-ID prefix on a shard the front lacks.
	front := fronts["hosts shard 1"]
	for _, q := range qs {
		sh := router.New(4).ShardForQueue(q)
		for _, f := range []map[string]any{{"queue": q}, {"queue": q, "state": []string{"pending"}, "limit": 7},
			{"job_id_prefix": fmt.Sprintf("job_%d_", sh), "tags": filter["tags"], "limit": 7}} {
			code, want := searchAt(t, baseURL, f)
			require.Equal(t, 200, code)
			code, got := searchAt(t, front, f)
			require.Equal(t, 200, code, "%s", got)
			require.Equal(t, want, got, "shard %d %v", sh, f)
			require.Equal(t, "100", string(got["total"]))
		}
	}
}

// TestSearchFanOutParts: a part is ?shards= with the hop header: it
// searches only those shards, answers each row's keyset position, 503 if
// the node lacks one of them, 400 for a malformed list; a part whose node
// is down is asked of another node hosting its shards, and when none is
// left the search is a 503 with Retry-After, never a partial page.
func TestSearchFanOutParts(t *testing.T) {
	t.Parallel()
	set := uq("parts")
	qs := queuesOnDistinctShards(t, "parts", 4)
	var jobs []map[string]any
	for i := 0; i < 40; i++ {
		jobs = append(jobs, map[string]any{"queue": qs[i%4], "tags": map[string]string{"set": set}})
	}
	code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))
	filter := map[string]any{"tags": map[string]string{"set": set}}
	waitSearchTotal(t, filter, 40)

	_, a, _ := cluster3(t, nil, nil)
	code, body = callAt(t, "POST", "http://"+a+"/api/v1/jobs/search?shards=1", filter)
	require.Equal(t, 200, code, string(body))
	part := mustJSON[struct {
		Jobs []struct{ ID, Queue string }
		Keys []struct {
			V     int64
			ID    string
			Queue string
		}
		Total int
	}](t, body)
	require.Equal(t, 10, part.Total)
	require.Len(t, part.Keys, 10)
	for i, j := range part.Jobs {
		require.True(t, strings.HasPrefix(j.ID, "job_1_"), j.ID)
		require.Equal(t, j.ID, part.Keys[i].ID)
		require.Equal(t, j.Queue, part.Keys[i].Queue)
		require.Positive(t, part.Keys[i].V, "created_at")
	}
	code, body = callAt(t, "POST", "http://"+a+"/api/v1/jobs/search?shards=1,2", filter)
	require.Equal(t, 503, code, string(body))
	require.Contains(t, string(body), "shard 2 is not hosted on this node")
	for _, bad := range []string{"x", "4", "-1", "1,,2"} {
		code, body = callAt(t, "POST", "http://"+a+"/api/v1/jobs/search?shards="+bad, filter)
		require.Equal(t, 400, code, bad+": "+string(body))
	}

	// Shards 2–3 on a dead node, then on a dead node and B.
	dead := freeLocalAddr(t)
	var b string
	_, b = frontServer(t, Config{Mirror: heldMirror{testMirror, []int{2, 3}}}, hostingSet{testEngine, []int{2, 3}})
	for _, c := range []struct {
		name    string
		targets []string
		status  int
	}{{"dead", []string{dead}, 503}, {"dead then B", []string{dead, b}, 200}, {"none", nil, 503}} {
		targets := func(sh int) []string {
			if sh < 2 {
				return []string{a}
			}
			return c.targets
		}
		_, front := frontServer(t, Config{Mirror: heldMirror{testMirror, []int{}}, Peer: peerTo(targets)}, hostingSet{testEngine, nil})
		resp, err := httpc.Post("http://"+front+"/api/v1/jobs/search", "application/json", strings.NewReader(`{"tags":{"set":"`+set+`"}}`))
		require.NoError(t, err)
		var out struct {
			Total int
			Code  string
			Error string
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		resp.Body.Close()
		require.Equal(t, c.status, resp.StatusCode, "%s: %+v", c.name, out)
		if c.status == 503 {
			require.Equal(t, "1", resp.Header.Get("Retry-After"), c.name)
			require.Equal(t, "unavailable", out.Code)
			require.Contains(t, out.Error, "shard 2", c.name)
		} else {
			require.Equal(t, 40, out.Total, c.name)
		}
	}

	// A bad filter is a 400 from the node asked, before any part runs.
	front, _, _ := cluster3(t, nil, nil)
	code, body = callAt(t, "POST", front+"/api/v1/jobs/search", map[string]any{"payload_jq": ".a ="})
	require.Equal(t, 400, code, string(body))
	code, body = callAt(t, "POST", front+"/api/v1/jobs/search", map[string]any{"limit": 1001})
	require.Equal(t, 400, code, string(body))
}

// TestSearchShardsOfPrefix: a job_id_prefix narrows a search to the
// shards whose job-ID tag fits it. (The plan over other nodes is
// peer.TestSearchPlan.)
func TestSearchShardsOfPrefix(t *testing.T) {
	t.Parallel()
	s := New(Config{Logger: zerolog.Nop(), Peer: peerTo(func(int) []string { return nil }), ProviderRebalance: -1}, notHosting{Engine: testEngine})
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	for _, c := range []struct {
		prefix string
		want   []int
	}{{"job_1_", []int{1}}, {"job_1", []int{1}}, {"job_", []int{0, 1, 2, 3}}, {"jo", []int{0, 1, 2, 3}},
		{"job_2_01ABC", []int{2}}, {"job_12", []int{}}, {"x", []int{}}, {"JOB_1_", []int{}}} {
		require.Equal(t, c.want, s.searchShards(&searchRequest{JobIDPrefix: c.prefix}, "", nil), c.prefix)
	}
	q := uq("plan")
	require.Equal(t, []int{router.New(4).ShardForQueue(q)}, s.searchShards(&searchRequest{Queue: q}, "", nil))
}

// TestBulkByFilterThroughNodeMissingShards: a bulk action by filter on a
// node that lacks shards pages through the matches of every shard, at
// once and in the background.
func TestBulkByFilterThroughNodeMissingShards(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "fanbulk", 4)
	for _, async := range []bool{false, true} {
		set := uq("fanbulk-set")
		var jobs []map[string]any
		for i := 0; i < 240; i++ {
			jobs = append(jobs, map[string]any{"queue": qs[i%4], "tags": map[string]string{"set": set}, "priority": "normal"})
		}
		code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
		require.Equal(t, 201, code, string(body))
		filter := map[string]any{"tags": map[string]string{"set": set}}
		waitSearchTotal(t, filter, 240)

		front, _, _ := cluster3(t, []int{3}, []int{3})
		req := map[string]any{"filter": filter, "action": "change_priority", "priority": "critical", "async": async}
		code, body = callAt(t, "POST", front+"/api/v1/jobs/bulk", req)
		if !async {
			require.Equal(t, 200, code, string(body))
			require.Equal(t, 240, mustJSON[struct{ Affected int }](t, body).Affected, string(body))
		} else {
			require.Equal(t, 202, code, string(body))
			id := mustJSON[bulkAccepted](t, body).ID
			var st bulkStatus
			waitFor(t, "the bulk operation to finish", func() bool {
				code, body := callAt(t, "GET", front+"/api/v1/bulk/"+id, nil)
				require.Equal(t, 200, code, string(body))
				st = mustJSON[bulkStatus](t, body)
				return st.Status != "processing"
			})
			require.Equal(t, "completed", st.Status, "%+v", st)
			require.Equal(t, 240, st.Affected, "%+v", st)
			require.Equal(t, 240, st.Processed, "%+v", st)
		}
		crit := map[string]any{"tags": filter["tags"], "priority": "critical"}
		waitSearchTotal(t, crit, 240)
		require.Equal(t, 240, search(t, crit).Total, "async %v: every shard's jobs changed", async)
	}
}

// laggingMirror is the shared mirror with one shard that never catches up:
// a search that waits for it answers stale.
type laggingMirror struct {
	*mirror.Mirror
	behind int
}

func (m laggingMirror) Mark() []uint64 {
	mark := m.Mirror.Mark()
	mark[m.behind] = math.MaxUint64
	return mark
}

// TestSearchWaitsOnlyForItsShards: a search waits for the mirror to hold
// this node's writes only on the shards its filter can match, so a shard
// whose mirror lags does not hold up (or stale) a search of a queue that
// lives elsewhere; one over every shard waits for it and says stale.
func TestSearchWaitsOnlyForItsShards(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "lagwait", 2)
	behind := rt4.ShardForQueue(qs[1])
	_, front := frontServer(t, Config{Mirror: laggingMirror{testMirror, behind}, SearchWait: 200 * time.Millisecond}, testEngine)
	code, out := callAt(t, "POST", "http://"+front+"/api/v1/enqueue", map[string]any{"queue": qs[0]})
	require.Equal(t, 201, code, string(out))
	type page struct {
		Jobs  []json.RawMessage `json:"jobs"`
		Stale bool              `json:"stale"`
	}
	code, out = callAt(t, "POST", "http://"+front+"/api/v1/jobs/search", map[string]any{"queue": qs[0]})
	require.Equal(t, 200, code, string(out))
	p := mustJSON[page](t, out)
	require.False(t, p.Stale, "a lagging shard the queue is not on made the search stale")
	require.Len(t, p.Jobs, 1)
	code, out = callAt(t, "POST", "http://"+front+"/api/v1/jobs/search", map[string]any{"queue": qs[1]})
	require.Equal(t, 200, code, string(out))
	require.True(t, mustJSON[page](t, out).Stale, "the queue's own shard lags")
	code, out = callAt(t, "POST", "http://"+front+"/api/v1/jobs/search", map[string]any{})
	require.Equal(t, 200, code, string(out))
	require.True(t, mustJSON[page](t, out).Stale, "a search over every shard waits for the lagging one")
}
