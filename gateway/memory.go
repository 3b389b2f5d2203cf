package gateway

import (
	"bytes"
	"net"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/peer"
)

// ReadBodyExemptBytes: a read (a GET, a search, a node-to-node read) with a
// body no larger than this is admitted even when the memory budget is
// spent (its body still counts), so reads keep working under a write
// burst.
const ReadBodyExemptBytes = 64 << 10

// OverBudgetBodyBytes: while the process's measured memory is over the
// budget, writes with larger bodies are refused; smaller ones (a fetch, an
// ack, a heartbeat: what drains the queues) still go through.
const OverBudgetBodyBytes = 4 << 10

// bodyLedger accounts request bodies against the memory budget before
// fasthttp reads them: HeaderReceived reserves a request's Content-Length
// (its body limit when chunked) or marks it refused, the handler (or the
// error handler, when the body could not be read) releases it. A refused
// request's body is never read into memory: its limit becomes 1 byte,
// fasthttp stops at the headers and closes the connection after the
// answer, gracefully (lingerOnClose), so the client still reads it.
//
// Reservations are keyed by the request's header, which fasthttp keeps in
// the connection's RequestCtx for the life of the connection. Every read
// of a body ends in the handler or the error handler, except when a client
// that asked for "100 Continue" is gone before it is sent: ExpectHandler
// ties such a request to its connection, and the connection's close
// releases it. A reservation still left over (fasthttp could not set a
// read deadline) goes when the connection's context serves its next
// request.
type bodyLedger struct {
	acct    *membudget.Account
	maxBody int // the server's body limit (for chunked bodies)

	mu    sync.Mutex
	held  map[*fasthttp.RequestHeader]reservation
	conns map[net.Conn]*fasthttp.RequestHeader // requests that asked for 100 Continue
}

type reservation struct {
	n       int64
	refused *apiError // non-nil: answer this, never read the body
	conn    net.Conn  // set by ExpectHandler
}

func newBodyLedger(acct *membudget.Account, maxBody int) *bodyLedger {
	return &bodyLedger{acct: acct, maxBody: maxBody, held: map[*fasthttp.RequestHeader]reservation{},
		conns: map[net.Conn]*fasthttp.RequestHeader{}}
}

// readPaths are the POST routes that only read.
var readPaths = [][]byte{[]byte("/api/v1/jobs/search"), []byte(peer.WaitPath)}

func isRead(h *fasthttp.RequestHeader) bool {
	if h.IsGet() || h.IsHead() || h.IsOptions() {
		return true
	}
	path := h.RequestURI()
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	for _, p := range readPaths {
		if bytes.Equal(path, p) {
			return true
		}
	}
	return bytes.HasPrefix(path, []byte("/internal/v1/shards/")) && bytes.HasSuffix(path, []byte("/read"))
}

// admit decides on a request whose headers just arrived: it returns the
// body limit to read it with (0: the server's), or 1 when the request is
// refused.
func (l *bodyLedger) admit(h *fasthttp.RequestHeader, limit int) int {
	l.mu.Lock()
	old, stale := l.held[h]
	delete(l.held, h)
	if old.conn != nil {
		delete(l.conns, old.conn)
	}
	l.mu.Unlock()
	if stale {
		l.acct.Release(old.n)
	}
	n := int64(h.ContentLength())
	chunked := n == -1
	switch {
	case chunked:
		// Unknown length: reserve the most it may be.
		n = int64(limit)
		if n == 0 {
			n = int64(l.maxBody)
		}
	case n <= 0:
		return 0 // no body (or none fasthttp will read)
	}
	var refused *apiError
	switch {
	case isRead(h) && n <= ReadBodyExemptBytes:
		l.acct.Acquire(n)
	case n > OverBudgetBodyBytes && l.acct.Over():
		l.acct.Refused()
		refused, n = overBudget(), 0
	case !l.acct.Fits(n) && !chunked:
		l.acct.Refused()
		refused = codePayloadTooLarge.errf("a request body of %d bytes is more than the memory budget (--max-memory) lets requests hold at once (%d bytes)",
			n, l.acct.Max())
		n = 0
	case chunked && !l.acct.Fits(n):
		// A chunked body may be as long as the account allows.
		n = l.acct.Max()
		limit = int(n)
		if !l.acct.TryAcquire(n) {
			refused, n = overBudget(), 0
		}
	case !l.acct.TryAcquire(n):
		refused, n = overBudget(), 0
	}
	l.mu.Lock()
	l.held[h] = reservation{n: n, refused: refused}
	l.mu.Unlock()
	if refused != nil {
		return 1
	}
	return limit
}

func overBudget() *apiError {
	return codeOverloaded.err("the server's memory budget (--max-memory) is spent; retry after the Retry-After delay")
}

// take removes and returns the request's reservation.
func (l *bodyLedger) take(h *fasthttp.RequestHeader) (reservation, bool) {
	l.mu.Lock()
	r, ok := l.held[h]
	if ok {
		delete(l.held, h)
		if r.conn != nil {
			delete(l.conns, r.conn)
		}
	}
	l.mu.Unlock()
	return r, ok
}

// refusal is the answer to a request admit refused (nil: admitted). The
// reservation stays until done.
func (l *bodyLedger) refusal(h *fasthttp.RequestHeader) *apiError {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[h].refused
}

// done releases the request's reservation.
func (l *bodyLedger) done(h *fasthttp.RequestHeader) {
	if r, ok := l.take(h); ok {
		l.acct.Release(r.n)
	}
}

// handler wraps the server's root handler: a refused request is answered
// without running the route; an admitted one's reservation is released when
// the route returns.
func (l *bodyLedger) handler(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h := &ctx.Request.Header
		defer l.done(h)
		if e := l.refusal(h); e != nil {
			ctx.SetConnectionClose()
			lingerOnClose(ctx)
			writeError(ctx, e)
			return
		}
		next(ctx)
	}
}

// expect answers a request that asked for "100 Continue": a refused one
// gets its refusal instead (the client then never sends the body); an
// admitted one is tied to its connection until its body has been read.
func (l *bodyLedger) expect(ctx *fasthttp.RequestCtx) int {
	h := &ctx.Request.Header
	if e := l.refusal(h); e != nil {
		l.done(h)
		lingerOnClose(ctx)
		writeError(ctx, e)
		return e.status
	}
	l.mu.Lock()
	if r, ok := l.held[h]; ok {
		r.conn = ctx.Conn()
		l.held[h] = r
		l.conns[r.conn] = h
	}
	l.mu.Unlock()
	return fasthttp.StatusContinue
}

// connState releases what a closed connection's request still held.
func (l *bodyLedger) connState(c net.Conn, st fasthttp.ConnState) {
	if st != fasthttp.StateClosed && st != fasthttp.StateHijacked {
		return
	}
	l.mu.Lock()
	h, ok := l.conns[c]
	l.mu.Unlock()
	if ok {
		l.done(h)
	}
}

// used is what the ledger holds (tests).
func (l *bodyLedger) used() int64 { return l.acct.Used() }

// admitBody runs the body ledger after next (the restore route's own
// limit) on every request's headers.
func (s *Server) admitBody(next func(*fasthttp.RequestHeader) fasthttp.RequestConfig) func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		rc := next(h)
		if limit := s.bodies.admit(h, rc.MaxRequestBodySize); limit != 0 {
			rc.MaxRequestBodySize = limit
		}
		return rc
	}
}
