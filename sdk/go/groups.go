package corvo

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A worker over queues on several nodes of a cluster fetches from each
// node apart: its queues are grouped by the node leading their shard, and
// each group has a poller that long-polls that node for the group's queues
// alone, so every fetch is one the node answers itself (parked on its own
// signals, claimed in one Raft entry) instead of a fetch the node must
// spread over the others (peer.FetchRounds: a claim and a wait on every
// other node per fetch). An ack's fetch names its job's group, whose
// node the ack goes to. The worker's slots are shared: a group's poller
// holds one slot while its node has nothing (so a job there is delivered
// at once) and takes more as its answers come back full, and a slot that
// finished a job goes on fetching from its group unless another group's
// poller waits for a slot and this group holds more than its share of
// them: then the slot is given back for that poller (fairness between
// nodes, as the server's rotation gives it between the queues of one
// fetch). Without the placement (one node, or WithoutPlacement) there is
// one group: every queue, fetched as before.

// fetchGroup is the worker's queues whose shards one node leads.
type fetchGroup struct {
	node   string // the node's base URL ("": not routed)
	queues []string
	// waiting: its poller waits for a free slot; chains: slots running
	// its jobs (each fetching its next one from the group on its ack).
	waiting atomic.Int32
	chains  atomic.Int32
}

// slotsPerGroup: a worker groups its queues by node only with at least
// this many slots per group. Each poller holds a slot while its node has
// nothing, so while one node has all the work the others' pollers keep
// (groups - 1) slots from it: under a quarter of the slots this way. With
// fewer slots the worker fetches over every queue at once, as on one node.
const slotsPerGroup = 4

// groupQueues groups queues by the node leading their shard, in the order
// of their first queue: one group of all of them without the placement,
// or when a worker of slots slots would have fewer than slotsPerGroup per
// group.
func (c *Client) groupQueues(queues []string, slots int) []*fetchGroup {
	all := []*fetchGroup{{queues: queues}}
	if c.placement() == nil {
		return all
	}
	var groups []*fetchGroup
	at := map[string]*fetchGroup{}
	for _, q := range queues {
		node := ""
		if r := c.routeQueue(q); len(r) > 0 {
			node = r[0]
		}
		g := at[node]
		if g == nil {
			g = &fetchGroup{node: node}
			at[node] = g
			groups = append(groups, g)
		}
		g.queues = append(g.queues, q)
	}
	if len(groups) > 1 && slots < slotsPerGroup*len(groups) {
		return all
	}
	return groups
}

// sameGroups reports whether two groupings put the same queues on the
// same nodes.
func sameGroups(a, b []*fetchGroup) bool {
	return slices.EqualFunc(a, b, func(x, y *fetchGroup) bool {
		return x.node == y.node && slices.Equal(x.queues, y.queues)
	})
}

// placementNow reads the placement at once if no read has been made yet,
// for at most d: a worker starting on a cluster groups its queues by node
// from its first fetch. nil: nothing to route.
func (c *Client) placementNow(ctx context.Context, d time.Duration) *placement {
	if c.place.off.Load() {
		return nil
	}
	if p := c.place.cur.Load(); p != nil || c.place.started.Load() {
		return c.placement()
	}
	if !c.place.started.CompareAndSwap(false, true) {
		return c.placement()
	}
	c.place.mu.Lock()
	c.place.last = time.Now()
	c.place.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_ = c.loadPlacement(ctx, nil) // failing, there is none yet: read again later
	return c.place.cur.Load()
}

// keep is how many of n slots that just finished a job of group g go on
// fetching from it: all of them unless another group's poller waits for
// a slot while g holds more than its share (the slots over all the groups
// that hold or want some); those beyond the share are given back.
func (w *Worker) keep(g *fetchGroup, n int) int {
	groups := *w.groups.Load()
	if len(groups) < 2 {
		return n
	}
	hungry, active := false, 0
	for _, o := range groups {
		if o.waiting.Load() > 0 || o.chains.Load() > 0 {
			active++
		}
		hungry = hungry || o != g && o.waiting.Load() > 0
	}
	if !hungry {
		return n
	}
	share := max(w.opt.Concurrency/max(active, 1), 1)
	excess := int(g.chains.Load()) - share
	return max(min(n, n-excess), 0)
}

// placementWait reads the cluster's placement before the first fetch
// (at most a few seconds; without it the worker starts with one group and
// regroups once it is known).
func (w *Worker) placementWait(ctx context.Context) {
	w.c.placementNow(ctx, placementTimeout)
}

// regroupEvery is how often a running worker checks whether its queues'
// nodes changed (a leader moved, a node left).
const regroupEvery = time.Second

// regroup returns a new grouping of queues once it differs from cur, or
// cur once ctx is done.
func (w *Worker) regroup(ctx context.Context, queues []string, cur []*fetchGroup) []*fetchGroup {
	t := time.NewTicker(regroupEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return cur
		case <-t.C:
		}
		if next := w.c.groupQueues(queues, w.opt.Concurrency); !sameGroups(next, cur) {
			return next
		}
	}
}

// poll is group g's poller: it leases as many jobs as it holds free slots
// (shared: starting from one, twice as many after each full answer, as
// many as came after a short one; alone: every free slot) and starts a
// slot for each, until ctx is done or done closes (its grouping was
// replaced: a fetch under way is still answered and its jobs run, so no
// claimed job is left behind).
func (w *Worker) poll(ctx context.Context, done <-chan struct{}, g *fetchGroup, shared bool, slots *sync.WaitGroup) {
	want := w.opt.Concurrency
	if shared {
		want = 1
	}
	for ctx.Err() == nil {
		g.waiting.Add(1)
		select {
		case w.slots <- struct{}{}:
			g.waiting.Add(-1)
		case <-ctx.Done():
			g.waiting.Add(-1)
			return
		case <-done:
			g.waiting.Add(-1)
			return
		}
		free := 1
		for free < want {
			select {
			case w.slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		jobs, err := w.c.Fetch(ctx, FetchRequest{Queues: g.queues, WorkerID: w.opt.ID, Hostname: w.opt.Hostname,
			Timeout: w.opt.FetchTimeout.Seconds(), Count: free})
		for i := len(jobs); i < free; i++ {
			<-w.slots
		}
		if shared {
			if len(jobs) == free {
				want = min(2*free, w.opt.Concurrency)
			} else {
				want = max(len(jobs), 1)
			}
		}
		if err != nil && ctx.Err() == nil {
			select { // the server is away: try again shortly
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		// Every job of the answer counts as running before the first
		// handler does: a handler that finishes at once must not find the
		// worker idle and send its ack alone (see completer.run).
		for _, jc := range w.startAll(jobs, g) {
			g.chains.Add(1)
			slots.Go(func() {
				defer func() { g.chains.Add(-1); <-w.slots }()
				// Each ack fetches the slot's next job when one is
				// pending (one request per job in the steady state).
				w.runSlot(jc)
			})
		}
		select {
		case <-done:
			return
		default:
		}
	}
}
