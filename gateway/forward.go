package gateway

import (
	"errors"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Forwarding: a request for a shard this node does not host goes, whole,
// to a node that the placement (R of N nodes per shard) puts it on.

// hopHeader marks a forwarded request: its receiver never forwards it
// again, so loops are impossible.
const hopHeader = "X-Corvo-Forwarded"

// hoster is implemented by engines that may not host every shard.
type hoster interface {
	Hosts(shard int) bool
}

// forwarder keeps one keep-alive connection pool per peer.
type forwarder struct {
	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient
	next    atomic.Uint64 // round robin over targets
}

func (f *forwarder) client(addr string) *fasthttp.HostClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clients == nil {
		f.clients = map[string]*fasthttp.HostClient{}
	}
	c := f.clients[addr]
	if c == nil {
		c = &fasthttp.HostClient{Addr: addr, Name: "corvo-forward", MaxConns: 1024,
			MaxIdleConnDuration: time.Minute, DisablePathNormalizing: true}
		f.clients[addr] = c
	}
	return c
}

// hosted reports whether this node hosts shard sh.
func (s *Server) hosted(sh int) bool {
	return s.hoster == nil || s.hoster.Hosts(sh)
}

// forwardTargets lists HTTP addresses that may host shard sh, in the order
// to try them: Config.ShardTargets when set, else every other node that
// answers its health probe (every node hosts every shard), rotated so the
// load spreads.
func (s *Server) forwardTargets(sh int) []string {
	var out []string
	if s.cfg.ShardTargets != nil {
		out = s.cfg.ShardTargets(sh)
	} else if s.cluster != nil {
		return s.placedTargets(sh)
	} else if s.peers != nil {
		p := s.peers
		p.mu.Lock()
		for id, addr := range p.addrs {
			if id != p.self && addr != "" && time.Since(p.seen[id]) < 3*peerProbeInterval+time.Second {
				out = append(out, addr)
			}
		}
		p.mu.Unlock()
		sort.Strings(out)
	}
	if len(out) > 1 {
		k := int(s.fwd.next.Add(1) % uint64(len(out)))
		out = append(append(make([]string, 0, len(out)), out[k:]...), out[:k]...)
	}
	return out
}

// errNoTarget: no node that may host the shard answered.
var errNoTarget = errors.New("no node hosting the shard answered")

// forwardIfElsewhere forwards the request when this node does not host
// shard sh and reports whether it answered the request (forwarded, or a
// 503 when that is impossible).
func (s *Server) forwardIfElsewhere(ctx *fasthttp.RequestCtx, sh int) bool {
	if s.hosted(sh) {
		return false
	}
	if len(ctx.Request.Header.Peek(hopHeader)) > 0 {
		writeError(ctx, codeUnavailable.err("shard "+itoa(sh)+" is not hosted on this node"))
		ctx.Response.Header.Set("Retry-After", "1")
		return true
	}
	if err := s.forward(ctx, s.forwardTargets(sh)); err != nil {
		writeError(ctx, codeUnavailable.err("shard "+itoa(sh)+" is not hosted on this node, and forwarding failed: "+err.Error()))
		ctx.Response.Header.Set("Retry-After", "1")
	}
	return true
}

// forward sends the request to the first target that takes it, within the
// request timeout, and copies the answer back. A target that cannot be
// reached is skipped; one that was reached is not retried elsewhere (the
// request may have been applied there).
func (s *Server) forward(ctx *fasthttp.RequestCtx, targets []string) error {
	return s.forwardUntil(ctx, targets, time.Now().Add(s.cfg.RequestTimeout))
}

// forwardUntil is forward with its own deadline (a long-poll's is longer).
func (s *Server) forwardUntil(ctx *fasthttp.RequestCtx, targets []string, deadline time.Time) error {
	if len(targets) == 0 {
		return errNoTarget
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	ctx.Request.CopyTo(req)
	req.Header.Set(hopHeader, "1")
	req.Header.Del("Connection")
	// This node applied the browser rules (route); the receiver sees its
	// own address as Host and would take the page's Origin for foreign.
	req.Header.Del("Origin")
	req.Header.Del("Sec-Fetch-Site")
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	var last error
	for _, addr := range targets {
		req.SetHost(addr)
		req.URI().SetScheme("http")
		err := s.fwd.client(addr).DoDeadline(req, resp, deadline)
		if err == nil {
			ctx.SetStatusCode(resp.StatusCode())
			for k, v := range resp.Header.All() {
				switch strings.ToLower(string(k)) {
				case "content-type", "retry-after", "location":
					ctx.Response.Header.SetBytesKV(k, v)
				}
			}
			ctx.SetBody(resp.Body())
			return nil
		}
		last = err
		var op *net.OpError
		if !errors.Is(err, fasthttp.ErrDialTimeout) && !(errors.As(err, &op) && op.Op == "dial") {
			return err // reached, then failed: it may have applied the request
		}
	}
	return last
}
