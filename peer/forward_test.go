package peer

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestForwardReusesConnections: forwarded requests cost one hop over a
// pooled keep-alive connection: many forwards in turn open one
// connection to the target, and each answer comes back whole.
func TestForwardReusesConnections(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &countingListener{Listener: raw}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(201)
		ctx.SetContentType("application/json")
		ctx.SetBody(append([]byte(`{"hop":"`), ctx.Request.Header.Peek(HopHeader)...))
		ctx.Response.AppendBodyString(`"}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	c := New(Config{})
	for range 20 {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/api/v1/enqueue")
		ctx.Request.SetBodyString(`{}`)
		require.NoError(t, c.Forward(&ctx, []string{raw.Addr().String()}, time.Now().Add(10*time.Second)))
		require.Equal(t, 201, ctx.Response.StatusCode())
		require.Equal(t, `{"hop":"1"}`, string(ctx.Response.Body()))
	}
	require.Equal(t, int64(1), ln.accepted.Load(), "one pooled connection for every forward")
}
