package peer

import (
	corvo "github.com/corvohq/corvo/sdk/go"

	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// Remote propose and read: a shard this node does not host is reached
// through the internal endpoints of a node that does (handlers.go).
//
//	POST /internal/v1/shards/{n}/propose  body: statemachine.Entry{Ops}.Encode
//	                                      200: statemachine.AppendResults
//	POST /internal/v1/shards/{n}/read     body: gob (query kind, query)
//	                                      200: one byte (0 nil, 1 value, 2
//	                                      typed nil) then the gob result
//
// Errors are the JSON {"error","code"} the receiver's gateway writes for
// the same engine error, and the caller hands that same error on (*Error).
// A node that does not host shard n answers 503 unavailable with the
// NotHostedHeader and does nothing: it never forwards, so the caller may
// try the next node.

// ShardPath is the internal endpoint what ("propose", "read") of shard sh.
func ShardPath(sh int, what string) string {
	return "/internal/v1/shards/" + strconv.Itoa(sh) + "/" + what
}

// Propose proposes ops to shard sh through a node that hosts it, within
// the request timeout and ctx's deadline. Its results, or its error as
// that node's handler answered it (*Error), come back as if proposed here.
// The shard layer's outbox relay delivers to shards placed on other nodes
// with it (shard.Config.Remote).
func (c *Client) Propose(ctx context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(c.cfg.RequestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	body := (&statemachine.Entry{Ops: ops}).Encode(nil)
	out, perr := c.callShard(sh, "propose", body, deadline, false)
	if perr != nil {
		return nil, perr
	}
	rs, err := statemachine.DecodeResults(out)
	if err == nil && len(rs) != len(ops) {
		err = fmt.Errorf("%d results for %d ops", len(rs), len(ops))
	}
	if err != nil {
		return nil, &Error{Status: 500, Code: corvo.CodeInternal, Msg: "shard " + strconv.Itoa(sh) + ": unreadable results from the node hosting it: " + err.Error()}
	}
	return rs, nil
}

// Read answers a statemachine query (one registered in remoteReads) on
// shard sh from a node that hosts it. A failure that node answered is an
// *Error.
func (c *Client) Read(sh int, q any) (any, error) {
	rr, body, err := encodeReadQuery(q)
	if err != nil {
		return nil, err
	}
	out, perr := c.callShard(sh, "read", body, time.Now().Add(c.cfg.RequestTimeout), true)
	if perr != nil {
		return nil, perr
	}
	v, err := decodeReadResult(out, rr)
	if err != nil {
		return nil, fmt.Errorf("shard %d: unreadable answer from the node hosting it: %w", sh, err)
	}
	return v, nil
}

// ReadEach reads every shard of local's cluster with the query q(sh): the
// shards local hosts from local, the others from nodes hosting them, all at
// once. The answers come in shard order, or the lowest shard's error.
func (c *Client) ReadEach(local Local, q func(sh int) any) ([]any, error) {
	n := local.Shards()
	out, errs := make([]any, n), make([]error, n)
	var wg sync.WaitGroup
	for sh := 0; sh < n; sh++ {
		if !local.Hosts(sh) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[sh], errs[sh] = c.Read(sh, q(sh))
			}()
		}
	}
	for sh := 0; sh < n; sh++ {
		if local.Hosts(sh) {
			out[sh], errs[sh] = local.Read(sh, q(sh))
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

// callShard posts body to shard sh's internal endpoint on the first node
// hosting it that takes the request, before deadline, and returns the 200
// answer's body. A node that cannot be dialled, or says it does not host
// the shard, is skipped. One that was reached and then failed is retried
// elsewhere only when idempotent (reads): a proposal may have been
// applied there.
func (c *Client) callShard(sh int, what string, body []byte, deadline time.Time, idempotent bool) ([]byte, *Error) {
	targets := c.Targets(sh)
	req, resp, release := c.hopPost("application/octet-stream", body)
	defer release()
	path := ShardPath(sh, what)
	last := errNoTarget
	for _, addr := range targets {
		wait := time.Until(deadline)
		if wait <= 0 {
			last = context.DeadlineExceeded
			break
		}
		req.SetRequestURI(c.URL(addr, path))
		req.Header.Set(TimeoutHeader, strconv.FormatInt(wait.Milliseconds(), 10))
		err := c.host(addr).DoDeadline(req, resp, deadline)
		if err != nil {
			last = err
			if idempotent || DialFailed(err) {
				continue
			}
			return nil, unavailable("shard " + strconv.Itoa(sh) + " is hosted on " + addr +
				", which did not answer (" + err.Error() + "); the request may or may not have been applied")
		}
		status := resp.StatusCode()
		if status == 200 {
			return append([]byte(nil), resp.Body()...), nil
		}
		if len(resp.Header.Peek(NotHostedHeader)) > 0 || status == 404 || status == 405 {
			// Nothing was done there (not hosted, or a node without the
			// internal endpoints): the next node may take it.
			last = fmt.Errorf("%s does not serve shard %d", addr, sh)
			continue
		}
		return nil, remoteError(addr, status, resp.Body())
	}
	return nil, unavailable("shard " + strconv.Itoa(sh) + " is not hosted on this node, and no node hosting it answered: " + last.Error())
}

// remoteError turns another node's error answer back into the error its
// handler had.
func remoteError(addr string, status int, body []byte) *Error {
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(body, &e) != nil || e.Code == "" || status < 400 {
		return unavailable("node " + addr + " answered status " + strconv.Itoa(status) + "; the request may or may not have been applied")
	}
	return &Error{Status: status, Code: e.Code, Msg: e.Error}
}

// ---- the read codec ----

// remoteRead is a query type another node may be asked, with the type of
// its answer.
type remoteRead struct {
	query, result reflect.Type
}

// remoteReads holds every query the gateway reads from other nodes, by
// type name. TestRemoteReadEveryQuery fails for a query the gateway uses that
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
	registerRead[statemachine.JobQueuesQuery, []string]()
	registerRead[statemachine.AuditQuery, statemachine.AuditPage]()
	registerRead[statemachine.SchedulesQuery, []statemachine.Schedule]()
	registerRead[statemachine.WorkersQuery, []statemachine.WorkerInfo]()
	registerRead[statemachine.BudgetsQuery, []statemachine.BudgetSpend]()
	registerRead[statemachine.ProvidersQuery, []statemachine.ProviderInfo]()
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
		return rr, nil, fmt.Errorf("query %T cannot be asked of another node (not registered in peer/remote.go)", q)
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

// ReadKinds lists the query types (by name) another node may be asked
// through Read.
func ReadKinds() []string {
	out := make([]string, 0, len(remoteReads))
	for k := range remoteReads {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
