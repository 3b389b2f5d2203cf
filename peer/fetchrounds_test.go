package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestPlanFetch: a node hosting every shard takes the whole request;
// else the shards not hosted here are covered by other nodes, each group
// with its queues and its fallbacks; a shard nobody hosts is left out.
func TestPlanFetch(t *testing.T) {
	t.Parallel()
	hosts := map[int][]string{0: {"A", "B"}, 1: {"B", "A"}}
	c := New(Config{Targets: func(sh int) []string { return hosts[sh] }})
	byShard := map[int][]string{0: {"q0"}, 1: {"q1", "r1"}, 2: {"q2"}, 3: {"q3"}}
	all, groups := c.PlanFetch([]int{0, 1}, byShard, func(int) bool { return false })
	require.ElementsMatch(t, []string{"A", "B"}, all)
	require.Nil(t, groups)

	hosts = map[int][]string{0: {"A"}, 1: {"A", "B"}, 2: {"C"}, 3: nil}
	all, groups = c.PlanFetch([]int{0, 1, 2, 3}, byShard, func(sh int) bool { return sh == 2 })
	require.Nil(t, all)
	require.Equal(t, []FetchGroup{{Addrs: []string{"A"}, Queues: []string{"q0", "q1", "r1"}}}, groups,
		"2 is hosted here, 3 by nobody")
	_, groups = c.PlanFetch([]int{1}, byShard, func(int) bool { return false })
	require.Nil(t, groups, "one shard: a node hosting it takes the whole request")
}

// fetchNode is a fake node answering fetches: each answer is the next of
// answers (a status, and for 200 how many jobs), the last one repeated;
// it notes each fetch's count and body. Its waits (WaitPath) answer
// waitStatus when set; else they block until a value on work (200), the
// caller's TimeoutHeader passes (204) or the caller goes away; each wait
// received is noted on waits.
type fetchNode struct {
	addr       string
	mu         sync.Mutex
	answers    [][2]int
	counts     []int
	bodies     []map[string]any
	waitStatus int
	work       chan struct{}
	waits      chan *http.Request
}

func newFetchNode(t *testing.T, answers ...[2]int) *fetchNode {
	n := &fetchNode{answers: answers, work: make(chan struct{}, 16), waits: make(chan *http.Request, 1024)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == WaitPath {
			n.wait(w, r)
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		n.mu.Lock()
		count := int(body["count"].(float64))
		n.counts = append(n.counts, count)
		n.bodies = append(n.bodies, body)
		a := n.answers[0]
		if len(n.answers) > 1 {
			n.answers = n.answers[1:]
		}
		n.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case a[0] == 204:
			w.WriteHeader(204)
		case a[0] != 200:
			w.WriteHeader(a[0])
			fmt.Fprintf(w, `{"error":"no","code":%q}`, corvo.CodeInternal)
		default:
			var jobs []string
			for i := range min(a[1], count) {
				jobs = append(jobs, fmt.Sprintf(`{"id":"r%d"}`, i))
			}
			fmt.Fprintf(w, `{"jobs":[%s]}`, strings.Join(jobs, ","))
		}
	}))
	t.Cleanup(srv.Close)
	n.addr = srv.Listener.Addr().String()
	return n
}

func (n *fetchNode) wait(w http.ResponseWriter, r *http.Request) {
	// Read to the end, so that the server sees the caller hang up (it
	// watches the connection only once the body is read).
	_, _ = io.Copy(io.Discard, r.Body)
	n.waits <- r
	n.mu.Lock()
	status := n.waitStatus
	n.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	ms, _ := strconv.Atoi(r.Header.Get(TimeoutHeader))
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-n.work:
		_, _ = io.WriteString(w, `{"ready":true}`)
	case <-t.C:
		w.WriteHeader(204)
	case <-r.Context().Done():
	}
}

func (n *fetchNode) asked() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int(nil), n.counts...)
}

// fakeLocal is a local half with avail jobs to claim (err: every fetch
// fails), noting its calls; its Wait waits for d or a value from the
// other nodes' waits.
type fakeLocal struct {
	avail   int
	err     error
	claimed int
	calls   []string
	waits   []time.Duration
	stop    bool // Wait says the server shuts down
}

func (l *fakeLocal) Watch() { l.calls = append(l.calls, "watch") }
func (l *fakeLocal) Fetch(want int) (int, error) {
	l.calls = append(l.calls, fmt.Sprintf("fetch %d", want))
	if l.err != nil {
		return 0, l.err
	}
	n := min(want, l.avail)
	l.avail -= n
	l.claimed += n
	return n, nil
}
func (l *fakeLocal) Wait(d time.Duration, remote <-chan int) (int, bool) {
	l.calls = append(l.calls, "wait")
	l.waits = append(l.waits, d)
	if l.stop {
		return -1, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case k := <-remote:
		return k, true
	case <-t.C:
		return -1, true
	}
}

// TestFetchRoundsNeverOverclaims: each source is asked only for what is
// still missing, so a round never claims more than the count, whichever
// source goes first (it rotates between fetches); the worker's fields
// and timeout 0 go along.
func TestFetchRoundsNeverOverclaims(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	seen := map[string]bool{}
	for range 4 {
		remote := newFetchNode(t, [2]int{200, 2})
		l := &fakeLocal{avail: 5}
		raw, err := c.FetchRounds(FetchRounds{Local: l, LocalQueues: true, Groups: []FetchGroup{{Addrs: []string{remote.addr}, Queues: []string{"q"}}},
			WorkerID: "w1", Hostname: "h1", Count: 3, Deadline: time.Now().Add(time.Second)})
		require.NoError(t, err)
		if asked := remote.asked(); len(asked) == 0 {
			seen["local first"] = true
			require.Equal(t, []string{"watch", "fetch 3"}, l.calls)
			require.Equal(t, 3, l.claimed)
			require.Empty(t, raw)
		} else {
			seen["remote first"] = true
			require.Equal(t, []int{3}, asked)
			require.Len(t, raw, 2)
			require.Equal(t, `{"id":"r0"}`, string(raw[0]))
			require.Equal(t, []string{"watch", "fetch 1"}, l.calls, "the local half asked for what was missing")
			remote.mu.Lock()
			b := remote.bodies[0]
			remote.mu.Unlock()
			require.Equal(t, map[string]any{"queues": []any{"q"}, "worker_id": "w1", "hostname": "h1", "count": float64(3), "timeout": float64(0)}, b)
		}
	}
	require.Len(t, seen, 2, "both orders happened")
}

// TestFetchRoundsWaitsOnEveryNode: after claims that took nothing, the
// fetch waits on the other node (a wait that claims nothing, with the
// cluster secret and the group's queues) at the same time as on the local
// signals, for the whole long-poll, not in slices; when that node says it
// has work, it is claimed from at once, for what is missing.
func TestFetchRoundsWaitsOnEveryNode(t *testing.T) {
	t.Parallel()
	remote := newFetchNode(t, [2]int{204, 0}, [2]int{200, 1})
	l := &fakeLocal{}
	c := New(Config{Secret: "s3cret"})
	type result struct {
		raw [][]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := c.FetchRounds(FetchRounds{Local: l, LocalQueues: true, Groups: []FetchGroup{{Addrs: []string{remote.addr}, Queues: []string{"ns/q", "r"}}},
			Count: 2, Deadline: time.Now().Add(time.Minute)})
		done <- result{raw, err}
	}()
	w := <-remote.waits
	require.Equal(t, "s3cret", w.Header.Get(SecretHeader))
	ms, err := strconv.Atoi(w.Header.Get(TimeoutHeader))
	require.NoError(t, err)
	require.Greater(t, time.Duration(ms)*time.Millisecond, remoteFetchSlice, "one long wait, not a poll")
	require.Equal(t, []int{2}, remote.asked(), "one claim before waiting")
	remote.work <- struct{}{}
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.raw, 1)
	require.Equal(t, []int{2, 2}, remote.asked(), "claimed again once the node said it had work")
	require.Len(t, l.waits, 1)
	require.Greater(t, l.waits[0], remoteWaitMax, "the local half waits for the whole long-poll")
	require.Equal(t, []string{"watch", "fetch 2", "wait"}, l.calls[:3])
}

// TestFetchRoundsPollsNodesWithoutWaits: a node that cannot be waited on
// (an older node without the route: 404) is claimed from every
// remoteFetchSlice instead, and what it then has is handed out.
func TestFetchRoundsPollsNodesWithoutWaits(t *testing.T) {
	t.Parallel()
	remote := newFetchNode(t, [2]int{204, 0}, [2]int{204, 0}, [2]int{200, 1})
	remote.mu.Lock()
	remote.waitStatus = 404
	remote.mu.Unlock()
	raw, err := New(Config{}).FetchRounds(FetchRounds{Local: &fakeLocal{}, Groups: []FetchGroup{{Addrs: []string{remote.addr}, Queues: []string{"q"}}},
		Count: 1, Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Len(t, raw, 1)
	require.Equal(t, []int{1, 1, 1}, remote.asked())
	require.Len(t, remote.waits, 2, "each failed wait was followed by one claim")
}

// TestFetchRoundsEnds: a fetch with nothing to claim ends at its deadline
// or when the server shuts down, with nothing and no error; one whose
// every source fails ends with the first failure; a failing source next
// to one that answers does not end it.
func TestFetchRoundsEnds(t *testing.T) {
	t.Parallel()
	empty := newFetchNode(t, [2]int{204, 0})
	group := []FetchGroup{{Addrs: []string{empty.addr}, Queues: []string{"q"}}}
	c := New(Config{})
	raw, err := c.FetchRounds(FetchRounds{Local: &fakeLocal{}, Groups: group, Count: 1, Deadline: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	require.Nil(t, raw)
	l := &fakeLocal{stop: true}
	raw, err = c.FetchRounds(FetchRounds{Local: l, LocalQueues: true, Groups: group, Count: 1, Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Nil(t, raw)
	require.Len(t, l.waits, 1, "shutting down: no second round")

	broken := newFetchNode(t, [2]int{500, 0})
	localErr := errors.New("local failed")
	for range 2 { // either source first
		_, err = c.FetchRounds(FetchRounds{Local: &fakeLocal{err: localErr}, LocalQueues: true,
			Groups: []FetchGroup{{Addrs: []string{broken.addr}, Queues: []string{"q"}}}, Count: 1, Deadline: time.Now().Add(time.Minute)})
		require.Error(t, err)
		var pe *Error
		if !errors.Is(err, localErr) {
			require.ErrorAs(t, err, &pe)
			require.Equal(t, 500, pe.Status)
		}
	}
	// Only the local half fails: the rounds go on until the deadline.
	l = &fakeLocal{err: localErr}
	raw, err = c.FetchRounds(FetchRounds{Local: l, LocalQueues: true, Groups: group, Count: 1, Deadline: time.Now().Add(300 * time.Millisecond)})
	require.NoError(t, err)
	require.Nil(t, raw)
	require.NotEmpty(t, l.waits)
}

// TestFetchRoundsWaitsFirstOnAnIdleNode: a group whose last claim found
// nothing is waited on before it is claimed from (one request while the
// node stays idle, not a claim and a wait); once a claim takes a job the
// next fetch claims from it first again.
func TestFetchRoundsWaitsFirstOnAnIdleNode(t *testing.T) {
	t.Parallel()
	remote := newFetchNode(t, [2]int{204, 0}, [2]int{200, 1}, [2]int{204, 0})
	group := []FetchGroup{{Addrs: []string{remote.addr}, Queues: []string{"q"}}}
	c := New(Config{})
	raw, err := c.FetchRounds(FetchRounds{Local: &fakeLocal{}, Groups: group, Count: 1, Deadline: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	require.Nil(t, raw)
	require.Equal(t, []int{1}, remote.asked(), "an unknown group is claimed from first")

	done := make(chan [][]byte, 1)
	go func() {
		raw, err := c.FetchRounds(FetchRounds{Local: &fakeLocal{}, Groups: group, Count: 1, Deadline: time.Now().Add(time.Minute)})
		assert.NoError(t, err)
		done <- raw
	}()
	select {
	case <-remote.waits:
	case raw := <-done:
		require.Failf(t, "the idle group was claimed from first", "it gave %d jobs", len(raw))
	}
	require.Equal(t, []int{1}, remote.asked(), "the idle group was waited on, not claimed from")
	remote.work <- struct{}{}
	require.Len(t, <-done, 1)
	require.Equal(t, []int{1, 1}, remote.asked(), "claimed once the node said it had work")

	raw, err = c.FetchRounds(FetchRounds{Local: &fakeLocal{}, Groups: group, Count: 1, Deadline: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	require.Nil(t, raw)
	require.Equal(t, []int{1, 1, 1}, remote.asked(), "a group that last gave a job is claimed from first")
	require.Empty(t, remote.waits)
}
