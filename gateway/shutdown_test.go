package gateway

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/statemachine"
)

// TestShutdownClosesUnusedConnections: a connection that never sent a
// request does not hold shutdown for its read timeout (minutes).
func TestShutdownClosesUnusedConnections(t *testing.T) {
	t.Parallel()
	srv := New(Config{Logger: zerolog.Nop()}, busyEngine{})
	addr := serveOnFreePort(t, srv)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	// The server has the connection once it answers a request on another.
	used, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = used.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	buf := make([]byte, 512)
	_, err = used.Read(buf)
	require.NoError(t, err)
	used.Close()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	require.Less(t, time.Since(start), 5*time.Second)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(buf)
	require.Error(t, err, "the unused connection was closed")
}

// TestShutdownEndsStalledEventStream: an /events client that stopped
// reading leaves the stream blocked in a write once the socket buffers are
// full; Shutdown still finishes (the stream's write gets a deadline)
// instead of waiting out its context.
func TestShutdownEndsStalledEventStream(t *testing.T) {
	t.Parallel()
	hub, err := events.New(events.Config{Shards: 1, Capacity: 1000})
	require.NoError(t, err)
	hub.Start([]uint64{0})
	srv := New(Config{Logger: zerolog.Nop(), Events: hub}, busyEngine{})
	c, err := net.Dial("tcp", serveOnFreePort(t, srv))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	head := make([]byte, 256)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(head)
	require.NoError(t, err)
	require.Contains(t, string(head[:n]), "200 OK")
	// 64 MiB of events, more than loopback's socket buffers hold: the
	// stream blocks in a write, and this client never reads again.
	big := strings.Repeat("x", 64<<10)
	for i := uint64(1); i <= 10; i++ {
		info := &statemachine.AppliedInfo{ShardID: 1, From: i, Index: i}
		for p := 0; p < 100; p++ {
			info.Events = append(info.Events, statemachine.JobEvent{Index: i, Pos: uint32(p), Type: statemachine.EventFailed, JobID: "job_0_x", Queue: "q", Error: big})
		}
		hub.Applied(info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx), "shutdown waited for the stalled stream")
}
