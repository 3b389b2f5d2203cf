package peer

import (
	"context"
	"sync"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/corvohq/corvo/router"
)

// A fetch over queues on several nodes: the gateway serves a fetch whose
// queues' shards are all hosted here itself; otherwise PlanFetch says
// whether one node hosts them all (the whole request is forwarded there)
// or how to split them, and FetchRounds claims from every part once, then
// waits on all of them at once — this node's signals (through FetchLocal,
// the gateway's) and a wait on each other node (WaitReady, which claims
// nothing) — and claims from whichever part says it has work, for what is
// still missing, until something is claimed or the long-poll ends.

// waitGrace is how long a wait on another node may still be answered
// once the fetch it was for has returned, before it is cancelled (which
// closes its connection).
const waitGrace = 100 * time.Millisecond

// remoteFetchSlice is how long a fetch waits before claiming again from
// another node whose wait failed (an unreachable node, or one that has no
// wait route): that node is polled at this pace, never spun on.
const remoteFetchSlice = 250 * time.Millisecond

// retryEmptyClaim is how long a fetch waits before waiting again on a node
// that said it had work but gave none (another worker took it, or a
// concurrency cap holds it back); a node's wait answers at once while its
// queue is fetchable, so this paces the retries.
const retryEmptyClaim = 50 * time.Millisecond

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

// FetchLocal is this node's half of a fetch over several nodes.
type FetchLocal interface {
	// Watch starts watching the local queues' signals; FetchRounds calls
	// it before each local claim, so a job arriving after the claim still
	// ends the next Wait.
	Watch()
	// Fetch claims up to want jobs from the local queues (kept by the
	// implementation) and says how many it claimed.
	Fetch(want int) (int, error)
	// Wait waits until a watched signal fires or d passes (from -1), a
	// value arrives on remote (from: that value), or the server shuts down
	// (alive false).
	Wait(d time.Duration, remote <-chan int) (from int, alive bool)
}

// FetchRounds is a fetch over queues on several nodes.
type FetchRounds struct {
	// Local is this node's half: its Wait is where the fetch waits; its
	// Fetch is a source when LocalQueues (some queues' shards are hosted
	// here).
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

// FetchRounds claims from the local queues and from each group's node (a
// fetch with timeout 0, Fetch), asking each for what is still missing of
// r.Count, in an order that rotates between fetches so no queue starves
// another. If that claims nothing it waits on every source at once: the
// local signals, and one wait (WaitReady) per group, each in its own
// goroutine; the first source to say it has work is claimed from (and any
// other that said so meanwhile), and the fetch waits again if that claimed
// nothing. So a job on any node is claimed as soon as it is there, and
// only claims take jobs: no more than r.Count are ever claimed, and none
// is claimed and dropped. It returns after the first claims that took
// anything: the jobs other nodes claimed, as they rendered them (the
// local ones are Local's). err: every source failed on the first claims
// (the first failure, as Local or Fetch gave it). Nothing and no error:
// the deadline passed, or the server is shutting down. Waits still out
// are left waitGrace to be answered, then cancelled.
func (c *Client) FetchRounds(r FetchRounds) (raw [][]byte, err error) {
	sources := len(r.Groups)
	if r.LocalQueues {
		sources++
	}
	// Waits still out when the fetch returns are left waitGrace to be
	// answered, then cancelled: at a steady rate another node's wait is
	// answered within milliseconds and its connection goes back to the
	// pool, where cancelling it would close it (and the next wait dial
	// a new one).
	ctx, cancel := context.WithCancel(context.Background())
	over := make(chan struct{})
	waits := 0
	defer func() {
		close(over)
		if waits == 0 {
			cancel()
		} else {
			time.AfterFunc(waitGrace, cancel)
		}
	}()
	ready := make(chan int, len(r.Groups)) // one wait per group at a time: never blocks
	waiting := make([]bool, len(r.Groups))
	delay := make([]time.Duration, len(r.Groups))
	due := make([]bool, len(r.Groups)) // claim from this group in the next round
	// A group whose last claim found nothing is waited on first, not
	// claimed from: its wait answers at once if it has work, and an idle
	// node then costs one request per fetch, not a claim and a wait.
	keys := make([]string, len(r.Groups))
	for k := range due {
		keys[k] = groupKey(&r.Groups[k])
		due[k] = !c.idle.has(keys[k])
	}
	localDue := r.LocalQueues
	start := int(c.Next() % uint64(max(sources, 1)))
	local := 0
	for round := 0; ; round++ {
		if localDue {
			r.Local.Watch()
		}
		tried, failed := 0, 0
		var first error
		for i := 0; i < sources && local+len(raw) < r.Count; i++ {
			k := (start + round + i) % sources
			want := r.Count - local - len(raw)
			var err error
			if r.LocalQueues && k == 0 {
				if !localDue {
					continue
				}
				var n int
				n, err = r.Local.Fetch(want)
				local += n
			} else {
				if r.LocalQueues {
					k--
				}
				if !due[k] {
					continue
				}
				due[k] = false
				var got [][]byte
				got, err = c.fetchGroup(&r.Groups[k], &r, want)
				raw = append(raw, got...)
				// A failure is claimed again first, so that it is seen.
				c.idle.mark(keys[k], err == nil && len(got) == 0)
				switch {
				case err != nil:
					delay[k] = remoteFetchSlice
				case len(got) == 0 && round > 0:
					delay[k] = retryEmptyClaim
				default:
					delay[k] = 0
				}
			}
			tried++
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
		localDue = false
		if local+len(raw) > 0 {
			return raw, nil
		}
		if round == 0 && tried > 0 && tried == sources && failed == tried { // (a group waited on first was not tried)
			return nil, first
		}
		wait := time.Until(r.Deadline)
		if wait <= 0 {
			return nil, nil
		}
		for k := range r.Groups {
			if !waiting[k] && !due[k] {
				waiting[k] = true
				waits++
				go c.waitGroup(ctx, over, &r.Groups[k], k, delay[k], r.Deadline, ready)
			}
		}
		from, alive := r.Local.Wait(wait, ready)
		if !alive {
			return nil, nil
		}
		if from < 0 {
			localDue = r.LocalQueues
		} else {
			waiting[from], due[from] = false, true
		}
		for more := true; more; {
			select {
			case k := <-ready:
				waiting[k], due[k] = false, true
			default:
				more = false
			}
		}
	}
}

// waitGroup waits, after delay, until the group's node says one of its
// queues has work (or, when that node cannot be waited on, until
// remoteFetchSlice has passed), then sends k on ready. It gives up
// silently when ctx ends or deadline passes, and once the fetch is over
// (over closed) it starts nothing more: a wait under way is left to end
// (ctx ends it waitGrace later).
func (c *Client) waitGroup(ctx context.Context, over <-chan struct{}, g *FetchGroup, k int, delay time.Duration, deadline time.Time, ready chan<- int) {
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-over: // closed before ctx ends
			return false
		case <-t.C:
			return true
		}
	}
	if delay > 0 && !pause(delay) {
		return
	}
	for {
		d := min(time.Until(deadline), remoteWaitMax)
		if d <= 0 {
			return
		}
		ok, err := c.WaitReady(ctx, g.Addrs, g.Queues, d)
		select {
		case <-over: // (and so whenever ctx ended)
			return
		default:
		}
		if err != nil {
			if !pause(remoteFetchSlice) {
				return
			}
			ok = true // claim to learn more: Fetch tries every address
		}
		if ok {
			ready <- k
			return
		}
	}
}

// idleGroupsMax bounds idleGroups: past it the set starts again empty
// (every group is claimed from first once more).
const idleGroupsMax = 4096

// idleGroups is the set of fetch groups (a node and queues) whose last
// claim found nothing.
type idleGroups struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// groupKey names a group by its first node and its queues; "" (never
// idle) for a group without a node.
func groupKey(g *FetchGroup) string {
	if len(g.Addrs) == 0 {
		return ""
	}
	n := len(g.Addrs[0])
	for _, q := range g.Queues {
		n += 1 + len(q)
	}
	b := make([]byte, 0, n)
	b = append(b, g.Addrs[0]...)
	for _, q := range g.Queues {
		b = append(append(b, 0), q...)
	}
	return string(b)
}

func (s *idleGroups) has(k string) bool {
	if k == "" {
		return false
	}
	s.mu.Lock()
	_, ok := s.m[k]
	s.mu.Unlock()
	return ok
}

func (s *idleGroups) mark(k string, idle bool) {
	if k == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !idle:
		delete(s.m, k)
	case s.m == nil || len(s.m) >= idleGroupsMax:
		s.m = map[string]struct{}{k: {}}
	default:
		s.m[k] = struct{}{}
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
