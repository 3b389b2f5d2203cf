package deploy

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Ports inside the image (deploy/Dockerfile EXPOSE).
const (
	containerHTTP = "8080"
	containerRaft = "9400"
)

// node runs a manifest's `corvo server` command line on this machine, as
// its container would: /data becomes a temp dir, and the container ports
// of this node and of its peers (by service name) become free loopback
// ports.
type node struct {
	name       string
	http, raft string // 127.0.0.1:port
	dir        string
	peers      map[string]*node // every node of the deployment, by service name
	cmd        *exec.Cmd
	out        *lockedBuffer
	exited     chan struct{}
	env        []string // added to this process's environment
	// scheme is "https://" for a node serving TLS (its client then
	// trusts the test's CA), else "" for http://.
	scheme string
	client *http.Client
}

// base is the node's URL.
func (n *node) base() string {
	if n.scheme != "" {
		return n.scheme + n.http
	}
	return "http://" + n.http
}

func (n *node) httpClient() *http.Client {
	if n.client != nil {
		return n.client
	}
	return http.DefaultClient
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// newNodes makes one node per service name, sharing one address map.
func newNodes(t *testing.T, names ...string) map[string]*node {
	t.Helper()
	peers := map[string]*node{}
	for _, n := range names {
		peers[n] = &node{name: n, http: freeAddr(t), raft: freeAddr(t), dir: t.TempDir(), peers: peers}
	}
	return peers
}

// rewrite maps one argument from the container's world to this machine's.
func (n *node) rewrite1(a string) string {
	if a == "/data" {
		return n.dir
	}
	if strings.HasSuffix(a, "=/data") {
		return strings.TrimSuffix(a, "/data") + n.dir
	}
	for _, own := range []struct{ port, addr string }{{containerHTTP, n.http}, {containerRaft, n.raft}} {
		if a == ":"+own.port || strings.HasSuffix(a, "=:"+own.port) {
			return strings.TrimSuffix(a, ":"+own.port) + own.addr
		}
		for _, host := range []string{"0.0.0.0", "127.0.0.1", "localhost"} {
			a = strings.ReplaceAll(a, host+":"+own.port, own.addr)
		}
	}
	for name, p := range n.peers {
		a = strings.ReplaceAll(a, name+":"+containerHTTP, p.http)
		a = strings.ReplaceAll(a, name+":"+containerRaft, p.raft)
	}
	return a
}

func (n *node) rewrite(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = n.rewrite1(a)
	}
	return out
}

// startNode runs a single node's command (see node) and waits for /healthz.
func startNode(t *testing.T, name string, args []string) *node {
	t.Helper()
	n := newNodes(t, name)[name]
	n.start(t, args)
	n.waitHealthy(t)
	return n
}

// start runs args (a `corvo server …` command line). Without --raft-bind
// the server would take 127.0.0.1:9400, which other processes on this
// machine may hold, so the node's own Raft port is added.
func (n *node) start(t *testing.T, args []string) {
	t.Helper()
	args = n.rewrite(args)
	if _, ok := argFlags(args)["raft-bind"]; !ok {
		args = append(args, "--raft-bind", n.raft)
	}
	if _, ok := argFlags(args)["log-level"]; !ok {
		args = append(args, "--log-level", "warn")
	}
	n.cmd = exec.Command(corvoBin, args...)
	n.cmd.Env = append(os.Environ(), n.env...)
	n.out = &lockedBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	require.NoError(t, n.cmd.Start(), "corvo %v", args)
	n.exited = make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() {
		select {
		case <-n.exited:
		default:
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
		if t.Failed() {
			t.Logf("%s (corvo %v):\n%s", n.name, args, n.out.String())
		}
	})
}

func (n *node) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-n.exited:
			t.Fatalf("%s exited during start-up:\n%s", n.name, n.out.String())
		default:
		}
		if resp, err := n.httpClient().Get(n.base() + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "%s never became healthy:\n%s", n.name, n.out.String())
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and requires a clean exit within grace.
func (n *node) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-n.exited:
		require.Equal(t, 0, n.cmd.ProcessState.ExitCode(), "%s exit code after SIGTERM:\n%s", n.name, n.out.String())
	case <-time.After(grace):
		t.Fatalf("%s did not stop within its grace period %v of SIGTERM", n.name, grace)
	}
}

// clusterNodes reads GET /api/v1/cluster/status: the member names.
func (n *node) clusterNodes(t *testing.T) []string {
	t.Helper()
	resp, err := n.httpClient().Get(n.base() + "/api/v1/cluster/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var st struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	var names []string
	for _, x := range st.Nodes {
		names = append(names, x.Name)
	}
	return names
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
