package peer

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/shard"
)

// TestDialFailed: only a call that never connected counts as not sent.
func TestDialFailed(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	c := New(Config{})
	_, _, err = c.Call("GET", addr, "/healthz", nil, time.Second)
	require.Error(t, err)
	require.True(t, DialFailed(err), "%v", err)
	require.True(t, DialFailed(fasthttp.ErrDialTimeout))
	require.False(t, DialFailed(fasthttp.ErrTimeout))
	require.False(t, DialFailed(errors.New("connection reset")))
}

// TestTargetsWithoutMembership: before Start a client knows no other
// node; Config.Targets replaces the placement, as given.
func TestTargetsWithoutMembership(t *testing.T) {
	t.Parallel()
	require.Empty(t, New(Config{}).Targets(0))
	c := New(Config{Targets: func(sh int) []string { return []string{"b", "a"} }})
	require.Equal(t, []string{"b", "a"}, c.Targets(3))
	require.Equal(t, []string{"b", "a"}, c.Targets(3), "not rotated")
	require.True(t, New(Config{}).Alive(7) == false)
}

// TestReplicaFromProbe: the probe notes what each node's replicas hear
// and have applied (/healthz "leaders", "applied"); a node that did not
// say (an older version) or never answered is not known.
func TestReplicaFromProbe(t *testing.T) {
	t.Parallel()
	serve := func(body string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(body) }}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Shutdown() })
		return l.Addr().String()
	}
	newer := serve(`{"status":"ok","shards":3,"shards_led":1,"leaders":[2,0,1],"applied":[70,0,12]}`)
	older := serve(`{"status":"ok","shards":3,"shards_led":1}`)
	c := New(Config{})
	c.probe([]shard.Node{{ID: 2, HTTPAddr: newer}, {ID: 3, HTTPAddr: older}})

	require.True(t, c.Alive(2))
	n, ok := c.Leads(2)
	require.True(t, ok)
	require.Equal(t, 1, n)
	type view struct {
		leader, applied uint64
		known           bool
	}
	replica := func(node uint64, i int) view {
		l, a, k := c.Replica(node, i)
		return view{l, a, k}
	}
	require.Equal(t, view{2, 70, true}, replica(2, 0))
	require.Equal(t, view{0, 0, true}, replica(2, 1), "hears no leader")
	require.Equal(t, view{1, 12, true}, replica(2, 2))
	require.Equal(t, view{0, 0, true}, replica(2, 3), "no shard 3 there")
	require.True(t, c.Alive(3))
	require.Equal(t, view{}, replica(3, 0), "a node that does not say")
	require.Equal(t, view{}, replica(4, 0), "a node never probed")
}
