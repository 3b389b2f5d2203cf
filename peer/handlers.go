package peer

import (
	corvo "github.com/corvohq/corvo/sdk/go"

	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Local is this node's shard layer, as the internal endpoints use it.
type Local interface {
	Shards() int
	Hosts(shard int) bool
	Propose(ctx context.Context, shard int, ops ...statemachine.Op) ([]statemachine.Result, error)
	Read(shard int, query any) (any, error)
	Signals
}

// Handlers serve the internal shard endpoints (remote.go) for the nodes
// that do not host a shard this one hosts. The gateway registers them in
// its route table, behind Client.Only.
type Handlers struct {
	local   Local
	check   validator
	timeout time.Duration
	closed  <-chan struct{} // closed when the node shuts down: waits end
	// fail writes an error as the gateway's error table says: an *Error
	// as it is, an engine error mapped.
	fail func(*fasthttp.RequestCtx, error)
}

// NewHandlers serves local's shards to other nodes, refusing ops outside
// lim; fail writes each error answer (the gateway's writer); waits end
// when closed is.
func NewHandlers(c *Client, local Local, lim Limits, closed <-chan struct{}, fail func(*fasthttp.RequestCtx, error)) *Handlers {
	return &Handlers{local: local, check: validator{rt: router.New(local.Shards()), lim: lim},
		timeout: c.cfg.RequestTimeout, closed: closed, fail: fail}
}

func invalid(format string, args ...any) *Error {
	return &Error{Status: 400, Code: corvo.CodeInvalidRequest, Msg: fmt.Sprintf(format, args...)}
}

// shard reads {n}: a shard number of this cluster. It answers the request
// itself (false) otherwise.
func (h *Handlers) shard(ctx *fasthttp.RequestCtx) (int, bool) {
	v, _ := ctx.UserValue("n").(string)
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n >= h.local.Shards() || strconv.Itoa(n) != v {
		h.fail(ctx, invalid("no shard %q (this cluster has %d)", v, h.local.Shards()))
		return 0, false
	}
	return n, true
}

// refuseNotHosted answers 503 with the NotHostedHeader when this node
// does not host shard sh (after decoding, so bad bodies are 400 whatever
// the shard): the caller may try another node.
func (h *Handlers) refuseNotHosted(ctx *fasthttp.RequestCtx, sh int) bool {
	if h.local.Hosts(sh) {
		return false
	}
	h.fail(ctx, unavailable("shard "+strconv.Itoa(sh)+" is not hosted on this node"))
	ctx.Response.Header.Set(NotHostedHeader, "1")
	return true
}

// callerTimeout is how long the caller waits, bounded by the request
// timeout.
func (h *Handlers) callerTimeout(ctx *fasthttp.RequestCtx) time.Duration {
	d := h.timeout
	if ms, err := strconv.ParseInt(string(ctx.Request.Header.Peek(TimeoutHeader)), 10, 64); err == nil && ms > 0 && time.Duration(ms)*time.Millisecond < d {
		d = time.Duration(ms) * time.Millisecond
	}
	return d
}

// Propose serves POST /internal/v1/shards/{n}/propose: it validates the
// entry (the credential says who sent it, not that it is sound) and
// proposes it here.
func (h *Handlers) Propose(ctx *fasthttp.RequestCtx) {
	sh, ok := h.shard(ctx)
	if !ok {
		return
	}
	e, err := statemachine.DecodeEntry(ctx.PostBody())
	if err != nil {
		h.fail(ctx, &Error{Status: 400, Code: corvo.CodeBadRequest, Msg: "cannot decode the entry: " + err.Error()})
		return
	}
	if len(e.Ops) == 0 {
		h.fail(ctx, invalid("the entry holds no op"))
		return
	}
	if err := h.check.ops(sh, e.Ops); err != nil {
		h.fail(ctx, invalid("the entry is refused: %v", err))
		return
	}
	if h.refuseNotHosted(ctx, sh) {
		return
	}
	pctx, cancel := context.WithTimeout(context.Background(), h.callerTimeout(ctx))
	defer cancel()
	rs, err := h.local.Propose(pctx, sh, e.Ops...)
	if err != nil {
		h.fail(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(statemachine.AppendResults(nil, rs))
}

// Read serves POST /internal/v1/shards/{n}/read.
func (h *Handlers) Read(ctx *fasthttp.RequestCtx) {
	sh, ok := h.shard(ctx)
	if !ok {
		return
	}
	q, rr, err := decodeReadQuery(ctx.PostBody())
	if err != nil {
		h.fail(ctx, &Error{Status: 400, Code: corvo.CodeBadRequest, Msg: err.Error()})
		return
	}
	if h.refuseNotHosted(ctx, sh) {
		return
	}
	v, err := h.local.Read(sh, q)
	if err != nil {
		h.fail(ctx, err)
		return
	}
	out, err := encodeReadResult(v, rr)
	if err != nil {
		h.fail(ctx, &Error{Status: 500, Code: corvo.CodeInternal, Msg: err.Error()})
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(out)
}
