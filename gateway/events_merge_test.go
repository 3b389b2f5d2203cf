package gateway

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// hostsSome is the real engine, except that this node hosts only some
// shards.
type hostsSome struct {
	Engine
	hosts []bool
}

func (h hostsSome) Hosts(sh int) bool { return h.hosts[sh] }

// appliedHooks are extra listeners on the shared host's applies (the event
// rings of nodes that host only some shards), fed by testApplied.
var appliedHooks struct {
	mu   sync.Mutex
	last [4]uint64 // per shard: the last index applied
	fns  map[int]func(*statemachine.AppliedInfo)
	next int
}

func testApplied(info *statemachine.AppliedInfo) {
	appliedHooks.mu.Lock()
	defer appliedHooks.mu.Unlock()
	if sh := int(info.ShardID) - 1; sh >= 0 && sh < len(appliedHooks.last) && info.Index > appliedHooks.last[sh] {
		appliedHooks.last[sh] = info.Index
	}
	for _, fn := range appliedHooks.fns {
		fn(info)
	}
}

// partialHub is the event ring of a node that hosts only some shards: it
// is fed those shards' applies and no other, and its history starts now
// (each shard's current index), as a node's does when it starts.
func partialHub(t *testing.T, hosts []bool) *events.Hub {
	t.Helper()
	h, err := events.New(events.Config{Shards: 4, Capacity: testEventsCapacity})
	require.NoError(t, err)
	appliedHooks.mu.Lock()
	defer appliedHooks.mu.Unlock()
	opened := make([]uint64, 4)
	for i := range opened {
		if hosts[i] {
			opened[i] = appliedHooks.last[i]
		}
	}
	h.Start(opened)
	if appliedHooks.fns == nil {
		appliedHooks.fns = map[int]func(*statemachine.AppliedInfo){}
	}
	key := appliedHooks.next
	appliedHooks.next++
	appliedHooks.fns[key] = func(info *statemachine.AppliedInfo) {
		if sh := int(info.ShardID) - 1; sh >= 0 && sh < len(hosts) && hosts[sh] {
			h.Applied(info)
		}
	}
	t.Cleanup(func() {
		appliedHooks.mu.Lock()
		delete(appliedHooks.fns, key)
		appliedHooks.mu.Unlock()
	})
	return h
}

// partialNode starts a gateway over the shared shards that hosts only
// some, with its own ring; it returns its address.
func partialNode(t *testing.T, hosts []bool, targets func(int) []string) string {
	t.Helper()
	_, addr := frontServer(t, Config{Events: partialHub(t, hosts), EventsKeepalive: 300 * time.Millisecond, Peer: peerTo(targets)},
		hostsSome{Engine: testEngine, hosts: hosts})
	return addr
}

// queuesByShard returns a fresh queue on each of the 4 shards, by shard.
func queuesByShard(t *testing.T, prefix string) []string {
	t.Helper()
	out := make([]string, 4)
	rt := router.New(4)
	for _, q := range queuesOnDistinctShards(t, prefix, 4) {
		out[rt.ShardForQueue(q)] = q
	}
	return out
}

// drive enqueues a job, fetches and acks it: 3 events.
func drive(t *testing.T, q string) string {
	t.Helper()
	id := enqueue(t, map[string]any{"queue": q, "payload": 1})
	j, ok := fetchOne(t, 5, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)
	code, body := call(t, "POST", "/api/v1/ack/"+id, map[string]any{})
	require.Equal(t, 200, code, string(body))
	return id
}

func eventKeys(evs []jobEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.JobID + "/" + e.Type
	}
	slices.Sort(out)
	return out
}

// TestEventsMergedStream: a node hosting shard 0 only serves a stream of
// every shard: its own from its ring, 1 and 2 from a node hosting those
// two, 3 from a node hosting everything. Every job's events arrive, in
// order; the merged stream's IDs resume exactly through it and through a
// node hosting everything, and the other way round.
func TestEventsMergedStream(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evmerge")
	real := realAddr()
	b2 := partialNode(t, []bool{false, true, true, false}, func(int) []string { return []string{real} })
	var mu sync.Mutex
	asked := map[int]int{}
	front := partialNode(t, []bool{true, false, false, false}, func(sh int) []string {
		mu.Lock()
		asked[sh]++
		mu.Unlock()
		if sh == 1 || sh == 2 {
			return []string{b2}
		}
		return []string{real}
	})
	frontURL := "http://" + front
	path := "/api/v1/events?queue=" + strings.Join(q, ",")
	full := openSSE(t, path, "")
	merged := openSSEURL(t, frontURL+path, "")
	mu.Lock()
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, asked, "the shards this node does not host, once each")
	mu.Unlock()

	var jobs []string
	for round := 0; round < 2; round++ {
		for _, qq := range q {
			jobs = append(jobs, drive(t, qq))
		}
	}
	evs, ids := merged.collect(t, 3*len(jobs))
	fevs, fids := full.collect(t, 3*len(jobs))
	got := byJob(evs)
	require.Len(t, got, len(jobs))
	for _, id := range jobs {
		require.Equal(t, []string{"enqueued/pending", "started/active", "completed/completed"}, got[id], id)
	}
	require.Equal(t, eventKeys(fevs), eventKeys(evs))

	// seen is every event so far (in merged's order); more adds a job on
	// every shard and reads its events from merged, so a resumed stream
	// can be checked to end exactly with them.
	seen, seenIDs := evs, ids
	more := func() {
		for _, qq := range q {
			enqueue(t, map[string]any{"queue": qq, "payload": 2})
		}
		e, i := merged.collect(t, 4)
		seen, seenIDs = append(seen, e...), append(seenIDs, i...)
	}
	// resume checks that a stream resumed at after (an event of seen)
	// through url gives exactly the events of seen after it.
	resume := func(url, cursor string, after int) {
		t.Helper()
		r := openSSEURL(t, url+path, cursor)
		more()
		want := eventKeys(seen[after+1:])
		gotEvs, _ := r.collect(t, len(want))
		require.Equal(t, want, eventKeys(gotEvs), "resumed through %s after event %d", url, after)
		// Nothing more: the next events are those of the next jobs.
		more()
		next, _ := r.collect(t, 4)
		require.Equal(t, eventKeys(seen[len(seen)-4:]), eventKeys(next), "no duplicate after the resume")
	}
	for _, k := range []int{0, 9, len(ids) - 1} {
		resume(frontURL, seenIDs[k], k)
		resume(baseURL, seenIDs[k], k)
	}
	// A cursor of the node hosting everything resumes through the front
	// node (once every shard has had an event since the front's ring
	// started: before that its resume point is older than that ring).
	first := 0
	queues := map[string]bool{}
	for first < len(fevs) {
		queues[fevs[first].Queue] = true
		if len(queues) == 4 {
			break
		}
		first++
	}
	for _, k := range []int{first, len(fids) - 2} {
		r := openSSEURL(t, frontURL+path, fids[k])
		want := append(append([]jobEvent(nil), fevs[k+1:]...), seen[len(evs):]...) // and the jobs more added since
		gotEvs, _ := r.collect(t, len(want))
		require.Equal(t, eventKeys(want), eventKeys(gotEvs), "a full node's cursor resumed through the front after event %d", k)
	}

	// A reset: a cursor older than every ring, through the front node.
	old := make(events.Cursor, 4).Encode()
	r := openSSEURL(t, frontURL+path, old)
	f := r.next(t)
	require.Equal(t, "reset", f.Event)
	require.Contains(t, f.Data, `"reason"`)
	c, err := events.DecodeCursor(f.ID, 4)
	require.NoError(t, err)
	for sh := range c {
		require.NotZero(t, c[sh].Index, "shard %d: the reset's cursor is live", sh)
	}
	id := enqueue(t, map[string]any{"queue": q[2], "payload": 3})
	e, _ := r.collect(t, 1)
	require.Equal(t, id, e[0].JobID)
}

// TestEventsMergedQueueRouting: a stream of one queue's events needs that
// queue's shard only when "moved" events are left out (a move into the
// queue from another shard is told by the job's old shard): then no other
// shard is streamed; with them in, it is, and such a move arrives.
func TestEventsMergedQueueRouting(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evroute")
	real := realAddr()
	var mu sync.Mutex
	asked := map[int]int{}
	front := partialNode(t, []bool{true, false, false, false}, func(sh int) []string {
		mu.Lock()
		asked[sh]++
		mu.Unlock()
		return []string{real}
	})
	frontURL := "http://" + front
	askedNow := func() map[int]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(asked)
	}

	hosted := openSSEURL(t, frontURL+"/api/v1/events?queue="+q[0]+"&type=enqueued", "")
	require.Empty(t, askedNow(), "a hosted queue: nothing opened elsewhere")
	remote := openSSEURL(t, frontURL+"/api/v1/events?queue="+q[3]+"&type=enqueued,completed", "")
	require.Equal(t, map[int]int{3: 1}, askedNow(), "one remote queue: its shard only")
	a := enqueue(t, map[string]any{"queue": q[3], "payload": 1})
	b := enqueue(t, map[string]any{"queue": q[0], "payload": 1})
	e, _ := remote.collect(t, 1)
	require.Equal(t, a, e[0].JobID)
	e, _ = hosted.collect(t, 1)
	require.Equal(t, b, e[0].JobID)

	moves := openSSEURL(t, frontURL+"/api/v1/events?queue="+q[0], "")
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 2}, askedNow(), "with moves: every shard")
	c := enqueue(t, map[string]any{"queue": q[3], "payload": 1})
	code, body := call(t, "POST", "/api/v1/jobs/"+c+"/move", map[string]any{"queue": q[0]})
	require.Equal(t, 200, code, string(body))
	e, _ = moves.collect(t, 1)
	require.Equal(t, "moved", e[0].Type)
	require.Equal(t, c, e[0].JobID)
	require.Equal(t, q[0], e[0].Queue)
}

// TestEventsShardsParam: ?shards= restricts a stream to some shards; a
// forwarded request (the hop header) for shards this node does not host
// is answered 503, never forwarded again; a restricted stream starts by
// telling its position.
func TestEventsShardsParam(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evshards")
	real := realAddr()
	b2 := partialNode(t, []bool{false, true, true, false}, func(int) []string { return []string{real} })
	get := func(url string, hop bool) *http.Response {
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		if hop {
			req.Header.Set(peer.HopHeader, "1")
		}
		resp, err := httpc.Do(req)
		require.NoError(t, err)
		return resp
	}
	for _, path := range []string{"/api/v1/events?shards=1,3", "/api/v1/events", "/api/v1/events?queue=" + q[0]} {
		resp := get("http://"+b2+path, true)
		resp.Body.Close()
		require.Equal(t, 503, resp.StatusCode, path)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	}
	for _, v := range []string{"x", "4", "-1", "1,,2", "1.0"} {
		resp := get("http://"+b2+"/api/v1/events?shards="+v, false)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode, v)
	}

	// Events on shards 2 and 3 after b2's ring started: a cursor of the
	// node hosting everything is then within b2's ring.
	enqueue(t, map[string]any{"queue": q[2], "payload": 0})
	enqueue(t, map[string]any{"queue": q[3], "payload": 0})
	// A restricted stream starts by telling its position, then carries
	// only its shards' events.
	path := "/api/v1/events?queue=" + strings.Join(q, ",")
	s := openSSE(t, path+"&shards=2,3", "")
	f := <-s.frames
	require.True(t, strings.HasPrefix(f.Comment, "connected "), f)
	from := strings.TrimPrefix(f.Comment, "connected ")
	_, err := events.DecodeCursor(from, 4)
	require.NoError(t, err)
	var jobs []string
	for _, qq := range q {
		jobs = append(jobs, enqueue(t, map[string]any{"queue": qq, "payload": 1}))
	}
	e, _ := s.collect(t, 2)
	require.ElementsMatch(t, jobs[2:], []string{e[0].JobID, e[1].JobID})
	// Its position resumes through b2: from its ring (shard 2), and merged
	// without the hop header (shard 3 from the node hosting it).
	r := openSSEURL(t, "http://"+b2+path+"&shards=2", from)
	f = <-r.frames
	require.Equal(t, "connected "+from, f.Comment, "resumed where it was asked to")
	e, _ = r.collect(t, 1)
	require.Equal(t, jobs[2], e[0].JobID)
	mixed := openSSEURL(t, "http://"+b2+path+"&shards=2,3", from)
	e, _ = mixed.collect(t, 2)
	require.ElementsMatch(t, jobs[2:], []string{e[0].JobID, e[1].JobID})
}

// restartable is a gateway over the shared shards hosting some of them
// that can be stopped and started again on the same address, keeping its
// ring (a gateway restart). While it is stopped a listener holds the
// address (closing every connection at once, as a node that is down
// refuses them), so no other test's server takes it.
type restartable struct {
	t       *testing.T
	cfg     Config
	eng     Engine
	addr    string
	srv     *Server
	ln      net.Listener
	holder  net.Listener
	running bool
}

func newRestartable(t *testing.T, hosts []bool, targets func(int) []string) *restartable {
	r := &restartable{t: t, eng: hostsSome{Engine: testEngine, hosts: hosts},
		cfg: Config{Logger: zerolog.Nop(), Events: partialHub(t, hosts), EventsKeepalive: 300 * time.Millisecond, Peer: peerTo(targets), ProviderRebalance: -1}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(func() {
		if r.running {
			r.stop()
		}
		if r.holder != nil {
			r.holder.Close()
		}
	})
	return r
}

func (r *restartable) serve(ln net.Listener) {
	r.srv = New(r.cfg, r.eng)
	r.ln = ln
	r.running = true
	go func() { _ = r.srv.Serve(ln) }()
}

func (r *restartable) start() {
	r.holder.Close()
	r.holder = nil
	ln, err := net.Listen("tcp", r.addr)
	require.NoError(r.t, err)
	r.serve(ln)
}

func (r *restartable) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(r.t, r.srv.Shutdown(ctx))
	r.ln.Close() // Shutdown closes it only if Serve has started
	r.running = false
	h, err := net.Listen("tcp", r.addr)
	require.NoError(r.t, err)
	r.holder = h
	go func() {
		for {
			c, err := h.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// TestEventsMergedUpstreamRestarts: the node streaming shards 1 and 2 to
// the front node stops; shards 0 and 3 keep flowing; when it is back the
// front node reopens the stream from where it was: the events of 1 and 2
// made meanwhile arrive, once, with no reset.
func TestEventsMergedUpstreamRestarts(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evrestart")
	real := realAddr()
	b2 := newRestartable(t, []bool{false, true, true, false}, func(int) []string { return []string{real} })
	front := partialNode(t, []bool{true, false, false, true}, func(sh int) []string {
		if sh == 1 || sh == 2 {
			return []string{b2.addr}
		}
		return []string{real}
	})
	testUpstreamLoss(t, q, "http://"+front, func() { b2.stop() }, func() { b2.start() })
}

// TestEventsMergedUpstreamFailsOver: the node streaming shards 1 and 2
// stops for good: the front node streams them from another node that
// hosts them, from where it was.
func TestEventsMergedUpstreamFailsOver(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evfailover")
	real := realAddr()
	b2 := newRestartable(t, []bool{false, true, true, false}, func(int) []string { return []string{real} })
	front := partialNode(t, []bool{true, false, false, true}, func(sh int) []string {
		if sh == 1 || sh == 2 {
			return []string{b2.addr, real}
		}
		return []string{real}
	})
	testUpstreamLoss(t, q, "http://"+front, func() { b2.stop() }, func() {})
}

// TestEventsMergedUpstreamReset: the node streaming shards 1 and 2 comes
// back without the events made while it was down (a restart: its ring
// starts empty); reopened from the front node's position, it says reset,
// and the front node passes the reset on, with a cursor that resumes
// after it through any node.
func TestEventsMergedUpstreamReset(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evupreset")
	real := realAddr()
	hosts := []bool{false, true, true, false}
	b2 := newRestartable(t, hosts, func(int) []string { return []string{real} })
	front := partialNode(t, []bool{true, false, false, true}, func(sh int) []string {
		if sh == 1 || sh == 2 {
			return []string{b2.addr}
		}
		return []string{real}
	})
	path := "/api/v1/events?queue=" + strings.Join(q, ",")
	s := openSSEURL(t, "http://"+front+path, "")
	a := enqueue(t, map[string]any{"queue": q[1], "payload": 1})
	e, _ := s.collect(t, 1)
	require.Equal(t, a, e[0].JobID)

	b2.stop()
	enqueue(t, map[string]any{"queue": q[1], "payload": 2}) // b2's next ring never sees it
	b2.cfg.Events = partialHub(t, hosts)
	b2.start()
	f := s.next(t)
	require.Equal(t, "reset", f.Event, f.Data)
	require.Contains(t, f.Data, "older than the events this server keeps")
	c := enqueue(t, map[string]any{"queue": q[2], "payload": 3})
	e, _ = s.collect(t, 1)
	require.Equal(t, c, e[0].JobID)
	r := openSSE(t, path, f.ID)
	e, _ = r.collect(t, 1)
	require.Equal(t, c, e[0].JobID, "the reset's cursor resumes after it")
}

// TestEventsMergedUpstreamLate: a live stream whose shards 1 and 2 no
// node can stream yet starts without them (after a short wait); when
// their node answers, the client is told to reset (their events in
// between are not known), and they flow from then on.
func TestEventsMergedUpstreamLate(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evlate")
	real := realAddr()
	b2 := newRestartable(t, []bool{false, true, true, false}, func(int) []string { return []string{real} })
	b2.stop()
	front := partialNode(t, []bool{true, false, false, true}, func(sh int) []string {
		if sh == 1 || sh == 2 {
			return []string{b2.addr}
		}
		return []string{real}
	})
	path := "/api/v1/events?queue=" + strings.Join(q, ",")
	start := time.Now()
	s := openSSEURL(t, "http://"+front+path, "")
	require.GreaterOrEqual(t, time.Since(start), upstreamStartWait/2, "it waited for the missing shards")
	a := enqueue(t, map[string]any{"queue": q[3], "payload": 1})
	e, ids := s.collect(t, 1)
	require.Equal(t, a, e[0].JobID)
	// Its cursor does not know shards 1 and 2: resuming from it resets.
	r := openSSE(t, path, ids[0])
	require.Equal(t, "reset", r.next(t).Event)

	b2.start()
	f := s.next(t)
	require.Equal(t, "reset", f.Event, f.Data)
	require.Contains(t, f.Data, "could not be followed")
	b := enqueue(t, map[string]any{"queue": q[1], "payload": 2})
	e, _ = s.collect(t, 1)
	require.Equal(t, b, e[0].JobID)
}

func testUpstreamLoss(t *testing.T, q []string, frontURL string, stop, back func()) {
	t.Helper()
	path := "/api/v1/events?queue=" + strings.Join(q, ",")
	s := openSSEURL(t, frontURL+path, "")
	var jobs []string
	for _, qq := range q {
		jobs = append(jobs, enqueue(t, map[string]any{"queue": qq, "payload": 1}))
	}
	evs, _ := s.collect(t, 4)
	require.ElementsMatch(t, jobs, []string{evs[0].JobID, evs[1].JobID, evs[2].JobID, evs[3].JobID})

	stop()
	var during []string
	for _, qq := range []string{q[1], q[2], q[0], q[3]} {
		during = append(during, enqueue(t, map[string]any{"queue": qq, "payload": 2}))
	}
	back()
	evs, _ = s.collect(t, 4) // a reset would fail collect
	require.ElementsMatch(t, during, []string{evs[0].JobID, evs[1].JobID, evs[2].JobID, evs[3].JobID})
	// No duplicate: the next events are the next jobs'.
	var after []string
	for _, qq := range q {
		after = append(after, enqueue(t, map[string]any{"queue": qq, "payload": 3}))
	}
	evs, _ = s.collect(t, 4)
	require.ElementsMatch(t, after, []string{evs[0].JobID, evs[1].JobID, evs[2].JobID, evs[3].JobID})
}

// TestEventsMergedShutdown: shutting the front node down ends its merged
// streams at once (and the upstreams they opened).
func TestEventsMergedShutdown(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evshut")
	real := realAddr()
	hosts := []bool{true, false, false, false}
	srv, front := frontServer(t, Config{Events: partialHub(t, hosts), EventsKeepalive: time.Minute,
		Peer: peerTo(func(int) []string { return []string{real} })}, hostsSome{Engine: testEngine, hosts: hosts})
	s := openSSEURL(t, "http://"+front+"/api/v1/events?queue="+strings.Join(q, ","), "")
	id := enqueue(t, map[string]any{"queue": q[3], "payload": 1})
	e, _ := s.collect(t, 1)
	require.Equal(t, id, e[0].JobID)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	require.Less(t, time.Since(start), 2*time.Second)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				return // ended
			}
			require.NotEqual(t, "job", f.Event)
		case <-timeout:
			t.Fatal("the merged stream did not end")
		}
	}
}

// switchable is the real engine hosting the shards whose flag is set.
type switchable struct {
	Engine
	hosts []atomic.Bool
}

func (s *switchable) Hosts(sh int) bool { return s.hosts[sh].Load() }

// TestEventsStreamEndsWhenShardLeaves: a stream served from the ring ends
// when this node stops hosting one of its shards; resumed, it is merged
// (that shard from a node hosting it) and misses nothing.
func TestEventsStreamEndsWhenShardLeaves(t *testing.T) {
	t.Parallel()
	q := queuesByShard(t, "evleave")
	real := realAddr()
	eng := &switchable{Engine: testEngine, hosts: make([]atomic.Bool, 4)}
	for i := range eng.hosts {
		eng.hosts[i].Store(true)
	}
	_, front := frontServer(t, Config{Events: partialHub(t, []bool{true, true, true, true}), EventsKeepalive: 100 * time.Millisecond,
		Peer: peerTo(func(int) []string { return []string{real} })}, eng)
	path := "http://" + front + "/api/v1/events?queue=" + strings.Join(q, ",")
	s := openSSEURL(t, path, "")
	a := enqueue(t, map[string]any{"queue": q[2], "payload": 1})
	_, ids := s.collect(t, 1)

	eng.hosts[2].Store(false)
	timeout := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case f, ok := <-s.frames:
			ended = !ok
			require.NotEqual(t, "job", f.Event, f.Data)
		case <-timeout:
			t.Fatal("the stream did not end")
		}
	}
	b := enqueue(t, map[string]any{"queue": q[2], "payload": 2})
	r := openSSEURL(t, path, ids[0])
	c := enqueue(t, map[string]any{"queue": q[2], "payload": 3})
	e, _ := r.collect(t, 2)
	require.Equal(t, []string{b, c}, []string{e[0].JobID, e[1].JobID}, "after %s", a)
}
