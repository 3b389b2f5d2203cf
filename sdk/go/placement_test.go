package corvo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestShardForQueueGolden: the SDK's queue → shard rule is the server's
// (router.TestShardForQueueGolden pins the same table), namespaced queues
// hash as the server stores them, and job IDs give their shard.
func TestShardForQueueGolden(t *testing.T) {
	got := ""
	for _, q := range []string{"default", "emails.send", "emails.bulk", "reports", "a", "q0", "q1", "q2"} {
		got += fmt.Sprintf("%s=%d ", q, ShardForQueue(storedQueue("", q), 4))
	}
	if want := "default=2 emails.send=0 emails.bulk=0 reports=2 a=3 q0=1 q1=0 q2=2 "; got != want {
		t.Fatalf("shards %q, want %q", got, want)
	}
	if storedQueue("default", "q") != "q" || storedQueue("acme", "q") != "acme/q" {
		t.Fatal("stored queue names")
	}
	for id, want := range map[string]int{"job_3_01HX7Y2K3M0000000000000000": 3, "job_12_01HX": 12, "job_x_1": -1, "batch_1_x": -1, "job_7": -1} {
		if got := ShardOfJobID(id); got != want {
			t.Fatalf("ShardOfJobID(%q) = %d, want %d", id, got, want)
		}
	}
}

// planPlacement puts each shard's leader first, then its other placed
// nodes that are up; one node, or no shards, route nothing.
func TestPlanPlacement(t *testing.T) {
	st := &ClusterStatus{ShardCount: 2,
		Nodes:  []ClusterNode{{NodeID: 1, HTTPAddress: "a:1", Status: "up"}, {NodeID: 2, HTTPAddress: "b:1", Status: "up"}, {NodeID: 3, HTTPAddress: "c:1", Status: "down"}},
		Shards: []ShardStatus{{ShardID: 0, LeaderNode: 2, PlacedNodes: []uint64{1, 2, 3}}, {ShardID: 1, LeaderNode: 3, PlacedNodes: []uint64{3, 1}}}}
	p := planPlacement(st, "http://", "acme")
	if p == nil || p.ns != "acme" || fmt.Sprint(p.hosts) != "[[http://b:1 http://a:1] [http://a:1]]" {
		t.Fatalf("placement %+v", p)
	}
	st.Nodes = st.Nodes[:1]
	if p := planPlacement(st, "http://", ""); p != nil {
		t.Fatalf("one node: placement %+v", p)
	}
}

// forwardCounter counts, by route, the answers a node gave after
// forwarding the request to another (ForwardedHeader), and all answers.
type forwardCounter struct {
	mu        sync.Mutex
	forwarded map[string]int
	total     map[string]int
	fetches   []sentFetch
}

// sentFetch is a fetch a request carried (a fetch's, or an ack's next
// one): the node it went to and the queues it named.
type sentFetch struct {
	node   string
	queues []string
}

func (f *forwardCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if p := req.URL.Path; req.Body != nil && (p == "/api/v1/fetch" || strings.HasPrefix(p, "/api/v1/ack/")) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		var body struct {
			Queues []string `json:"queues"`
			Fetch  *struct {
				Queues []string `json:"queues"`
			} `json:"fetch"`
		}
		if json.Unmarshal(b, &body) == nil {
			if body.Fetch != nil {
				body.Queues = body.Fetch.Queues
			}
			if len(body.Queues) > 0 {
				f.mu.Lock()
				f.fetches = append(f.fetches, sentFetch{"http://" + req.URL.Host, body.Queues})
				f.mu.Unlock()
			}
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	route := req.URL.Path
	if strings.HasPrefix(route, "/api/v1/ack/") && route != "/api/v1/ack/batch" {
		route = "/api/v1/ack/{id}"
	}
	if strings.HasPrefix(route, "/api/v1/jobs/") {
		route = "/api/v1/jobs/{id}"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.forwarded == nil {
		f.forwarded, f.total = map[string]int{}, map[string]int{}
	}
	f.total[route]++
	if resp.Header.Get(ForwardedHeader) != "" {
		f.forwarded[route]++
	}
	return resp, nil
}

func (f *forwardCounter) counts() (forwarded, total map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.forwarded), maps.Clone(f.total)
}

// startSpreadCluster starts 3 nodes whose 6 shards each live on one node
// (--replicas 1), two led by each node, and returns the nodes' URLs.
func startSpreadCluster(t *testing.T, ctx context.Context) []string {
	t.Helper()
	first := startServer(t, "--node-id", "a", "--replicas", "1", "--shards", "6")
	join := first[len("http://"):]
	urls := []string{first, startServer(t, "--node-id", "b", "--join", join), startServer(t, "--node-id", "c", "--join", join)}
	c := New(first, WithoutPlacement())
	for {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		spread := len(st.Nodes) == 3 && len(st.Shards) == 6
		for _, n := range st.Nodes {
			spread = spread && n.Status == "up" && len(n.LeaderOf) == 2
		}
		for _, sh := range st.Shards {
			spread = spread && sh.LeaderNode != 0 && len(sh.PlacedNodes) == 1 && sh.PlacedNodes[0] == sh.LeaderNode && sh.Settled != nil && *sh.Settled
		}
		if spread {
			return urls
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the shards never spread: %+v", st)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A client that knows the placement sends enqueues (coalesced or not)
// and acks straight to the node hosting their shard: on a cluster whose
// shards each live on one node, none of them is forwarded, while the
// same load through one node without the placement is. A worker over
// queues on every node gets every job exactly once, fetching from each
// node only the queues it hosts.
func TestPlacementRoutesStraight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	urls := startSpreadCluster(t, ctx)
	// One queue per shard: every node hosts two of them.
	queuesOf := func(prefix string) []string {
		queues := make([]string, 6)
		for i, found := 0, 0; found < 6; i++ {
			q := fmt.Sprintf("%s.q%d", prefix, i)
			if sh := ShardForQueue(q, 6); queues[sh] == "" {
				queues[sh] = q
				found++
			}
		}
		return queues
	}
	const perQueue = 20
	load := func(c *Client, queues []string) map[string]bool {
		ids := map[string]bool{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range 8 { // concurrent calls: coalesced into batches
			wg.Go(func() {
				for i := g; i < perQueue*len(queues); i += 8 {
					res, err := c.Enqueue(ctx, EnqueueRequest{Queue: queues[i%len(queues)], Payload: map[string]int{"i": i}})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ids[res.JobID] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return ids
	}

	// Without the placement, through one node: most enqueues are forwarded.
	var off forwardCounter
	plain := New(urls[0], WithoutPlacement(), WithHTTPClient(&http.Client{Transport: &off}))
	load(plain, queuesOf("plain"))
	if fwd, _ := off.counts(); fwd["/api/v1/enqueue"]+fwd["/api/v1/enqueue/batch"] == 0 {
		t.Fatalf("without the placement no enqueue was forwarded: %v", fwd)
	}

	var on forwardCounter
	c := New(urls[0], WithHTTPClient(&http.Client{Transport: &on}))
	if err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if p := c.place.cur.Load(); p == nil || len(p.hosts) != 6 {
		t.Fatalf("placement %+v", p)
	}
	// Lone enqueues, a coalesced load, then a worker over every queue.
	queues := queuesOf("place")
	for _, q := range queues {
		if _, err := c.Enqueue(ctx, EnqueueRequest{Queue: q, Payload: map[string]int{"alone": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	want := load(c, queues)
	if len(want) != perQueue*len(queues) {
		t.Fatalf("%d job ids", len(want))
	}
	seen := map[string]int{}
	var mu sync.Mutex
	allSeen := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w := NewWorker(c, WorkerOptions{Concurrency: 12, FetchTimeout: 2 * time.Second}) // 4 slots a node: a poller each
	for _, q := range queues {
		w.Register(q, func(_ context.Context, j *JobContext) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			seen[j.JobID]++
			if len(seen) == len(want)+len(queues) {
				close(allSeen)
			}
			return nil, nil
		})
	}
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(wctx) }()
	select {
	case <-allSeen:
	case <-ctx.Done():
		t.Fatalf("the worker saw %d of %d jobs", len(seen), len(want)+len(queues))
	}
	stop()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s handled %d times", id, n)
		}
	}
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("job %s never handled", id)
		}
	}
	mu.Unlock()
	for id := range want {
		if j := waitState(t, c, id, "completed"); j.Attempt != 1 {
			t.Fatalf("job %+v", j)
		}
	}
	// The worker fetched from each node apart: every fetch, and every
	// fetch an ack carried, named only queues of the node it went to.
	on.mu.Lock()
	p := c.place.cur.Load()
	for _, f := range on.fetches {
		for _, q := range f.queues {
			if node := p.hosts[ShardForQueue(q, 6)][0]; node != f.node {
				t.Errorf("a fetch sent to %s named %s, on %s: %v", f.node, q, node, f.queues)
			}
		}
	}
	if len(on.fetches) == 0 {
		t.Error("no fetch seen")
	}
	on.mu.Unlock()
	fwd, total := on.counts()
	t.Logf("with the placement: requests %v, forwarded %v", total, fwd)
	for _, route := range []string{"/api/v1/enqueue", "/api/v1/enqueue/batch", "/api/v1/ack/{id}", "/api/v1/jobs/{id}"} {
		if fwd[route] != 0 {
			t.Errorf("%d %s forwarded", fwd[route], route)
		}
	}
	if total["/api/v1/enqueue/batch"] == 0 || total["/api/v1/ack/{id}"]+total["/api/v1/ack/batch"] == 0 {
		t.Fatalf("the load made no batch or no ack: %v", total)
	}
}

// When the node leading a queue's shard is killed, the client that routed
// to it moves on (the shard's other nodes, then its node list): enqueues,
// reads and a worker keep working.
func TestPlacementFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	first, firstCmd := startNode(t, "--node-id", "a", "--shards", "4")
	join := first[len("http://"):]
	second, secondCmd := startNode(t, "--node-id", "b", "--join", join)
	third, thirdCmd := startNode(t, "--node-id", "c", "--join", join)
	cmds := map[string]*testNode{first: firstCmd, second: secondCmd, third: thirdCmd}
	c := New(first)
	waitEveryShardOnEveryNode(t, ctx, c, 3)
	if err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	const queue = "place.failover"
	route := c.routeQueue(queue)
	if len(route) != 3 {
		t.Fatalf("route %v", route)
	}
	killed := cmds[route[0]]
	killed.kill()
	res, err := c.Enqueue(ctx, EnqueueRequest{Queue: queue, Payload: map[string]int{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.place.live(route); len(got) != 2 || got[0] == route[0] {
		t.Fatalf("the killed node is still routed to: %v", got)
	}
	handled := make(chan string, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w := NewWorker(c, WorkerOptions{Concurrency: 2, FetchTimeout: time.Second})
	w.Register(queue, func(_ context.Context, j *JobContext) (any, error) {
		handled <- j.JobID
		return nil, nil
	})
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(wctx) }()
	select {
	case id := <-handled:
		if id != res.JobID {
			t.Fatalf("handled %s, enqueued %s", id, res.JobID)
		}
	case <-ctx.Done():
		t.Fatal("the job was never handled")
	}
	waitState(t, c, res.JobID, "completed")
	stop()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}

// A worker over queues on two nodes shares its slots between them: while
// one node's backlog holds every slot but the one the other node's poller
// waits with, a backlog arriving on the other node gets its share (a slot
// that finished a job gives its slot back for that poller when its node
// holds more than its share), instead of one slot until the first backlog
// is done.
func TestWorkerSharesSlotsBetweenNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	urls := startSpreadCluster(t, ctx)
	c := New(urls[0])
	if err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	// Two queues whose shards two different nodes lead.
	var queues []string
	var nodes []string
	for i := 0; len(queues) < 2; i++ {
		q := fmt.Sprintf("share.q%d", i)
		node := c.routeQueue(q)[0]
		if len(nodes) == 0 || node != nodes[0] {
			queues, nodes = append(queues, q), append(nodes, node)
		}
	}
	enqueue := func(q string, n int) {
		reqs := make([]EnqueueRequest, n)
		for i := range reqs {
			reqs[i] = EnqueueRequest{Queue: q, Payload: map[string]int{"i": i}}
		}
		if _, err := c.EnqueueBatch(ctx, reqs, nil); err != nil {
			t.Fatal(err)
		}
	}
	const settled, measured = 30, 150
	enqueue(queues[0], 400)
	var mu sync.Mutex
	var order []string
	busy, done := make(chan struct{}), make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w := NewWorker(c, WorkerOptions{Concurrency: 8, FetchTimeout: 2 * time.Second})
	var from int // where the second backlog's measure starts
	for _, q := range queues {
		w.Register(q, func(jctx context.Context, j *JobContext) (any, error) {
			// A job that takes a while: the slots stay busy, so the
			// backlog that took them first would keep them.
			select {
			case <-time.After(2 * time.Millisecond):
			case <-jctx.Done():
			}
			mu.Lock()
			defer mu.Unlock()
			order = append(order, j.Queue)
			switch len(order) {
			case settled:
				close(busy)
			case from + measured:
				if from > 0 {
					close(done)
				}
			}
			return nil, nil
		})
	}
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(wctx) }()
	select {
	case <-busy:
	case <-ctx.Done():
		t.Fatal("the worker never took the first backlog")
	}
	enqueue(queues[1], 200)
	mu.Lock()
	from = len(order)
	mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the worker never handled the jobs measured")
	}
	stop()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	n := map[string]int{}
	for _, q := range order[from : from+measured] {
		n[q]++
	}
	// Its share is half the slots; one slot of eight would give it ~12 %.
	if n[queues[1]] < measured*3/10 {
		t.Fatalf("of the %d jobs handled once %s had a backlog too, it had %d (under 30%%): %v", measured, queues[1], n[queues[1]], n)
	}
	t.Logf("of the %d jobs handled once both queues had a backlog: %v", measured, n)
}

// A worker groups its queues by the node leading their shard when it has
// slotsPerGroup slots per group; with fewer, or without the placement, it
// fetches over every queue at once.
func TestGroupQueues(t *testing.T) {
	c := New("http://127.0.0.1:1")
	c.place.started.Store(true)
	queues := []string{"a", "b", "c", "d", "e", "f"}
	if g := c.groupQueues(queues, 100); len(g) != 1 || !slices.Equal(g[0].queues, queues) {
		t.Fatalf("without the placement: %+v", g)
	}
	nodes := []string{"http://n1", "http://n2", "http://n3"}
	p := &placement{hosts: make([][]string, 6)}
	for sh := range p.hosts {
		p.hosts[sh] = []string{nodes[sh%3]}
	}
	c.place.cur.Store(p)
	want := map[string][]string{}
	for _, q := range queues {
		node := nodes[ShardForQueue(q, 6)%3]
		want[node] = append(want[node], q)
	}
	g := c.groupQueues(queues, slotsPerGroup*len(want))
	if len(g) != len(want) {
		t.Fatalf("%d groups for %v", len(g), want)
	}
	for _, x := range g {
		if !slices.Equal(x.queues, want[x.node]) {
			t.Fatalf("group %s: %v, want %v", x.node, x.queues, want[x.node])
		}
	}
	if g := c.groupQueues(queues, slotsPerGroup*len(want)-1); len(g) != 1 || !slices.Equal(g[0].queues, queues) {
		t.Fatalf("with fewer slots than %d a group: %+v", slotsPerGroup, g)
	}
}

// A running worker groups its queues again when their nodes change: once
// the shard of one node's queue moves to the other node, that node is
// long-polled for both queues (one group: every free slot) and the first
// node's poller stops.
func TestWorkerRegroupsWhenALeaderMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type fetch struct {
		queues []string
		count  int
	}
	var mu sync.Mutex
	seen := map[string][]fetch{}
	node := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/fetch" {
				http.NotFound(w, r)
				return
			}
			var body FetchBody
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				t.Error(err)
			}
			mu.Lock()
			seen[name] = append(seen[name], fetch{body.Queues, max(body.Count, 1)})
			mu.Unlock()
			select { // a long-poll that finds nothing
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := node("a"), node("b")
	var qa, qb string // on shards 0 and 1 of 2
	for i := 0; qa == "" || qb == ""; i++ {
		q := fmt.Sprintf("regroup.q%d", i)
		if ShardForQueue(q, 2) == 0 && qa == "" {
			qa = q
		} else if ShardForQueue(q, 2) == 1 && qb == "" {
			qb = q
		}
	}
	c := New(a.URL)
	c.place.started.Store(true) // the placement is set here, never read
	c.place.cur.Store(&placement{hosts: [][]string{{a.URL}, {b.URL}}})
	w := NewWorker(c, WorkerOptions{Concurrency: 8, FetchTimeout: time.Second})
	for _, q := range []string{qa, qb} {
		w.Register(q, func(context.Context, *JobContext) (any, error) { return nil, nil })
	}
	wctx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-runDone; err != nil {
			t.Error(err)
		}
	}()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-ctx.Done():
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("never: %s (fetches seen %v)", what, seen)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitUntil("a fetch on each node", func() bool { return len(seen["a"]) > 0 && len(seen["b"]) > 0 })
	mu.Lock()
	for name, q := range map[string]string{"a": qa, "b": qb} {
		for _, f := range seen[name] {
			if !slices.Equal(f.queues, []string{q}) || f.count != 1 {
				t.Fatalf("node %s was asked %+v, want only %s, one job (an idle node's poller holds one slot)", name, f, q)
			}
		}
	}
	mu.Unlock()
	// Shard 1 moves to a: one group, both queues, every free slot.
	c.place.cur.Store(&placement{hosts: [][]string{{a.URL}, {a.URL}}})
	both := func(f fetch) bool { return len(f.queues) == 2 && f.count == 8 }
	waitUntil("a fetch of both queues on a", func() bool { return slices.ContainsFunc(seen["a"], both) })
	mu.Lock()
	onB := len(seen["b"])
	from := len(seen["a"])
	mu.Unlock()
	waitUntil("five more fetches on a", func() bool { return len(seen["a"]) >= from+5 })
	mu.Lock()
	defer mu.Unlock()
	if n := len(seen["b"]); n > onB {
		t.Fatalf("b was still polled after the regroup: %d fetches, %d at the regroup", n, onB)
	}
	for _, f := range seen["a"][from:] {
		if !both(f) {
			t.Fatalf("after the regroup a was asked %+v", f)
		}
	}
}
