package bench

import (
	"fmt"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// TestPlacement: the queue → shard rule and job-ID parsing the bench takes
// from the Go SDK are the server's router's; each shard goes to its leader when it is up, else to
// the first placed node that is up; a shard with no node up is an error;
// a worker fetches from its node's queues, and the nodes get workers in
// proportion to the queues they host.
func TestPlacement(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4, 6, 16} {
		rt := router.New(shards)
		for i := range 200 {
			q := fmt.Sprintf("bench.q%d", i)
			require.Equal(t, rt.ShardForQueue(q), corvo.ShardForQueue(q, shards), q)
		}
		for sh := range shards {
			require.Equal(t, sh, corvo.ShardOfJobID(router.JobID(sh, ulid.Make())))
		}
	}
	require.Equal(t, -1, corvo.ShardOfJobID("nope"))
	require.Equal(t, -1, corvo.ShardOfJobID("job_x_01"))

	st := &corvo.ClusterStatus{ShardCount: 3}
	for _, n := range []struct {
		id     uint64
		status string
	}{{1, "up"}, {2, "down"}, {3, "up"}} {
		st.Nodes = append(st.Nodes, corvo.ClusterNode{NodeID: n.id, HTTPAddress: fmt.Sprintf("127.0.0.%d:80", n.id), Status: n.status})
	}
	st.Shards = []corvo.ShardStatus{{ShardID: 0, LeaderNode: 3, PlacedNodes: []uint64{1, 3}},
		{ShardID: 1, LeaderNode: 2, PlacedNodes: []uint64{2, 3}}, {ShardID: 2, LeaderNode: 0, PlacedNodes: []uint64{2, 1}}}
	urls, hosts, err := planPlacement(st, "http://")
	require.NoError(t, err)
	require.Equal(t, []string{"http://127.0.0.1:80", "http://127.0.0.2:80", "http://127.0.0.3:80"}, urls)
	require.Equal(t, []int{2, 2, 0}, hosts, "leader; leader down → placed node up; no leader → placed node up")
	st.Shards[2].PlacedNodes = []uint64{2}
	_, _, err = planPlacement(st, "http://")
	require.Error(t, err)

	r := &runner{clients: make([]*httpClient, 3)}
	r.place = &placement{shardHost: hosts, queueHost: []int{0, 2, 2, 0}}
	node, qs := r.workerQueues(2)
	require.Equal(t, 2, node)
	require.Equal(t, []int{1, 2}, qs)
	node, qs = r.workerQueues(4)
	require.Equal(t, 0, node)
	require.Equal(t, []int{0, 3}, qs)
	// Workers follow the queues: node 1 hosts none and gets none.
	per := map[int]int{}
	for w := range 8 {
		node, _ := r.workerQueues(w)
		per[node]++
	}
	require.Equal(t, map[int]int{0: 4, 2: 4}, per)
	r.place.queueHost = []int{0, 0, 0, 1} // node 0 hosts three queues of four
	per = map[int]int{}
	for w := range 8 {
		node, _ := r.workerQueues(w)
		per[node]++
	}
	require.Equal(t, map[int]int{0: 6, 1: 2}, per, "workers in proportion to the queues, as the jobs are")
}
