package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/internal/leakcheck"
	"github.com/corvohq/corvo/node"
)

// TestMain starts the node the API tests share: real shards, real HTTP,
// the mirror and the event ring, opened by the node package as `corvo
// server` opens them, with fast Raft timing.
func TestMain(m *testing.M) {
	if os.Getenv("CORVO_GATEWAY_NO_SERVER") != "" {
		os.Exit(checkLeaks(m.Run()))
	}
	dir, err := os.MkdirTemp("", "corvo-gateway-test-")
	if err != nil {
		panic(err)
	}
	raft, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	raftAddr := raft.Addr().String()
	raft.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	n, err := node.Open(ctx, node.Config{DataDir: dir, Bind: "127.0.0.1:0", RaftBind: raftAddr, Shards: 4, Logger: zerolog.Nop(),
		ClusterSecret: gateway.TestClusterSecret,
		// No rebalancing of provider shares behind the tests' backs: the
		// tests that want one run it themselves.
		// Reads get a long deadline (gateway.TestReadTimeout): the tests
		// check answers, not the deadline (readpool_test does), and a
		// loaded machine must not turn a search into a 429 or a stale page.
		Gateway: gateway.Config{EventsKeepalive: gateway.TestEventsKeepalive, ProviderRebalance: -1, ReadTimeout: gateway.TestReadTimeout},
		Test: node.TestConfig{RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 20 * time.Millisecond,
			MirrorFlushWindow: 10 * time.Millisecond, EventsCapacity: gateway.TestEventsCapacity, OnApplied: gateway.AppliedHook}})
	cancel()
	if err != nil {
		panic(err)
	}
	go func() { _ = n.Serve() }()
	gateway.SetTestServer(fmt.Sprintf("http://%s", n.Addr()), n.Host(), n.Mirror())
	code := m.Run()
	// The tests' keep-alive connections (http.DefaultTransport's) end
	// here, not whenever their goroutines notice the server has gone: the
	// leak check below would otherwise race them.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	n.Close()
	os.RemoveAll(dir)
	os.Exit(checkLeaks(code))
}

// checkLeaks fails a passing run when a goroutine outlives the tests and
// the shared node (closed first: its shards, mirror and server run
// goroutines until then).
func checkLeaks(code int) int {
	if code != 0 {
		return code
	}
	if err := leakcheck.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
