//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// netLab is a private network of Linux network namespaces, one per node,
// built with iproute2 for a partition test. Each node has two links:
//
//   - a cluster link: a veth whose root-namespace end is a port of a
//     bridge; nodes reach each other (Raft and HTTP) only over it, in
//     10.231.<c>.0/24 (node i is .i, the bridge .254);
//   - a client link: a point-to-point veth to the root namespace, in
//     10.231.<c+1>.<4i>/30, over which the test talks to the node's HTTP
//     API. It joins no other node, so a node cut off the bridge is still
//     reachable by clients, as the minority side of a real partition is.
//
// Both subnets exist only on these links, and a node has no route beyond
// its own two links, so with its cluster link down no path leads from it to
// another node. Cleanup removes the namespaces, links and bridge even when
// the test fails.
type netLab struct {
	t      *testing.T
	prefix string // cpt<pid>: every name the lab creates starts with it
	bridge string
	net    int // c: cluster subnet 10.231.c.0/24, client subnet 10.231.c+1.0/24
	nodes  []labNode
}

type labNode struct {
	ns       string
	link     string // root end of the cluster veth (a bridge port)
	client   string // root end of the client veth
	clusterI string // the node's cluster address
	clientI  string // the node's client-link address
}

// labName matches the names of one test process's lab; a crashed run's
// leftovers carry a pid that no longer exists.
var labName = regexp.MustCompile(`^cpt(\d+)`)

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// newNetLab builds n node namespaces, or skips the test when it cannot
// (not root, no iproute2, no network namespaces).
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("partition test: needs root to create network namespaces (ip netns, veth, bridge); run the tests as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("partition test: needs the ip command (iproute2)")
	}
	sweepStaleLabs(t)
	l := &netLab{t: t, prefix: fmt.Sprintf("cpt%d", os.Getpid())}
	l.bridge = l.prefix + "br"
	l.net = freeLabSubnet(t)
	t.Cleanup(l.destroy)
	probe := l.prefix + "probe"
	if err := ipCmd("netns", "add", probe); err != nil {
		t.Skipf("partition test: network namespaces are not usable here (%v)", err)
	}
	require.NoError(t, ipCmd("netns", "delete", probe))

	must := func(args ...string) { require.NoError(t, ipCmd(args...)) }
	must("link", "add", l.bridge, "type", "bridge")
	must("addr", "add", fmt.Sprintf("10.231.%d.254/24", l.net), "dev", l.bridge)
	must("link", "set", l.bridge, "up")
	for i := 1; i <= n; i++ {
		nd := labNode{
			ns:       fmt.Sprintf("%sn%d", l.prefix, i),
			link:     fmt.Sprintf("%sk%d", l.prefix, i),
			client:   fmt.Sprintf("%sc%d", l.prefix, i),
			clusterI: fmt.Sprintf("10.231.%d.%d", l.net, i),
			clientI:  fmt.Sprintf("10.231.%d.%d", l.net+1, 4*i+2),
		}
		l.nodes = append(l.nodes, nd)
		must("netns", "add", nd.ns)
		must("-n", nd.ns, "link", "set", "lo", "up")
		must("link", "add", nd.link, "type", "veth", "peer", "name", "cluster", "netns", nd.ns)
		must("link", "set", nd.link, "master", l.bridge, "up")
		must("-n", nd.ns, "addr", "add", nd.clusterI+"/24", "dev", "cluster")
		must("-n", nd.ns, "link", "set", "cluster", "up")
		must("link", "add", nd.client, "type", "veth", "peer", "name", "client", "netns", nd.ns)
		must("addr", "add", fmt.Sprintf("10.231.%d.%d/30", l.net+1, 4*i+1), "dev", nd.client)
		must("link", "set", nd.client, "up")
		must("-n", nd.ns, "addr", "add", nd.clientI+"/30", "dev", "client")
		must("-n", nd.ns, "link", "set", "client", "up")
	}
	return l
}

// freeLabSubnet picks c so that neither 10.231.c.0/24 nor 10.231.c+1.0/24
// is in use on this host.
func freeLabSubnet(t *testing.T) int {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	for try := 0; try < 50; try++ {
		c := 2 * rnd.IntN(127)
		used := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ip := ipn.IP.To4()
				used = used || (ip != nil && ip[0] == 10 && ip[1] == 231 && (int(ip[2]) == c || int(ip[2]) == c+1))
			}
		}
		if !used {
			return c
		}
	}
	t.Fatal("partition test: no free 10.231.x.0/24 pair")
	return 0
}

// sweepStaleLabs removes namespaces and links left by a run of this test
// whose process is gone (it was killed before its cleanup ran).
func sweepStaleLabs(t *testing.T) {
	stale := func(name string) bool {
		m := labName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return pid != os.Getpid() && os.IsNotExist(err)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && stale(f[0]) {
				t.Logf("removing network namespace %s left by a dead test run", f[0])
				_ = ipCmd("netns", "delete", f[0])
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if stale(i.Name) {
			t.Logf("removing link %s left by a dead test run", i.Name)
			_ = ipCmd("link", "delete", i.Name)
		}
	}
}

func (l *netLab) destroy() {
	for _, nd := range l.nodes {
		// Deleting one end of a veth deletes its peer; deleting the
		// namespace would too, but only once its last process is gone.
		for _, link := range []string{nd.link, nd.client} {
			if _, err := net.InterfaceByName(link); err == nil {
				if err := ipCmd("link", "delete", link); err != nil {
					l.t.Errorf("cleanup: %v", err)
				}
			}
		}
		if err := ipCmd("netns", "delete", nd.ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			l.t.Errorf("cleanup: %v", err)
		}
	}
	if _, err := net.InterfaceByName(l.bridge); err == nil {
		if err := ipCmd("link", "delete", l.bridge); err != nil {
			l.t.Errorf("cleanup: %v", err)
		}
	}
}

// isolate cuts node i's cluster link: the carrier drops on both ends, so
// the node can reach no other node and none can reach it. Its client link
// stays up.
func (l *netLab) isolate(i int) { require.NoError(l.t, ipCmd("link", "set", l.nodes[i].link, "down")) }

// heal puts node i's cluster link back.
func (l *netLab) heal(i int) { require.NoError(l.t, ipCmd("link", "set", l.nodes[i].link, "up")) }

// startNode starts node i (0-based) in its namespace, listening on every
// address (HTTP) and on its cluster address (Raft). join is the HTTP address
// of a member, or "" for the founding node.
func (l *netLab) startNode(i int, join string) *server {
	t := l.t
	t.Helper()
	nd := l.nodes[i]
	s := &server{t: t, dir: t.TempDir(), http: nd.clusterI + ":8080", bind: "0.0.0.0:8080", raft: nd.clusterI + ":9400"}
	s.url = "http://" + nd.clientI + ":8080"
	s.extra = []string{"--node-id", fmt.Sprintf("n%d", i+1), "--http-advertise", s.http}
	if join != "" {
		s.extra = append(s.extra, "--join", join)
	}
	s.env = append(s.env, "CORVO_CLUSTER_SECRET="+testClusterSecret)
	s.command = func(args []string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", nd.ns, corvoBin}, args...)...)
		// ip execs corvo in place; it dies with the test process even
		// when cleanups cannot run (a test binary timeout).
		dieWithTest(cmd)
		return cmd
	}
	s.start()
	t.Cleanup(func() {
		if s.cmd != nil && s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("node %d stderr:\n%s", i+1, s.stderr.String())
		}
	})
	return s
}

// partitionStatus is the part of /cluster/status this test reads,
// including the meta group and terms.
type partitionStatus struct {
	Shards []struct {
		ShardID uint64 `json:"shard_id"`
		Leader  uint64 `json:"leader_node"`
		Term    uint64 `json:"term"`
	} `json:"shards"`
	Meta struct {
		Leader uint64 `json:"leader_node"`
		Term   uint64 `json:"term"`
	} `json:"meta"`
}

// localShards is one node's own view of its groups (?local=true), by Raft
// group ID (a shard's number + 1; the meta group's is shard.MetaShardID).
type localShards struct {
	LeaderOf []uint64 `json:"leader_of"`
	Shards   []struct {
		ShardID uint64 `json:"shard_id"`
		Leader  uint64 `json:"leader_node"`
		Term    uint64 `json:"term"`
	} `json:"shards"`
}

// attempt is one HTTP request's outcome.
type attempt struct {
	code       int // 0: no answer (timeout, connection error)
	body       []byte
	retryAfter string
	err        error
}

func send(c *http.Client, method, url string, body any) attempt {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		return attempt{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return attempt{err: err}
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return attempt{err: err}
	}
	return attempt{code: resp.StatusCode, body: out, retryAfter: resp.Header.Get("Retry-After")}
}

// write sends one write to one node, repeating it after a 503/429 with
// Retry-After (the documented client behaviour) until it gets another
// answer or the budget runs out. It returns the final answer and how many
// times it was retried.
func write(c *http.Client, budget time.Duration, method, url string, body any) (attempt, int) {
	deadline := time.Now().Add(budget)
	for retries := 0; ; retries++ {
		a := send(c, method, url, body)
		if (a.code != 503 && a.code != 429) || a.retryAfter == "" || time.Now().Add(time.Second).After(deadline) {
			return a, retries
		}
		time.Sleep(time.Second)
	}
}

// TestClusterPartition is issue 6's partition test: three nodes, each in
// its own network namespace; the node leading the most shards is cut off
// the cluster network while clients can still reach it. The majority side
// elects new leaders and keeps serving writes (every one 2xx within 10 s,
// retrying after 503 per Retry-After); the isolated node steps down and
// accepts no write; after healing it catches up, and every job accepted on
// either side is on every node and completes.
func TestClusterPartition(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	lab := newNetLab(t, 3)
	n1 := lab.startNode(0, "")
	nodes := []*server{n1, lab.startNode(1, n1.http), lab.startNode(2, n1.http)}
	v := waitCluster(t, n1, 3)

	// One queue per shard, so every shard takes writes.
	rt := router.New(len(v.Shards))
	queues := make([]string, len(v.Shards))
	for k, found := 0, 0; found < len(queues); k++ {
		q := fmt.Sprintf("part.%d", k)
		if sh := rt.ShardForQueue(q); queues[sh] == "" {
			queues[sh] = q
			found++
		}
	}
	const lease = 120 // seconds: no lease runs out during the test
	enqueue := func(q string, tag string) map[string]any {
		return map[string]any{"queue": q, "payload": map[string]string{"tag": tag}, "lease_duration": lease}
	}

	var mu sync.Mutex
	accepted := map[string]bool{}
	accept := func(a attempt) error {
		var r struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(a.body, &r); err != nil || r.JobID == "" {
			return fmt.Errorf("enqueue answered %d %q", a.code, a.body)
		}
		mu.Lock()
		accepted[r.JobID] = true
		mu.Unlock()
		return nil
	}

	// Before the partition: jobs on every shard through every node, and
	// some of them leased ("held") to ack later from each side.
	for k, s := range nodes {
		for _, q := range queues {
			for j := 0; j < 5; j++ {
				a, _ := write(client, 30*time.Second, "POST", s.url+"/api/v1/enqueue", enqueue(q, fmt.Sprintf("pre-%d-%d", k, j)))
				require.Equal(t, 201, a.code, "%s", a.body)
				require.NoError(t, accept(a))
			}
		}
	}
	type held struct {
		id      string
		attempt int
	}
	var heldJobs []held
	for _, q := range queues {
		a, _ := write(client, 30*time.Second, "POST", n1.url+"/api/v1/fetch",
			map[string]any{"queues": []string{q}, "worker_id": "held", "timeout": 5, "count": 4})
		require.Equal(t, 200, a.code, "%s", a.body)
		r := decode[struct{ Jobs []fetched }](t, a.body)
		require.NotEmpty(t, r.Jobs)
		for _, j := range r.Jobs {
			heldJobs = append(heldJobs, held{j.JobID, j.Attempt})
		}
	}

	// The victim: the node leading the most data shards.
	var nodeIDs []uint64
	victim, most := -1, -1
	v = waitCluster(t, n1, 3)
	for k, s := range nodes {
		for _, n := range v.Nodes {
			if n.HTTP == s.http {
				nodeIDs = append(nodeIDs, n.NodeID)
				if len(n.LeaderOf) > most {
					victim, most = k, len(n.LeaderOf)
				}
			}
		}
	}
	require.Len(t, nodeIDs, 3)
	iso := nodes[victim]
	majority := []int{(victim + 1) % 3, (victim + 2) % 3}
	t.Logf("isolating node %d (id %d), leader of %d of %d shards; %d jobs accepted, %d held",
		victim+1, nodeIDs[victim], most, len(queues), len(accepted), len(heldJobs))

	lab.isolate(victim)
	t0 := time.Now()

	// The majority side: one writer per node enqueueing round-robin over
	// every shard's queue and one worker per node fetching and acking.
	// Every write must get its 2xx within 15 s: a proposal may use its
	// whole 10 s deadline (shard.ProposalDeadlineDefault) before it answers
	// 503, and the client's retry after Retry-After must then succeed.
	// (CI and a loaded run here each saw one write take ~11 s, at the
	// heal: the first attempt hit the deadline, the retry went through.)
	// New leaders must still be elected within electionBudget.
	const writeBudget, electionBudget = 15 * time.Second, 10 * time.Second
	var (
		failures        []string
		retries, writes int
		slowest         time.Duration
		healed          time.Time // zero until the link is healed
		slowestHealed   time.Duration
		stop            = make(chan struct{})
		wg              sync.WaitGroup
	)
	record := func(what string, took time.Duration, a attempt, n int, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		writes++
		retries += n
		slowest = max(slowest, took)
		if !healed.IsZero() && time.Now().Add(-took).After(healed) {
			slowestHealed = max(slowestHealed, took)
		}
		if !ok || took > writeBudget {
			failures = append(failures, fmt.Sprintf("%s: HTTP %d after %s and %d retries: %s %v", what, a.code, took.Round(time.Millisecond), n, a.body, a.err))
		}
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad) // before the nodes are killed, if the test fails
	for w, k := range majority {
		s := nodes[k]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				a, n := write(client, 2*writeBudget, "POST", s.url+"/api/v1/enqueue", enqueue(queues[i%len(queues)], fmt.Sprintf("maj-%d-%d", k, i)))
				ok := a.code == 201
				if ok {
					ok = accept(a) == nil
				}
				record("enqueue via node "+strconv.Itoa(k+1), time.Since(start), a, n, ok)
				time.Sleep(20 * time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			wid := fmt.Sprintf("maj-w%d", w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				a, n := write(client, 2*writeBudget, "POST", s.url+"/api/v1/fetch",
					map[string]any{"queues": queues, "worker_id": wid, "timeout": 0.2, "count": 5})
				record("fetch via node "+strconv.Itoa(k+1), time.Since(start), a, n, a.code == 200 || a.code == 204)
				if a.code != 200 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				var r struct{ Jobs []fetched }
				if err := json.Unmarshal(a.body, &r); err != nil {
					record("fetch via node "+strconv.Itoa(k+1), 0, a, 0, false)
					continue
				}
				for _, j := range r.Jobs {
					start := time.Now()
					a, n := write(client, 2*writeBudget, "POST", s.url+"/api/v1/ack/"+j.JobID, map[string]any{"worker_id": wid, "attempt": j.Attempt})
					record("ack via node "+strconv.Itoa(k+1), time.Since(start), a, n, a.code == 200)
				}
			}
		}()
	}

	// The minority side. One enqueue and one ack sent right at the cut,
	// with a client that waits, must end in 503 with Retry-After (no
	// leader can commit them): a refusal, not a hang.
	slow := &http.Client{Timeout: 20 * time.Second}
	type refusal struct {
		what string
		a    attempt
		took time.Duration
	}
	refusals := make(chan refusal, 2)
	go func() {
		start := time.Now()
		a := send(slow, "POST", iso.url+"/api/v1/enqueue", enqueue(queues[0], "minority-slow"))
		refusals <- refusal{"enqueue", a, time.Since(start)}
	}()
	// The slow ack is on another shard than the slow enqueue, so neither
	// waits behind the other in its shard's proposer.
	slowAck := heldJobs[len(heldJobs)-1]
	probeAcks := heldJobs[:len(heldJobs)-1]
	go func() {
		start := time.Now()
		h := slowAck
		a := send(slow, "POST", iso.url+"/api/v1/ack/"+h.id, map[string]any{"worker_id": "held", "attempt": h.attempt})
		refusals <- refusal{"ack", a, time.Since(start)}
	}()

	// Wait until both majority nodes see a leader of their own for every
	// group, the meta group included (their local views: a full status
	// would wait a second on the unreachable node).
	isoID := nodeIDs[victim]
	var t1 time.Time
	for t1.IsZero() {
		moved := true
		var views []string
		for _, k := range majority {
			code, body := do(t, "GET", nodes[k].url+"/api/v1/cluster/status?local=true", nil)
			require.Equal(t, 200, code, string(body))
			views = append(views, string(body))
			for _, sh := range decode[localShards](t, body).Shards {
				moved = moved && sh.Leader != 0 && sh.Leader != isoID
			}
		}
		if moved {
			t1 = time.Now()
			break
		}
		require.Less(t, time.Since(t0), electionBudget, "the majority did not elect new leaders within %s: %s", electionBudget, views)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("majority has new leaders for every group %s after the cut", t1.Sub(t0).Round(time.Millisecond))

	// Until 5 s after that (and until the slow requests have their
	// answers), writes through the isolated node never succeed. Short
	// client timeouts: a proposal there waits for a leader until its
	// deadline.
	fast := &http.Client{Timeout: 2 * time.Second}
	var probes, probeTimeouts, probe503 int
	for round := 0; time.Since(t1) < 5*time.Second || len(refusals) < 2; round++ {
		require.Less(t, time.Since(t0), 30*time.Second, "the slow minority requests never got an answer")
		// One enqueue per shard and one ack, in parallel.
		answers := make([]attempt, len(queues)+1)
		var pwg sync.WaitGroup
		for k := range answers {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				if k < len(queues) {
					answers[k] = send(fast, "POST", iso.url+"/api/v1/enqueue", enqueue(queues[k], fmt.Sprintf("minority-%d", round)))
					return
				}
				h := probeAcks[round%len(probeAcks)]
				answers[k] = send(fast, "POST", iso.url+"/api/v1/ack/"+h.id, map[string]any{"worker_id": "held", "attempt": h.attempt})
			}()
		}
		pwg.Wait()
		for _, a := range answers {
			probes++
			switch {
			case a.code >= 200 && a.code < 300:
				t.Fatalf("the isolated node accepted a write %s after the cut: HTTP %d %s", time.Since(t0).Round(time.Millisecond), a.code, a.body)
			case a.code == 0:
				probeTimeouts++
			case a.code == 503:
				probe503++
			default:
				t.Fatalf("the isolated node answered a write with HTTP %d %s (want 503 or no answer)", a.code, a.body)
			}
		}
	}
	for i := 0; i < 2; i++ {
		r := <-refusals
		require.Equal(t, 503, r.a.code, "minority %s: %s %v", r.what, r.a.body, r.a.err)
		require.Equal(t, "1", r.a.retryAfter, "minority %s: 503 without Retry-After", r.what)
		t.Logf("minority %s refused with 503 after %s", r.what, r.took.Round(time.Millisecond))
	}
	t.Logf("%d writes probed on the isolated node: %d timed out, %d answered 503, none accepted", probes, probeTimeouts, probe503)

	// CheckQuorum: the cut-off node leads nothing any more.
	code, body := do(t, "GET", iso.url+"/api/v1/cluster/status?local=true", nil)
	require.Equal(t, 200, code, string(body))
	local := decode[localShards](t, body)
	require.Empty(t, local.LeaderOf, "the isolated node still leads shards: %s", body)
	before, ok := partitionStatusOf(t, nodes[majority[0]])
	require.True(t, ok)
	terms := map[uint64][3]uint64{} // shard: majority's term, isolated node's term, majority's term after healing
	for _, sh := range before.Shards {
		terms[sh.ShardID] = [3]uint64{sh.Term}
	}
	// PreVote: cut off, the node cannot win a pre-vote, so it never raised
	// its term past the majority's; healing then deposes no leader. (Its
	// view was read first: the majority's terms only grow.)
	for _, sh := range local.Shards {
		// The local view goes by Raft group IDs (the shard's number + 1).
		if tt, ok := terms[sh.ShardID-1]; ok {
			tt[1] = sh.Term
			terms[sh.ShardID-1] = tt
			require.LessOrEqual(t, tt[1], tt[0], "shard %d: the isolated node raised its term to %d past the majority's %d", sh.ShardID-1, tt[1], tt[0])
		}
	}

	// Heal while the majority keeps writing, until the healed node knows
	// every group's leader again.
	lab.heal(victim)
	mu.Lock()
	healed = time.Now()
	mu.Unlock()
	for {
		code, body := do(t, "GET", iso.url+"/api/v1/cluster/status?local=true", nil)
		require.Equal(t, 200, code, string(body))
		known := true
		for _, sh := range decode[localShards](t, body).Shards {
			known = known && sh.Leader != 0
		}
		if known {
			break
		}
		require.Less(t, time.Since(healed), 30*time.Second, "the healed node found no leaders: %s", body)
		time.Sleep(50 * time.Millisecond)
	}
	stopLoad()
	mu.Lock()
	require.Empty(t, failures, "majority-side writes that failed or took over %s", writeBudget)
	t.Logf("majority side: %d writes, %d retried after 503, slowest %s, slowest after healing %s; %d jobs accepted in all",
		writes, retries, slowest.Round(time.Millisecond), slowestHealed.Round(time.Millisecond), len(accepted))
	mu.Unlock()

	// The isolated node catches up: every node up, every replica at the
	// same applied index.
	waitSettled(t, iso, 3)
	t.Logf("cluster converged %s after healing", time.Since(healed).Round(time.Millisecond))
	after, ok := partitionStatusOf(t, iso)
	require.True(t, ok)
	for _, sh := range after.Shards {
		tt := terms[sh.ShardID]
		tt[2] = sh.Term
		t.Logf("shard %d: term %d on the majority during the cut, %d on the isolated node, %d after healing", sh.ShardID, tt[0], tt[1], tt[2])
	}

	// Nothing accepted is lost: every job that got a 2xx is on every node.
	ids := make([]string, 0, len(accepted))
	for id := range accepted {
		ids = append(ids, id)
	}
	for _, s := range nodes {
		for _, id := range ids {
			code, body := do(t, "GET", s.url+"/api/v1/jobs/"+id, nil)
			require.Equal(t, 200, code, "job %s on %s: %s", id, s.url, body)
		}
	}
	t.Logf("%d accepted jobs present on every node", len(ids))

	// The healed node takes writes again.
	for _, q := range queues {
		a, _ := write(client, 30*time.Second, "POST", iso.url+"/api/v1/enqueue", enqueue(q, "healed"))
		require.Equal(t, 201, a.code, "enqueue through the healed node: %s", a.body)
		require.NoError(t, accept(a))
	}
	ids = ids[:0]
	for id := range accepted {
		ids = append(ids, id)
	}

	// And each can be completed, through every node, the healed one too.
	// The held jobs' acks: a minority ack that timed out at the client may
	// still have committed once the link healed (503 means "may or may
	// not have been applied"), so a 409 must come with the job completed.
	for k, h := range heldJobs {
		s := nodes[k%3]
		a, _ := write(client, 30*time.Second, "POST", s.url+"/api/v1/ack/"+h.id, map[string]any{"worker_id": "held", "attempt": h.attempt})
		if a.code != 200 {
			require.Equal(t, 409, a.code, "ack of held job %s: %s", h.id, a.body)
			require.Equal(t, "completed", s.job(t, h.id).State, "held job %s: ack refused with %s", h.id, a.body)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for k := 0; ; k++ {
		s := nodes[k%3]
		a, _ := write(client, 30*time.Second, "POST", s.url+"/api/v1/fetch",
			map[string]any{"queues": queues, "worker_id": "drain", "timeout": 0.5, "count": 100})
		require.Contains(t, []int{200, 204}, a.code, "%s", a.body)
		if a.code == 204 {
			open := 0
			for _, id := range ids {
				if iso.job(t, id).State != "completed" {
					open++
				}
			}
			if open == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%d accepted jobs not completed", open)
			continue
		}
		for _, j := range decode[struct{ Jobs []fetched }](t, a.body).Jobs {
			a, _ := write(client, 30*time.Second, "POST", s.url+"/api/v1/ack/"+j.JobID, map[string]any{"worker_id": "drain", "attempt": j.Attempt})
			require.Equal(t, 200, a.code, "ack %s via %s: %s", j.JobID, s.url, a.body)
		}
	}
	waitSettled(t, iso, 3)
	checkStates(t, nodes, ids, "completed")
	t.Logf("%d accepted jobs completed on every node", len(ids))
}

// waitSettled waits until s sees n nodes up and every shard with a leader
// and n replicas all at the same applied index (no load is running).
func waitSettled(t *testing.T, s *server, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, ok := clusterStatusOf(t, s)
		good := ok && len(v.Nodes) == n
		for _, node := range v.Nodes {
			good = good && node.Status == "up"
		}
		for _, sh := range v.Shards {
			good = good && sh.Leader != 0 && len(sh.Replicas) == n
			for _, r := range sh.Replicas {
				good = good && r.Applied != nil && *r.Applied == *sh.Replicas[0].Applied
			}
		}
		if good {
			return
		}
		require.True(t, time.Now().Before(deadline), "the cluster did not settle: %+v", v)
		time.Sleep(100 * time.Millisecond)
	}
}

func partitionStatusOf(t *testing.T, s *server) (partitionStatus, bool) {
	code, body := do(t, "GET", s.url+"/api/v1/cluster/status", nil)
	if code != 200 {
		return partitionStatus{}, false
	}
	return decode[partitionStatus](t, body), true
}
