package peer

import (
	"time"

	"github.com/go-json-experiment/json"

	"github.com/corvohq/corvo/router"
)

// A fetch over queues on several nodes: the gateway serves a fetch whose
// queues' shards are all hosted here itself; otherwise PlanFetch says
// whether one node hosts them all (the whole request is forwarded there)
// or how to split them, and FetchRounds polls this node's part (through
// FetchLocal, the gateway's) and the other nodes' in rounds until a round
// claims something or the long-poll ends.

// remoteFetchSlice is how long a fetch over queues on several nodes waits
// on its local queues' signals between rounds of asking the other nodes.
const remoteFetchSlice = 250 * time.Millisecond

// FetchGroup is the queues of some shards this node does not host, and
// the nodes hosting every one of those shards, best first (the others are
// fallbacks if the first cannot be dialled).
type FetchGroup struct {
	Addrs  []string
	Queues []string
}

// PlanFetch plans a fetch over the queues of shards (byShard: each shard's
// queues) when this node does not host them all. all: the other nodes
// hosting every one of the shards (router.CommonHosts), to forward the
// whole request to; else groups: the shards not hosted here (hosted),
// covered by other nodes (router.Cover; a shard no node is known to host
// is left out).
func (c *Client) PlanFetch(shards []int, byShard map[int][]string, hosted func(int) bool) (all []string, groups []FetchGroup) {
	targets := make(map[int][]string, len(shards))
	for _, sh := range shards {
		targets[sh] = c.Targets(sh)
	}
	if all = router.CommonHosts(shards, targets); len(all) > 0 {
		return all, nil
	}
	var remote []int
	for _, sh := range shards {
		if !hosted(sh) && len(targets[sh]) > 0 {
			remote = append(remote, sh)
		}
	}
	cover, _ := router.Cover(remote, targets)
	groups = make([]FetchGroup, len(cover))
	for i, g := range cover {
		groups[i].Addrs = append([]string{g.Addr}, g.Also...)
		for _, sh := range g.Shards {
			groups[i].Queues = append(groups[i].Queues, byShard[sh]...)
		}
	}
	return nil, groups
}

// FetchLocal is this node's half of a fetch polled in rounds.
type FetchLocal interface {
	// Watch starts watching the local queues' signals; FetchRounds calls
	// it before each round's fetches, so a job arriving during the round
	// still ends the next Wait.
	Watch()
	// Fetch claims up to want jobs from the local queues (kept by the
	// implementation) and says how many it claimed.
	Fetch(want int) (int, error)
	// Wait waits until a watched signal fires or d passes (true), or the
	// server shuts down (false).
	Wait(d time.Duration) bool
}

// FetchRounds is a fetch polled in rounds.
type FetchRounds struct {
	// Local is this node's half: its Wait paces the rounds; its Fetch is
	// a source when LocalQueues (some queues' shards are hosted here).
	Local       FetchLocal
	LocalQueues bool
	Groups      []FetchGroup
	// Namespace is the namespace the fetch's queues (stored names) are of.
	Namespace string
	// WorkerID and Hostname are the fetch's, as the worker gave them.
	WorkerID, Hostname string
	Count              int
	Deadline           time.Time
}

// FetchRounds polls the local queues and each group's node (a fetch with
// timeout 0, Fetch) in turn, asking each for what is still missing of
// r.Count, and returns after the first round that claimed anything: the
// jobs other nodes claimed, as they rendered them (the local ones are
// Local's). An empty round waits on the local signals for at most
// remoteFetchSlice, so jobs on the other nodes are found within that,
// nothing spins, and no more than r.Count jobs are ever claimed. The
// round's first source rotates, so no queue starves another. err: every
// source of a round failed (the first failure, as Local or Fetch gave
// it). Nothing and no error: the deadline passed, or the server is
// shutting down.
func (c *Client) FetchRounds(r FetchRounds) (raw [][]byte, err error) {
	sources := len(r.Groups)
	if r.LocalQueues {
		sources++
	}
	start := int(c.Next() % uint64(sources))
	for round := 0; ; round++ {
		r.Local.Watch()
		local := 0
		var first error
		failed := 0
		for i := 0; i < sources && local+len(raw) < r.Count; i++ {
			k := (start + round + i) % sources
			want := r.Count - local - len(raw)
			var err error
			if r.LocalQueues && k == 0 {
				var n int
				n, err = r.Local.Fetch(want)
				local += n
			} else {
				if r.LocalQueues {
					k--
				}
				var got [][]byte
				got, err = c.fetchGroup(&r.Groups[k], &r, want)
				raw = append(raw, got...)
			}
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
		if local+len(raw) > 0 {
			return raw, nil
		}
		if failed == sources {
			return nil, first
		}
		wait := time.Until(r.Deadline)
		if wait <= 0 || !r.Local.Wait(min(wait, remoteFetchSlice)) {
			return nil, nil
		}
	}
}

// fetchGroup claims up to want jobs from a group's queues on a node
// hosting them (Fetch).
func (c *Client) fetchGroup(g *FetchGroup, r *FetchRounds, want int) ([][]byte, error) {
	body, err := json.Marshal(struct {
		Queues   []string `json:"queues"`
		WorkerID string   `json:"worker_id"`
		Hostname string   `json:"hostname"`
		Count    int      `json:"count"`
		Timeout  int      `json:"timeout"`
	}{display(g.Queues), r.WorkerID, r.Hostname, want, 0})
	if err != nil {
		return nil, err
	}
	jobs, perr := c.Fetch(g.Addrs, r.Namespace, body, time.Now().Add(c.cfg.RequestTimeout))
	if perr != nil {
		return nil, perr
	}
	return jobs, nil
}

// display is queues, stored names of one namespace, as that namespace
// sees them (a node-to-node fetch names its namespace in a header).
func display(queues []string) []string {
	out := make([]string, len(queues))
	for i, q := range queues {
		out[i] = router.DisplayQueue(q)
	}
	return out
}
