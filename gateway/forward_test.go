package gateway

import (
	"cmp"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
)

// notHosting is the real engine, except that this node claims not to host
// one shard.
type notHosting struct {
	Engine
	missing int
}

func (n notHosting) Hosts(sh int) bool { return sh != n.missing }

// frontServer starts a gateway over eng on a fresh port, shut down when
// the test ends.
func frontServer(t *testing.T, cfg Config, eng Engine) (*Server, string) {
	t.Helper()
	cfg.Logger = zerolog.Nop()
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, testReadTimeout)
	// No rebalance loop unless a test asks for one: most of these front
	// the shared testEngine, and a loop of theirs would rebalance other
	// tests' providers under them (TestAPIProviderRebalance's shares).
	cfg.ProviderRebalance = cmp.Or(cfg.ProviderRebalance, -1)
	if cfg.Peer == nil {
		cfg.Peer = peer.New(peer.Config{Secret: testClusterSecret, RequestTimeout: cfg.RequestTimeout, Logger: zerolog.Nop()})
	}
	srv := New(cfg, eng)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv, serveOnFreePort(t, srv)
}

// peerTo is a peer client with the tests' cluster secret that takes the
// nodes hosting a shard from targets.
func peerTo(targets func(int) []string) *peer.Client {
	return peer.New(peer.Config{Secret: testClusterSecret, Targets: targets, Logger: zerolog.Nop()})
}

// serveOnFreePort serves srv on a fresh loopback port and returns it.
func serveOnFreePort(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String()
}

// TestForwardToHostingNode: a node that does not host a shard forwards
// requests for its queues and jobs, whole, to one that does: enqueue, get,
// ack and queue actions work through it; an unreachable target is
// skipped.
func TestForwardToHostingNode(t *testing.T) {
	t.Parallel()
	q := uq("fwd")
	rt := router.New(4)
	sh := rt.ShardForQueue(q)
	dead := freeLocalAddr(t) // nothing listens there
	real := strings.TrimPrefix(baseURL, "http://")
	_, front := frontServer(t, Config{Peer: peerTo(func(int) []string { return []string{dead, real} })}, notHosting{Engine: testEngine, missing: sh})
	url := "http://" + front

	code, body := callAt(t, "POST", url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]int{"n": 1}})
	require.Equal(t, 201, code, string(body))
	id := mustJSON[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
	code, body = call(t, "GET", "/api/v1/jobs/"+id, nil) // on the real node
	require.Equal(t, 200, code, string(body))
	code, body = callAt(t, "GET", url+"/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"queue":"`+q+`"`)

	code, body = callAt(t, "POST", url+"/api/v1/queues/"+q+"/pause", nil)
	require.Equal(t, 200, code, string(body))
	code, body = callAt(t, "POST", url+"/api/v1/queues/"+q+"/resume", nil)
	require.Equal(t, 200, code, string(body))
	j, ok := fetchOne(t, 2, q)
	require.True(t, ok)
	code, body = callAt(t, "POST", url+"/api/v1/ack/"+j.JobID, map[string]any{})
	require.Equal(t, 200, code, string(body))
	require.Equal(t, "completed", getJob(t, id).State)
	// Errors come back as the hosting node gave them.
	code, body = callAt(t, "POST", url+"/api/v1/ack/"+j.JobID, map[string]any{})
	require.Equal(t, 409, code, string(body))
	require.Contains(t, string(body), `"code":"conflict"`)
}

// TestForwardNeverLoops: a forwarded request reaching a node that does
// not host its shard either is answered 503 there, not forwarded again —
// here the node's only target is itself.
func TestForwardNeverLoops(t *testing.T) {
	t.Parallel()
	q := uq("fwdloop")
	sh := router.New(4).ShardForQueue(q)
	var self atomic.Pointer[string] // ShardTargets runs in the background too (the throughput sampler)
	_, front := frontServer(t, Config{Peer: peerTo(func(int) []string {
		if p := self.Load(); p != nil {
			return []string{*p}
		}
		return nil
	})}, notHosting{Engine: testEngine, missing: sh})
	self.Store(&front)
	code, body := callAt(t, "POST", "http://"+front+"/api/v1/enqueue", map[string]any{"queue": q})
	require.Equal(t, 503, code, string(body))
	require.Contains(t, string(body), "not hosted on this node")
	code, body = call(t, "POST", "/api/v1/jobs/search", map[string]any{"queue": q})
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"total":0`)
}

// TestForwardNoTargetAndDeadline: with no node to forward to, or one that
// takes the request and never answers, the caller gets a 503 with
// Retry-After within the request timeout.
func TestForwardNoTargetAndDeadline(t *testing.T) {
	t.Parallel()
	q := uq("fwdnone")
	sh := router.New(4).ShardForQueue(q)
	_, none := frontServer(t, Config{Peer: peerTo(func(int) []string { return nil })}, notHosting{Engine: testEngine, missing: sh})
	code, body := callAt(t, "POST", "http://"+none+"/api/v1/enqueue", map[string]any{"queue": q})
	require.Equal(t, 503, code, string(body))

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	_, front := frontServer(t, Config{RequestTimeout: 300 * time.Millisecond, Peer: peerTo(func(int) []string { return []string{silent.Addr().String()} })},
		notHosting{Engine: testEngine, missing: sh})
	resp, err := httpc.Post("http://"+front+"/api/v1/enqueue", "application/json", strings.NewReader(`{"queue":"`+q+`"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
