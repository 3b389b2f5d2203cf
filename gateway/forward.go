package gateway

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/statemachine"
)

// Shards this node does not host: a request for one goes, whole, to a node
// the placement puts it on (s.peer.Forward); a handler that touches many
// shards (batch enqueue, ack batch, heartbeat, lists, bulk) proposes and
// reads each through s.proposeCtx and s.read: the engine when this node
// hosts the shard, else the peer layer.

// hosted reports whether this node hosts shard sh.
func (s *Server) hosted(sh int) bool { return s.eng.Hosts(sh) }

// forwardIfElsewhere forwards the request when this node does not host
// shard sh and reports whether it answered the request (forwarded, or a
// 503 when that is impossible).
func (s *Server) forwardIfElsewhere(ctx *fasthttp.RequestCtx, sh int) bool {
	if s.hosted(sh) {
		return false
	}
	if peer.Forwarded(ctx) {
		writeError(ctx, codeUnavailable.err("shard "+itoa(sh)+" is not hosted on this node"))
		ctx.Response.Header.Set("Retry-After", "1")
		return true
	}
	if err := s.forward(ctx, s.peer.Targets(sh), time.Now().Add(s.cfg.RequestTimeout)); err != nil {
		writeError(ctx, codeUnavailable.err("shard "+itoa(sh)+" is not hosted on this node, and forwarding failed: "+err.Error()))
		ctx.Response.Header.Set("Retry-After", "1")
	}
	return true
}

// forward sends the request, whole, to the first of targets that takes it
// (peer.Client.Forward), telling the receiver the caller's address
// (ClientAddrHeader). A request another node answered is recorded in the
// audit log by that node (it authorizes the caller's key itself), not
// here. Its answer carries peer.HopHeader, so that a client that routes
// by the placement (the Go SDK) sees it sent the request to the wrong
// node and reads the placement again.
func (s *Server) forward(ctx *fasthttp.RequestCtx, targets []string, deadline time.Time) error {
	ctx.Request.Header.Set(ClientAddrHeader, ctx.RemoteAddr().String())
	err := s.peer.Forward(ctx, targets, deadline)
	if err == nil {
		ctx.SetUserValue(answeredElsewhereKey, true)
		ctx.Response.Header.Set(peer.HopHeader, "1")
	}
	return err
}

// ClientAddrHeader carries, on a request one node forwards to another, the
// address of the client that sent it (for the audit log's remote).
const ClientAddrHeader = "X-Corvo-Client-Addr"

// answeredElsewhereKey marks a request another node answered (forward).
const answeredElsewhereKey = "corvo.answered-elsewhere"

// read answers a statemachine query on shard sh: the engine when this node
// hosts sh, else a node that does (peer.Client.Read; its failure is a
// *peer.Error, which engineError hands on unchanged).
func (s *Server) read(sh int, q any) (any, error) {
	if s.hosted(sh) {
		return s.eng.Read(sh, q)
	}
	return s.peer.Read(sh, q)
}

// readEach reads every shard with the query q(sh) (peer.Client.ReadEach:
// hosted shards from the engine, the others from nodes hosting them).
func (s *Server) readEach(q func(sh int) any) ([]any, error) { return s.peer.ReadEach(s.eng, q) }

// proposeRemote proposes ops on a node hosting shard sh (s.proposeCtx
// when this node does not host it).
func (s *Server) proposeRemote(parent context.Context, sh int, ops []statemachine.Op) ([]statemachine.Result, *apiError) {
	rs, err := s.peer.Propose(parent, sh, ops...)
	if err != nil {
		return nil, engineError(err)
	}
	return rs, nil
}
