package peer

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sseReq is what a fake node was asked for.
type sseReq struct {
	shards, from, queue, typ string
	hop                      bool
}

// sseNode is a fake node serving event streams: each starts with
// ": connected {name}@{shards}", sends one job frame whose id is
// "{name}#{shards}", then ends (end) or stays open until the client goes.
func sseNode(t *testing.T, name string, end bool) (addr string, reqs chan sseReq) {
	reqs = make(chan sseReq, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		shards := q.Get("shards")
		reqs <- sseReq{shards: shards, from: r.Header.Get("Last-Event-ID"), queue: q.Get("queue"), typ: q.Get("type"), hop: r.Header.Get(HopHeader) != ""}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, ": connected %s@%s\n\nid: %s#%s\nevent: job\ndata: {\"n\":1}\n\n", name, shards, name, shards)
		w.(http.Flusher).Flush()
		if !end {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), reqs
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func nextMsg(t *testing.T, u *Upstreams) UpstreamMsg {
	t.Helper()
	select {
	case m := <-u.Msgs():
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no upstream message")
		return UpstreamMsg{}
	}
}

// take reads messages until one gives a frame (applying the others).
func take(t *testing.T, u *Upstreams) UpstreamFrame {
	t.Helper()
	for {
		if f, ok := u.Take(nextMsg(t, u)); ok {
			return f
		}
	}
}

func nextReq(t *testing.T, reqs chan sseReq) sseReq {
	t.Helper()
	select {
	case r := <-reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no stream was opened")
		return sseReq{}
	}
}

// TestUpstreamsOpen: the shards are covered greedily; per node, the shards
// of known position resume from the owner's cursor and the others are
// opened live; the filter and the hop header go along; the start waits
// until every stream answered; a stream's first message is marked Opened,
// later ones (and a second connected comment) are not.
func TestUpstreamsOpen(t *testing.T) {
	t.Parallel()
	a, areqs := sseNode(t, "a", false)
	b, breqs := sseNode(t, "b", false)
	hosts := map[int][]string{1: {a}, 2: {a, b}, 3: {b}}
	c := New(Config{Targets: func(sh int) []string { return hosts[sh] }})
	u := c.Upstreams([]int{1, 2, 3}, UpstreamsConfig{Queue: "q1,q 2", Type: "enqueued", Idle: 10 * time.Second,
		Known: func(sh int) bool { return sh != 2 }, Cursor: func() string { return "CUR" }})
	defer u.Close()
	require.False(t, u.Waiting())
	u.Open()
	require.True(t, u.Waiting(), "three streams opened, none answered")
	got := map[string]sseReq{}
	for range 2 {
		r := nextReq(t, areqs)
		got["a"+r.shards] = r
	}
	got["b"+nextReq(t, breqs).shards] = sseReq{}
	require.Equal(t, sseReq{shards: "1", from: "CUR", queue: "q1,q 2", typ: "enqueued", hop: true}, got["a1"], "known: resumed")
	require.Equal(t, sseReq{shards: "2", queue: "q1,q 2", typ: "enqueued", hop: true}, got["a2"], "unknown: live")
	require.Contains(t, got, "b3")

	firsts := map[string]UpstreamFrame{}
	for len(firsts) < 3 {
		f := take(t, u)
		if f.Opened {
			require.True(t, f.Connected, "the connected comment comes first")
			firsts[f.ID] = f
			u.Opened(f)
			continue
		}
		require.Equal(t, "job", f.Event)
	}
	require.False(t, u.Waiting(), "every stream answered")
	require.Equal(t, []int{2}, firsts["a@2"].Shards)
	require.True(t, firsts["a@2"].Live)
	require.False(t, firsts["a@1"].Live)
	require.Equal(t, []int{3}, firsts["b@3"].Shards)
	require.Nil(t, u.RetryC(), "nothing to open again")
}

// TestUpstreamsReopenAndFailOver: a stream that ends is opened again, on
// the same node, from the owner's cursor as it is then; a node that cannot
// be opened is tried last, so the shards move to another node hosting
// them; a dropped stream's frames are left out and its shards opened
// again.
func TestUpstreamsReopenAndFailOver(t *testing.T) {
	t.Parallel()
	a, areqs := sseNode(t, "a", true) // each stream ends after its frame
	b, breqs := sseNode(t, "b", false)
	hosts := []string{a, b}
	cursor := "C1"
	c := New(Config{Targets: func(int) []string { return hosts }})
	u := c.Upstreams([]int{0}, UpstreamsConfig{Idle: 10 * time.Second,
		Known: func(int) bool { return true }, Cursor: func() string { return cursor }})
	defer u.Close()
	u.Open()
	require.Equal(t, "C1", nextReq(t, areqs).from)
	f := take(t, u)
	require.True(t, f.Opened)
	u.Opened(f)
	require.Equal(t, "a#0", take(t, u).ID)
	cursor = "C2"
	_, ok := u.Take(nextMsg(t, u)) // the stream ended
	require.False(t, ok)
	require.NotNil(t, u.RetryC(), "opened again after the backoff")
	<-u.RetryC()
	u.Retry()
	require.Equal(t, "C2", nextReq(t, areqs).from, "reopened on the same node, from the cursor as it is now")
	u.Opened(take(t, u))
	take(t, u)
	_, ok = u.Take(nextMsg(t, u))
	require.False(t, ok)

	// a is down now: its stream fails to open, and the next is b's.
	dead := deadAddr(t)
	hosts = []string{dead, b}
	cursor = "C3"
	<-u.RetryC()
	u.Retry()
	_, ok = u.Take(nextMsg(t, u)) // dead: not opened
	require.False(t, ok)
	<-u.RetryC()
	u.Retry()
	require.Equal(t, "C3", nextReq(t, breqs).from, "failed over, from the cursor")
	f = take(t, u)
	require.Equal(t, "b@0", f.ID)

	// The owner drops b's stream (say, an unreadable position): nothing
	// more of it is handed on, and its shard is opened again.
	u.Drop(f)
	require.True(t, f.Dropped())
	for {
		m := nextMsg(t, u)
		_, ok := u.Take(m)
		require.False(t, ok, "a dropped stream's frames are left out")
		if m.closed {
			break
		}
	}
	require.NotNil(t, u.RetryC())
}

// TestUpstreamsBackoff: the wait before opening again doubles up to its
// bound while streams keep failing, and starts over once a stream has run
// longer than the bound; a node that could not be opened is used only for
// shards no other node hosts, and only for a while.
func TestUpstreamsBackoff(t *testing.T) {
	t.Parallel()
	hosts := map[int][]string{0: {"a", "b"}, 1: {"a"}}
	c := New(Config{Targets: func(sh int) []string { return hosts[sh] }})
	u := c.Upstreams(nil, UpstreamsConfig{})
	defer u.Close()
	var waits []time.Duration
	for range 7 {
		waits = append(waits, u.backoff)
		u.closed(&upstream{addr: "a", shards: []int{0}, start: time.Now()}, errors.New("refused"))
		u.retry.Stop()
		u.retry = nil
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}, waits)
	u.closed(&upstream{addr: "a", shards: []int{0}, open: true, start: time.Now().Add(-3 * time.Second)}, nil)
	u.retry.Stop()
	u.retry = nil
	require.Equal(t, 200*ms, u.backoff, "a stream that ran a while: the next wait starts over")

	groups, rest := u.cover([]int{0, 1, 2})
	require.Equal(t, []int{2}, rest, "nobody hosts 2")
	require.Len(t, groups, 2)
	require.Equal(t, "b", groups[0].Addr, "a failed lately: 0 goes to b")
	require.Equal(t, []int{0}, groups[0].Shards)
	require.Equal(t, "a", groups[1].Addr, "1 has nobody else")
	u.failed["a"] = time.Now().Add(-upstreamFailedFor - time.Second)
	groups, _ = u.cover([]int{0, 1})
	require.Equal(t, "a", groups[0].Addr, "a while later a is first again")
	require.Equal(t, []int{0, 1}, groups[0].Shards)
}
