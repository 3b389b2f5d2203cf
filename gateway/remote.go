package gateway

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/statemachine"
)

// Reaching shards this node does not host. A handler that touches many
// shards (batch enqueue, ack batch, heartbeat, lists, bulk) proposes and
// reads through s.proposeCtx and s.read: the engine when this node hosts
// the shard, else the internal endpoints below on a node that does.
//
//	POST /internal/v1/shards/{n}/propose  body: statemachine.Entry{Ops}.Encode
//	                                      200: statemachine.AppendResults
//	POST /internal/v1/shards/{n}/read     body: gob (query kind, query)
//	                                      200: one byte (0 nil, 1 value, 2
//	                                      typed nil) then the gob result
//
// Errors are the JSON {"error","code"} a local handler would write for the
// same engine error (engineError), and the caller hands that same error on.
// A node that does not host shard n answers 503 unavailable with the
// notHostedHeader and does nothing: it never forwards, so the caller may
// try the next node.

const (
	// notHostedHeader marks a 503 from a node that does not host the shard
	// asked for: nothing was done there, another node may be tried.
	notHostedHeader = "X-Corvo-Not-Hosted"
	// timeoutHeader is how long (ms) the caller will wait for the answer;
	// the receiver's proposal gives up by then.
	timeoutHeader = "X-Corvo-Timeout-Ms"
)

func shardPath(sh int, what string) string {
	return "/internal/v1/shards/" + itoa(sh) + "/" + what
}

// ---- the calling side ----

// read answers a statemachine query on shard sh: the engine when this node
// hosts sh, else the internal read endpoint of a node that does. A remote
// failure is an *apiError (engineError hands it on unchanged).
func (s *Server) read(sh int, q any) (any, error) {
	if s.hosted(sh) {
		return s.eng.Read(sh, q)
	}
	return s.readRemote(sh, q)
}

// readEach reads every shard with the query q(sh) — the ones hosted here
// from the engine, the others from nodes hosting them, all at once — and
// returns the answers in shard order, or the lowest shard's error.
func (s *Server) readEach(q func(sh int) any) ([]any, error) {
	n := s.eng.Shards()
	out, errs := make([]any, n), make([]error, n)
	var wg sync.WaitGroup
	for sh := 0; sh < n; sh++ {
		if !s.hosted(sh) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[sh], errs[sh] = s.readRemote(sh, q(sh))
			}()
		}
	}
	for sh := 0; sh < n; sh++ {
		if s.hosted(sh) {
			out[sh], errs[sh] = s.eng.Read(sh, q(sh))
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// proposeRemote proposes ops on a node hosting shard sh (s.proposeCtx
// when this node does not host it), within the request timeout and the
// parent's deadline. Its results, or its error as that node's handler
// would have answered it, come back as if proposed here.
func (s *Server) proposeRemote(parent context.Context, sh int, ops []statemachine.Op) ([]statemachine.Result, *apiError) {
	if err := parent.Err(); err != nil {
		return nil, engineError(err)
	}
	deadline := time.Now().Add(s.cfg.RequestTimeout)
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	body := (&statemachine.Entry{Ops: ops}).Encode(nil)
	out, aerr := s.callShard(sh, "propose", body, deadline, false)
	if aerr != nil {
		return nil, aerr
	}
	rs, err := statemachine.DecodeResults(out)
	if err == nil && len(rs) != len(ops) {
		err = fmt.Errorf("%d results for %d ops", len(rs), len(ops))
	}
	if err != nil {
		return nil, codeInternal.err("shard " + itoa(sh) + ": unreadable results from the node hosting it: " + err.Error())
	}
	return rs, nil
}

func (s *Server) readRemote(sh int, q any) (any, error) {
	rr, body, err := encodeReadQuery(q)
	if err != nil {
		return nil, err
	}
	out, aerr := s.callShard(sh, "read", body, time.Now().Add(s.cfg.RequestTimeout), true)
	if aerr != nil {
		return nil, aerr
	}
	v, err := decodeReadResult(out, rr)
	if err != nil {
		return nil, fmt.Errorf("shard %d: unreadable answer from the node hosting it: %w", sh, err)
	}
	return v, nil
}

// callShard posts body to shard sh's internal endpoint on the first node
// hosting it that takes the request, before deadline, and returns the 200
// answer's body. A node that cannot be dialled, or says it does not host
// the shard, is skipped. One that was reached and then failed is retried
// elsewhere only when idempotent (reads): a proposal may have been
// applied there.
func (s *Server) callShard(sh int, what string, body []byte, deadline time.Time, idempotent bool) ([]byte, *apiError) {
	targets := s.forwardTargets(sh)
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/octet-stream")
	req.Header.Set(hopHeader, "1")
	s.signPeer(req)
	req.SetBodyRaw(body)
	path := shardPath(sh, what)
	last := errNoTarget
	for _, addr := range targets {
		wait := time.Until(deadline)
		if wait <= 0 {
			last = context.DeadlineExceeded
			break
		}
		req.SetRequestURI("http://" + addr + path)
		req.Header.Set(timeoutHeader, strconv.FormatInt(wait.Milliseconds(), 10))
		err := s.fwd.client(addr).DoDeadline(req, resp, deadline)
		if err != nil {
			last = err
			if idempotent || dialFailed(err) {
				continue
			}
			return nil, codeUnavailable.err("shard " + itoa(sh) + " is hosted on " + addr +
				", which did not answer (" + err.Error() + "); the request may or may not have been applied")
		}
		status := resp.StatusCode()
		if status == 200 {
			return append([]byte(nil), resp.Body()...), nil
		}
		if len(resp.Header.Peek(notHostedHeader)) > 0 || status == 404 || status == 405 {
			// Nothing was done there (not hosted, or a node without the
			// internal endpoints): the next node may take it.
			last = fmt.Errorf("%s does not serve shard %d", addr, sh)
			continue
		}
		return nil, remoteError(addr, status, resp.Body())
	}
	return nil, codeUnavailable.err("shard " + itoa(sh) + " is not hosted on this node, and no node hosting it answered: " + last.Error())
}

// remoteError turns another node's error answer back into the error its
// handler had.
func remoteError(addr string, status int, body []byte) *apiError {
	var e corvo.ErrorBody
	if json.Unmarshal(body, &e) != nil || e.Code == "" || status < 400 {
		return codeUnavailable.err("node " + addr + " answered status " + itoa(status) + "; the request may or may not have been applied")
	}
	return relayed(status, e.Code, e.Error)
}

// dialFailed: the connection was never made, so nothing was sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.Is(err, fasthttp.ErrDialTimeout) || (errors.As(err, &op) && op.Op == "dial")
}

// ---- the internal endpoints ----

// internalShard reads {n}: a shard number this node hosts. It answers
// the request itself (false) otherwise, after decode so bad bodies are 400
// whatever the shard.
func (s *Server) internalShard(ctx *fasthttp.RequestCtx) (int, bool) {
	v, _ := ctx.UserValue("n").(string)
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n >= s.eng.Shards() || strconv.Itoa(n) != v {
		writeError(ctx, invalid("no shard %q (this cluster has %d)", v, s.eng.Shards()))
		return 0, false
	}
	return n, true
}

func (s *Server) refuseNotHosted(ctx *fasthttp.RequestCtx, sh int) bool {
	if s.hosted(sh) {
		return false
	}
	writeError(ctx, codeUnavailable.err("shard "+itoa(sh)+" is not hosted on this node"))
	ctx.Response.Header.Set(notHostedHeader, "1")
	return true
}

// callerTimeout is how long the caller waits, bounded by the request
// timeout.
func (s *Server) callerTimeout(ctx *fasthttp.RequestCtx) time.Duration {
	d := s.cfg.RequestTimeout
	if ms, err := strconv.ParseInt(string(ctx.Request.Header.Peek(timeoutHeader)), 10, 64); err == nil && ms > 0 && time.Duration(ms)*time.Millisecond < d {
		d = time.Duration(ms) * time.Millisecond
	}
	return d
}

// POST /internal/v1/shards/{n}/propose
func (s *Server) handleShardPropose(ctx *fasthttp.RequestCtx) {
	sh, ok := s.internalShard(ctx)
	if !ok {
		return
	}
	e, err := statemachine.DecodeEntry(ctx.PostBody())
	if err != nil {
		writeError(ctx, codeBadRequest.errf("cannot decode the entry: %v", err))
		return
	}
	if len(e.Ops) == 0 {
		writeError(ctx, invalid("the entry holds no op"))
		return
	}
	if err := s.checkPeerOps(sh, e.Ops); err != nil {
		writeError(ctx, invalid("the entry is refused: %v", err))
		return
	}
	if s.refuseNotHosted(ctx, sh) {
		return
	}
	pctx, cancel := context.WithTimeout(context.Background(), s.callerTimeout(ctx))
	defer cancel()
	rs, err := s.eng.Propose(pctx, sh, e.Ops...)
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(statemachine.AppendResults(nil, rs))
}

// POST /internal/v1/shards/{n}/read
func (s *Server) handleShardRead(ctx *fasthttp.RequestCtx) {
	sh, ok := s.internalShard(ctx)
	if !ok {
		return
	}
	q, rr, err := decodeReadQuery(ctx.PostBody())
	if err != nil {
		writeError(ctx, codeBadRequest.errf("%v", err))
		return
	}
	if s.refuseNotHosted(ctx, sh) {
		return
	}
	v, err := s.eng.Read(sh, q)
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	out, err := encodeReadResult(v, rr)
	if err != nil {
		writeError(ctx, codeInternal.err(err.Error()))
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(out)
}

// ---- the read codec ----

// remoteRead is a query type another node may be asked, with the type of
// its answer.
type remoteRead struct {
	query, result reflect.Type
}

// remoteReads holds every query the gateway passes to s.read, by type
// name. TestRemoteReadEveryQuery fails for a query the gateway uses that
// is missing here.
var remoteReads = map[string]remoteRead{}

func registerRead[Q, R any]() {
	q := reflect.TypeFor[Q]()
	remoteReads[q.Name()] = remoteRead{query: q, result: reflect.TypeFor[R]()}
}

func init() {
	registerRead[statemachine.GetJobQuery, *statemachine.JobView]()
	registerRead[statemachine.MovedQuery, string]()
	registerRead[statemachine.BatchQuery, *statemachine.Batch]()
	registerRead[statemachine.ListQueuesQuery, []statemachine.QueueInfo]()
	registerRead[statemachine.DeadQuery, statemachine.DeadPage]()
	registerRead[statemachine.SchedulesQuery, []statemachine.Schedule]()
	registerRead[statemachine.WorkersQuery, []statemachine.WorkerInfo]()
}

// Result frames: the first byte says what follows.
const (
	resultNil      = 0 // an untyped nil: nothing follows
	resultValue    = 1 // the gob-encoded value follows
	resultTypedNil = 2 // a nil pointer or slice of the query's result type
)

func encodeReadQuery(q any) (remoteRead, []byte, error) {
	t := reflect.TypeOf(q)
	var rr remoteRead
	ok := false
	if t != nil {
		rr, ok = remoteReads[t.Name()]
	}
	if !ok || rr.query != t {
		return rr, nil, fmt.Errorf("query %T cannot be asked of another node (not registered in gateway/remote.go)", q)
	}
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	if err := enc.Encode(t.Name()); err != nil {
		return rr, nil, err
	}
	if err := enc.Encode(q); err != nil {
		return rr, nil, fmt.Errorf("encoding %T: %w", q, err)
	}
	return rr, buf.Bytes(), nil
}

// decodeReadQuery reads a query encodeReadQuery wrote: a registered kind
// and exactly one value of its type, nothing after.
func decodeReadQuery(b []byte) (any, remoteRead, error) {
	r := bytes.NewReader(b) // an io.ByteReader: gob reads no further than it must
	dec := gob.NewDecoder(r)
	var kind string
	if err := dec.Decode(&kind); err != nil {
		return nil, remoteRead{}, fmt.Errorf("cannot decode the query: %v", err)
	}
	rr, ok := remoteReads[kind]
	if !ok {
		return nil, rr, fmt.Errorf("unknown query %q", kind)
	}
	v := reflect.New(rr.query)
	if err := dec.Decode(v.Interface()); err != nil {
		return nil, rr, fmt.Errorf("cannot decode the %s: %v", kind, err)
	}
	if r.Len() != 0 {
		return nil, rr, fmt.Errorf("trailing bytes after the %s", kind)
	}
	return v.Elem().Interface(), rr, nil
}

func encodeReadResult(v any, rr remoteRead) ([]byte, error) {
	if v == nil {
		return []byte{resultNil}, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Type() != rr.result {
		return nil, fmt.Errorf("a %s answered %T, not %s", rr.query.Name(), v, rr.result)
	}
	switch rv.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if rv.IsNil() {
			return []byte{resultTypedNil}, nil
		}
	}
	buf := bytes.NewBuffer([]byte{resultValue})
	if err := gob.NewEncoder(buf).Encode(v); err != nil {
		return nil, fmt.Errorf("encoding the answer to a %s: %w", rr.query.Name(), err)
	}
	return buf.Bytes(), nil
}

func decodeReadResult(b []byte, rr remoteRead) (any, error) {
	if len(b) == 1 && b[0] == resultNil {
		return nil, nil
	}
	if len(b) == 1 && b[0] == resultTypedNil {
		return reflect.Zero(rr.result).Interface(), nil
	}
	if len(b) < 2 || b[0] != resultValue {
		return nil, errors.New("bad result frame")
	}
	r := bytes.NewReader(b[1:])
	v := reflect.New(rr.result)
	if err := gob.NewDecoder(r).Decode(v.Interface()); err != nil {
		return nil, err
	}
	if r.Len() != 0 {
		return nil, errors.New("trailing bytes after the result")
	}
	return v.Elem().Interface(), nil
}

// ProposeElsewhere proposes ops to shard sh through a node that hosts it.
// The shard layer's outbox relay uses it (shard.Host.SetRemote) to deliver
// cross-shard effects to shards this node does not host.
func (s *Server) ProposeElsewhere(ctx context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	rs, aerr := s.proposeRemote(ctx, sh, ops)
	if aerr != nil {
		return nil, aerr
	}
	return rs, nil
}
