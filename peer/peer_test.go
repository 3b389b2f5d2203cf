package peer

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
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
