package bench

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// Placement-aware load (Config.Placement): the run reads the cluster's
// placement once (GET /api/v1/cluster/status through the first URL) and
// sends every request straight to a node hosting its shard — the leader
// when known — so that no request costs a forwarding hop: an enqueue to
// its queue's shard, a fetch only over the queues of its worker's node (a
// worker is bound to one node, round-robin), an ack to the shard its job
// ID names. A queue's shard is xxhash64(queue) mod the shard count, as the
// server's router computes it, and a job ID is job_<shard>_<ULID>.

// placement maps queues and shards to the run's clients.
type placement struct {
	shardHost []int // shard → index in runner.clients
	queueHost []int // queue index (Config.queueNames) → index in runner.clients
}

// readPlacement asks the node behind c for the cluster's placement and
// returns the base URLs of its nodes (with c's scheme) and, per shard
// index, the index of the node to send its requests to.
func readPlacement(c *httpClient) (urls []string, shardHost []int, err error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.base + "/api/v1/cluster/status")
	req.Header.SetMethod(fasthttp.MethodGet)
	if c.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, c.auth)
	}
	if err := c.hc.DoTimeout(req, resp, requestTimeout); err != nil {
		return nil, nil, fmt.Errorf("bench: read the placement: %w", err)
	}
	if resp.StatusCode() != 200 {
		return nil, nil, fmt.Errorf("bench: read the placement: %w", newStatusError(resp.StatusCode(), resp.Body()))
	}
	var st corvo.ClusterStatus
	if err := json.Unmarshal(resp.Body(), &st); err != nil {
		return nil, nil, fmt.Errorf("bench: read the placement: %w", err)
	}
	return planPlacement(&st, c.base[:strings.Index(c.base, "://")+3])
}

// planPlacement picks, for each shard, its leader, else its first placed
// node that is up.
func planPlacement(st *corvo.ClusterStatus, scheme string) (urls []string, shardHost []int, err error) {
	if st.ShardCount <= 0 || len(st.Nodes) == 0 {
		return nil, nil, fmt.Errorf("bench: the cluster status names no shards or nodes")
	}
	index := map[uint64]int{}
	up := map[uint64]bool{}
	for i, n := range st.Nodes {
		index[n.NodeID] = i
		up[n.NodeID] = n.Status == "" || n.Status == "up"
		urls = append(urls, scheme+n.HTTPAddress)
	}
	shardHost = make([]int, st.ShardCount)
	for i := range shardHost {
		shardHost[i] = -1
	}
	for _, sh := range st.Shards {
		i := int(sh.ShardID)
		if i < 0 || i >= st.ShardCount {
			continue
		}
		if k, ok := index[sh.LeaderNode]; ok && up[sh.LeaderNode] {
			shardHost[i] = k
			continue
		}
		for _, n := range sh.PlacedNodes {
			if k, ok := index[n]; ok && up[n] {
				shardHost[i] = k
				break
			}
		}
	}
	for i, k := range shardHost {
		if k < 0 {
			return nil, nil, fmt.Errorf("bench: no node that is up hosts shard %d", i)
		}
	}
	return urls, shardHost, nil
}

// newPlacement maps the queues to their shards' nodes.
func newPlacement(shardHost []int, queues []string) *placement {
	p := &placement{shardHost: shardHost, queueHost: make([]int, len(queues))}
	for i, q := range queues {
		p.queueHost[i] = shardHost[corvo.ShardForQueue(q, len(shardHost))]
	}
	return p
}

// forJob is the client of job i's queue (appendJob: queue i mod queues).
func (r *runner) forJob(i int64) *httpClient {
	return r.clients[r.place.queueHost[i%int64(len(r.place.queueHost))]]
}

// forJobID is the client of the shard a job ID names (nil: it names none
// this run knows).
func (r *runner) forJobID(id string) *httpClient {
	if sh := corvo.ShardOfJobID(id); sh >= 0 && sh < len(r.place.shardHost) {
		return r.clients[r.place.shardHost[sh]]
	}
	return nil
}

// workerQueues is the node worker w is bound to and the queues (indexes)
// its fetches name: those hosted there. Worker w goes to the node of
// queue w mod the queue count, so each node gets workers in proportion to
// the queues it hosts, as it gets jobs (job i goes to queue i mod the
// queue count). Bound round-robin over the nodes instead, a node hosting
// half the queues had a quarter of the workers of a 4-node run and fell
// behind while the others idled (BENCHMARKS.md, session 17).
func (r *runner) workerQueues(w int) (node int, queues []int) {
	node = r.place.queueHost[w%len(r.place.queueHost)]
	for i, k := range r.place.queueHost {
		if k == node {
			queues = append(queues, i)
		}
	}
	return node, queues
}
