package gateway

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// baseURL is one in-process server (real shards, real HTTP, the mirror and
// the event ring) shared by the API tests; each test uses its own queue
// names.
var baseURL string

// testEngine is the engine behind baseURL (for tests that put a second
// gateway in front of the same shards).
var testEngine Engine

// testMirror is the mirror behind baseURL.
var testMirror *mirror.Mirror

// testEventsCapacity is the event ring's size in tests: small enough that
// a test can push old events out.
const testEventsCapacity = 200000

// testClusterSecret is the cluster credential of every server the tests
// start (frontServer gives it to those that set none).
const testClusterSecret = "test-cluster-secret-0123456789abcdef"

func TestMain(m *testing.M) {
	if os.Getenv("CORVO_GATEWAY_NO_SERVER") != "" {
		os.Exit(m.Run())
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
	mir, err := mirror.Open(mirror.Config{Path: filepath.Join(dir, "mirror.db"), Logger: zerolog.Nop(), FlushWindow: 10 * time.Millisecond}, 4)
	if err != nil {
		panic(err)
	}
	hub := events.New(4, testEventsCapacity)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	host, err := shard.Open(ctx, shard.Config{DataDir: dir, RaftAddress: raftAddr, Shards: 4, Logger: zerolog.Nop(),
		RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 20 * time.Millisecond,
		JobChanges: true, JobEvents: true, OnApplied: func(info *statemachine.AppliedInfo) { hub.Applied(info); mir.Applied(info); testApplied(info) }})
	cancel()
	if err != nil {
		panic(err)
	}
	if err := mir.Start(host); err != nil {
		panic(err)
	}
	if err := hub.StartFrom(host); err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	testEngine, testMirror = host, mir
	srv := New(Config{Logger: zerolog.Nop(), Mirror: mir, Events: hub, EventsKeepalive: 300 * time.Millisecond, ClusterSecret: testClusterSecret}, host)
	go func() { _ = srv.Serve(ln) }()
	baseURL = fmt.Sprintf("http://%s", ln.Addr())
	code := m.Run()
	_ = srv.Shutdown(context.Background())
	host.Close()
	mir.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}
