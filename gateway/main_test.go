package gateway

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/shard"
)

// baseURL is one in-process server (real shards, real HTTP) shared by the
// API tests; each test uses its own queue names.
var baseURL string

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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	host, err := shard.Open(ctx, shard.Config{DataDir: dir, RaftAddress: raftAddr, Shards: 4, Logger: zerolog.Nop(),
		RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 20 * time.Millisecond})
	cancel()
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := New(Config{Logger: zerolog.Nop()}, host)
	go func() { _ = srv.Serve(ln) }()
	baseURL = fmt.Sprintf("http://%s", ln.Addr())
	code := m.Run()
	_ = srv.Shutdown(context.Background())
	host.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}
