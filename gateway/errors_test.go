package gateway

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// busyEngine answers every proposal with one error.
type busyEngine struct{ err error }

func (busyEngine) Shards() int { return 4 }
func (b busyEngine) Propose(context.Context, int, ...statemachine.Op) ([]statemachine.Result, error) {
	return nil, b.err
}
func (busyEngine) Read(int, interface{}) (interface{}, error)                      { return nil, nil }
func (busyEngine) Fetchable(string) bool                                           { return true }
func (busyEngine) Reserve(_ []string, n int) shard.Reservation                     { return shard.Reservation{N: n} }
func (busyEngine) Release(shard.Reservation, bool)                                 {}
func (busyEngine) ThrottledUntil(string) int64                                     { return 0 }
func (busyEngine) Watch(string) <-chan struct{}                                    { return make(chan struct{}) }
func (busyEngine) Head(q string) statemachine.QueueHead                            { return statemachine.QueueHead{Queue: q} }
func (busyEngine) IsLeader(int) bool                                               { return true }
func (busyEngine) Replica(int) (uint64, uint64)                                    { return 1, 0 }
func (busyEngine) Hosts(int) bool                                                  { return true }
func (busyEngine) Park(int, *statemachine.FetchOp, *shard.ParkGroup) *shard.Parked { return nil }
func (busyEngine) Unpark(int, *shard.Parked) bool                                  { return true }

func TestOverloadAndUnavailableCarryRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{shard.ErrBusy, 429, "overloaded"},
		{shard.ErrUnavailable, 503, "unavailable"},
		{shard.ErrClosed, 503, "shutting_down"},
	} {
		srv := New(Config{Logger: zerolog.Nop()}, busyEngine{c.err})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(ln) }()
		for _, body := range []string{`{"queue":"q"}`, `{"jobs":[{"queue":"q"}]}`} {
			path := "/api/v1/enqueue"
			if body[2] == 'j' {
				path += "/batch"
			}
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			req.SetRequestURI("http://" + ln.Addr().String() + path)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetBodyString(body)
			require.NoError(t, fasthttp.Do(req, resp))
			require.Equal(t, c.status, resp.StatusCode(), path)
			require.Equal(t, "1", string(resp.Header.Peek("Retry-After")), path)
			require.Contains(t, string(resp.Body()), `"code":"`+c.code+`"`)
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
		}
		require.NoError(t, srv.Shutdown(context.Background()))
	}
}

func TestThroughputRate(t *testing.T) {
	t.Parallel()
	var tp throughput
	_, ok := tp.rate("q", 0, [3]int64{10, 5, 1})
	require.False(t, ok, "no sample yet")
	tp.samples = []totalsSample{{at: time.Now().Add(-10 * time.Second), totals: map[string][3]int64{"q": {0, 0, 0}},
		sampled: []bool{true, false}}}
	r, ok := tp.rate("q", 0, [3]int64{100, 50, 10})
	require.True(t, ok)
	require.InDelta(t, 10, r[0], 0.2)
	require.InDelta(t, 5, r[1], 0.1)
	require.InDelta(t, 1, r[2], 0.1)
	r, ok = tp.rate("new-queue", 0, [3]int64{20, 0, 0})
	require.True(t, ok)
	require.InDelta(t, 2, r[0], 0.1, "a queue born since the sample counts from zero")

	// A queue of a shard hosted elsewhere is not timed from zero (its
	// whole history would look like the last minute's) but from the
	// totals read for it before.
	_, ok = tp.rate("remote", 1, [3]int64{1_000_000, 0, 0})
	require.False(t, ok, "first read: no rate")
	tp.seen["remote"][0].at = time.Now().Add(-20 * time.Second)
	r, ok = tp.rate("remote", 1, [3]int64{1_000_200, 0, 0})
	require.True(t, ok)
	require.InDelta(t, 10, r[0], 0.2)
	require.Len(t, tp.seen["remote"], 2, "a second point, more than sampleEvery later")
}

// A 429 or 503 says when to retry: 1 s unless the handler set its own
// delay (a busy bulk runner asks for 5 s).
func TestWriteErrorRetryAfter(t *testing.T) {
	t.Parallel()
	var ctx fasthttp.RequestCtx
	writeError(&ctx, &apiError{status: 503, code: "unavailable", msg: "x"})
	require.Equal(t, "1", string(ctx.Response.Header.Peek("Retry-After")))

	ctx = fasthttp.RequestCtx{}
	ctx.Response.Header.Set("Retry-After", "5")
	writeError(&ctx, &apiError{status: 429, code: "bulk_busy", msg: "x"})
	require.Equal(t, "5", string(ctx.Response.Header.Peek("Retry-After")))
	require.Equal(t, 429, ctx.Response.StatusCode())

	ctx = fasthttp.RequestCtx{}
	writeError(&ctx, &apiError{status: 400, code: "invalid", msg: "x"})
	require.Empty(t, ctx.Response.Header.Peek("Retry-After"))
}
