package peer

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestSearchPlan: the covering set is greedy (the node hosting the most
// uncovered shards first, ties to the first listed) and skips nodes that
// failed; what nobody hosts is reported.
func TestSearchPlan(t *testing.T) {
	t.Parallel()
	hosts := map[int][]string{0: {"A"}, 1: {"A", "B"}, 2: {"B", "C"}, 3: {"C"}}
	c := New(Config{Targets: func(sh int) []string { return hosts[sh] }})
	parts, left := c.planSearch([]int{0, 1, 2, 3}, nil)
	require.Empty(t, left)
	require.Equal(t, []SearchPart{{"A", []int{0, 1}}, {"C", []int{2, 3}}}, parts)
	parts, left = c.planSearch([]int{1, 2, 3}, map[string]bool{"C": true})
	require.Equal(t, []SearchPart{{"B", []int{1, 2}}}, parts)
	require.Equal(t, []int{3}, left, "nobody else hosts 3")
	parts, left = c.planSearch([]int{0, 3}, map[string]bool{"A": true, "C": true})
	require.Empty(t, parts)
	require.Equal(t, []int{0, 3}, left)
}

// searchNode is a fake node answering search parts: with status (200: one
// job per shard asked, its ID naming the node and the shard), and noting
// the ?shards= of every part it was asked.
type searchNode struct {
	name   string
	status int
	mu     sync.Mutex
	asked  []string
	addr   string
}

func newSearchNode(t *testing.T, name string, status int) *searchNode {
	n := &searchNode{name: name, status: status}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		shards := r.URL.Query().Get("shards")
		n.mu.Lock()
		n.asked = append(n.asked, shards)
		n.mu.Unlock()
		if r.URL.Path != "/api/v1/jobs/search" || r.Header.Get(HopHeader) == "" {
			w.WriteHeader(404)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if n.status != 200 {
			w.WriteHeader(n.status)
			fmt.Fprintf(w, `{"error":"%s says no","code":%q}`, n.name, map[int]string{400: corvo.CodeInvalidRequest, 503: corvo.CodeUnavailable}[n.status])
			return
		}
		var jobs, keys []string
		for _, sh := range strings.Split(shards, ",") {
			id := n.name + sh
			jobs = append(jobs, `{"id":"`+id+`"}`)
			keys = append(keys, `{"v":1,"id":"`+id+`","queue":"q"}`)
		}
		fmt.Fprintf(w, `{"jobs":[%s],"total":%d,"has_more":false,"keys":[%s]}`, strings.Join(jobs, ","), len(jobs), strings.Join(keys, ","))
	}))
	t.Cleanup(srv.Close)
	n.addr = srv.Listener.Addr().String()
	return n
}

func (n *searchNode) parts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.asked)
}

func answerIDs(as []*SearchAnswer) []string {
	var out []string
	for _, a := range as {
		for _, k := range a.Keys {
			out = append(out, k.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestSearchShardsRetries: a part that fails with a 503 is asked again of
// another node hosting its shards, and the node that failed is not asked
// again; when no node is left the search fails with a 503 naming why; a
// node's 4xx answer ends the search with it.
func TestSearchShardsRetries(t *testing.T) {
	t.Parallel()
	down := newSearchNode(t, "down", 503)
	good := newSearchNode(t, "good", 200)
	other := newSearchNode(t, "other", 200)
	hosts := map[int][]string{0: {down.addr, good.addr}, 1: {down.addr, good.addr}, 2: {other.addr}}
	c := New(Config{Targets: func(sh int) []string { return hosts[sh] }})
	deadline := time.Now().Add(5 * time.Second)
	as, err := c.SearchShards("", []int{0, 1, 2}, []byte(`{}`), deadline)
	require.Nil(t, err)
	require.Equal(t, []string{"good0", "good1", "other2"}, answerIDs(as))
	require.Equal(t, []string{"0,1"}, down.parts(), "the node that failed was asked once")
	require.Equal(t, []string{"0,1"}, good.parts(), "its shards were asked of the next node")
	require.Equal(t, []string{"2"}, other.parts())

	// Nobody left for shard 3.
	hosts[3] = []string{down.addr}
	_, err = c.SearchShards("", []int{3}, []byte(`{}`), deadline)
	require.NotNil(t, err)
	require.Equal(t, 503, err.Status)
	require.Equal(t, corvo.CodeUnavailable, err.Code)
	require.Contains(t, err.Msg, "no node hosting shard 3 answered the search")
	require.Contains(t, err.Msg, "down says no")

	// A 4xx is the answer to the request itself: not asked elsewhere.
	bad := newSearchNode(t, "bad", 400)
	hosts[4] = []string{bad.addr, good.addr}
	_, err = c.SearchShards("", []int{4}, []byte(`{}`), deadline)
	require.NotNil(t, err)
	require.Equal(t, 400, err.Status)
	require.Equal(t, corvo.CodeInvalidRequest, err.Code)
	require.Equal(t, []string{"0,1"}, good.parts(), "the 4xx was not retried elsewhere")
}
