package corvo

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Placement routing. A cluster places each shard on some of its nodes; a
// node that does not host a request's shard forwards it (one more hop).
// The client reads the placement (GET /api/v1/cluster/status: the shard
// count, each shard's leader and placed nodes, each node's address) and
// sends every request that names one queue or one job straight to a node
// hosting its shard: the leader first, then the shard's other nodes, then
// the client's usual node list (failover). A queue's shard is
// xxhash64(stored name) mod the shard count, as the server's router
// computes it; a job ID carries its shard (job_<shard>_<ULID>).
//
// The placement is read once, lazily, in the background (the first routed
// request goes the usual way), or at once by Discover, and again (at most
// every placementRefresh) when an answer says it was forwarded
// (ForwardedHeader), a node hosting the shard cannot be dialed, or a
// routed request is answered 503. A cluster of one node, a key without
// cluster:read (403) or a server without the route turn routing off.

const (
	// ForwardedHeader marks a request one node forwarded to another, and
	// the answer to it.
	ForwardedHeader = "X-Corvo-Forwarded"
	// placementRefresh is the least time between two reads of the
	// placement.
	placementRefresh = 2 * time.Second
	// placementTimeout bounds one read of the placement.
	placementTimeout = 10 * time.Second
	// downFor is how long a node that could not be dialed is left out of
	// routing.
	downFor = 5 * time.Second
)

// WithoutPlacement makes the client send every request to its current
// node (which forwards what it does not host), never reading the
// cluster's placement. By default the client routes requests naming a
// queue or a job to a node hosting its shard.
func WithoutPlacement() Option { return func(c *Client) { c.place.off.Store(true) } }

// ShardForQueue is the server's queue → shard rule (router.ShardForQueue)
// over a stored queue name (a non-default namespace's queue q is stored
// as "ns/q"): the shard index, from 0.
func ShardForQueue(stored string, shards int) int {
	return int(xxhash.Sum64String(stored) % uint64(shards))
}

// storedQueue is the name the server stores queue q under for namespace
// ns (router.NamespacedQueue).
func storedQueue(ns, q string) string {
	if ns == "" || ns == "default" {
		return q
	}
	return ns + "/" + q
}

// ShardOfJobID reads the shard index a job ID carries (job_<shard>_<ULID>);
// -1 when it carries none.
func ShardOfJobID(id string) int {
	rest, ok := strings.CutPrefix(id, "job_")
	if !ok {
		return -1
	}
	n, _, ok := strings.Cut(rest, "_")
	sh, err := strconv.Atoi(n)
	if !ok || err != nil || sh < 0 {
		return -1
	}
	return sh
}

// placement is one reading of the cluster's placement.
type placement struct {
	ns    string     // the namespace the client's requests act in
	hosts [][]string // shard → base URLs of its nodes that are up, leader first
}

// placer holds the client's placement and reads it again when asked.
type placer struct {
	off     atomic.Bool // WithoutPlacement, or the cluster cannot tell
	started atomic.Bool // the first read has been asked for
	cur     atomic.Pointer[placement]

	mu      sync.Mutex
	loading bool
	last    time.Time            // the last read began
	down    map[string]time.Time // node → until when it is left out
}

// planPlacement turns a cluster status into a placement: for each shard,
// its leader, then its other placed nodes, among the nodes that are up.
// nil when there is nothing to route (a single node, no shards).
func planPlacement(st *ClusterStatus, scheme, ns string) *placement {
	if st.ShardCount <= 0 || len(st.Nodes) < 2 {
		return nil
	}
	addr := map[uint64]string{}
	for _, n := range st.Nodes {
		if n.HTTPAddress != "" && (n.Status == "" || n.Status == "up") {
			addr[n.NodeID] = scheme + n.HTTPAddress
		}
	}
	p := &placement{ns: ns, hosts: make([][]string, st.ShardCount)}
	for _, sh := range st.Shards {
		i := int(sh.ShardID) // numbered from 0, as in job IDs
		if i < 0 || i >= st.ShardCount {
			continue
		}
		if u, ok := addr[sh.LeaderNode]; ok {
			p.hosts[i] = append(p.hosts[i], u)
		}
		for _, n := range sh.PlacedNodes {
			if u, ok := addr[n]; ok && n != sh.LeaderNode {
				p.hosts[i] = append(p.hosts[i], u)
			}
		}
	}
	return p
}

// routeShard is where a request for shard sh goes: its nodes, leader
// first, less those that recently failed to dial (nil: the usual way).
// The first call starts reading the placement.
func (c *Client) routeShard(sh int) []string {
	p := c.placement()
	if p == nil || sh < 0 || sh >= len(p.hosts) {
		return nil
	}
	return c.place.live(p.hosts[sh])
}

// routeQueue is routeShard for the shard of queue q.
func (c *Client) routeQueue(q string) []string {
	p := c.placement()
	if p == nil {
		return nil
	}
	return c.routeShard(ShardForQueue(storedQueue(p.ns, q), len(p.hosts)))
}

// routeJob is routeShard for the shard job ID id carries.
func (c *Client) routeJob(id string) []string { return c.routeShard(ShardOfJobID(id)) }

// routeMost is the route of the shard most of keys (queues, or job IDs
// when jobs) map to: a request spanning shards goes to the node that
// answers most of it itself.
func (c *Client) routeMost(keys []string, jobs bool) []string {
	p := c.placement()
	if p == nil || len(keys) == 0 {
		return nil
	}
	votes := map[string]int{}
	best, bestN := "", 0
	for _, k := range keys {
		var h []string
		if jobs {
			h = c.routeJob(k)
		} else {
			h = c.routeQueue(k)
		}
		if len(h) == 0 {
			continue
		}
		votes[h[0]]++
		if n := votes[h[0]]; n > bestN {
			best, bestN = h[0], n
		}
	}
	if best == "" {
		return nil
	}
	return []string{best}
}

// placement is the current placement (nil: route nothing); the first
// call starts reading it.
func (c *Client) placement() *placement {
	if c.place.off.Load() {
		return nil
	}
	if !c.place.started.Load() && c.place.started.CompareAndSwap(false, true) {
		// The call that starts the read routes nothing: the read is under
		// way, and whether it is done before this request leaves must not
		// decide where the request goes.
		c.refreshPlacement()
		return nil
	}
	return c.place.cur.Load()
}

// refreshPlacement reads the placement again in the background, unless a
// read is under way or one began less than placementRefresh ago.
func (c *Client) refreshPlacement() {
	if c.place.off.Load() {
		return
	}
	c.place.mu.Lock()
	if c.place.loading || (!c.place.last.IsZero() && time.Since(c.place.last) < placementRefresh) {
		c.place.mu.Unlock()
		return
	}
	c.place.loading = true
	c.place.last = time.Now()
	c.place.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), placementTimeout)
		defer cancel()
		_ = c.loadPlacement(ctx, nil) // failing, the old placement stays
		c.place.mu.Lock()
		c.place.loading = false
		c.place.mu.Unlock()
	}()
}

// loadPlacement reads the placement (st: a cluster status read already)
// and makes it the client's.
func (c *Client) loadPlacement(ctx context.Context, st *ClusterStatus) error {
	if st == nil {
		st = &ClusterStatus{}
		if err := c.getDirect(ctx, "/api/v1/cluster/status", st); err != nil {
			var ae *Error
			if errors.As(err, &ae) && (ae.Status == http.StatusForbidden || ae.Status == http.StatusNotFound || ae.Status == http.StatusUnauthorized) {
				c.place.off.Store(true) // the cluster cannot tell us: route nothing
				c.place.cur.Store(nil)
			}
			return err
		}
	}
	ns := c.namespace
	if ns == "" && c.apiKey != "" {
		// The key's own namespace, which its requests act in.
		var who WhoAmI
		if err := c.getDirect(ctx, "/api/v1/auth/whoami", &who); err != nil {
			return err
		}
		ns = who.Namespace
	}
	base, _ := c.base()
	scheme := "http://"
	if strings.HasPrefix(base, "https://") {
		scheme = "https://"
	}
	c.place.cur.Store(planPlacement(st, scheme, ns))
	return nil
}

// getDirect is a GET through the client's node list without the retries
// of do: a placement read never waits behind Retry-After.
func (c *Client) getDirect(ctx context.Context, path string, out any) error {
	var err error
	for range c.Nodes() {
		base, at := c.base()
		if _, err = c.once(ctx, http.MethodGet, base+path, nil, out); err == nil || !dialFailed(err) {
			return err
		}
		c.failover(at)
	}
	return err
}

// live is hosts less the nodes that recently failed to dial.
func (pl *placer) live(hosts []string) []string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.down) == 0 {
		return hosts
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if until, ok := pl.down[h]; ok && time.Now().Before(until) {
			continue
		}
		out = append(out, h)
	}
	return out
}

// markDown leaves node out of routing for downFor.
func (pl *placer) markDown(node string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.down == nil {
		pl.down = map[string]time.Time{}
	}
	pl.down[node] = time.Now().Add(downFor)
}

// dialFailed reports an error of a request that never reached a server
// (nothing listens, no route): sending it elsewhere cannot apply it twice.
func dialFailed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// doRouted sends a request to the first of hosts that answers (hosts: a
// route, nil for none), then, if none does, the usual way (do's node list,
// retries and failover). A host that cannot be dialed is left out for a
// while and the next one tried; a connection that fails once the request
// was sent leaves the host out too, and the request goes the usual way
// (which retries it, as before). Those, a 503 or an answer saying it was
// forwarded make the client read the placement again.
func (c *Client) doRouted(ctx context.Context, hosts []string, method, path string, body []byte, out any) (int, error) {
	for _, h := range hosts {
		status, err := c.once(ctx, method, h+path, body, out)
		if err == nil {
			return status, nil
		}
		if dialFailed(err) && ctx.Err() == nil {
			c.place.markDown(h)
			c.refreshPlacement()
			continue
		}
		var ae *Error
		if errors.As(err, &ae) {
			if ae.Status == http.StatusServiceUnavailable {
				c.refreshPlacement()
				break
			}
			if ae.Status == http.StatusTooManyRequests {
				break
			}
			return status, err // the server's answer
		}
		var ue *url.Error
		if errors.As(err, &ue) && !ue.Timeout() && ctx.Err() == nil {
			// Reset or closed (a node killed under a kept-alive
			// connection): left out too, and do retries the request, as
			// it would have.
			c.place.markDown(h)
			c.refreshPlacement()
			break
		}
		return status, err
	}
	return c.doBody(ctx, method, path, body, out)
}

// doAt is do for a request routed to hosts.
func (c *Client) doAt(ctx context.Context, hosts []string, method, path string, in, out any) (int, error) {
	if len(hosts) == 0 {
		return c.do(ctx, method, path, in, out)
	}
	body, err := marshalBody(in)
	if err != nil {
		return 0, err
	}
	return c.doRouted(ctx, hosts, method, path, body, out)
}
