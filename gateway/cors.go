package gateway

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"
)

// Browser rules. A web page an operator visits can send a "simple"
// cross-origin request (POST with text/plain, no preflight) that carries
// the operator's network position; two rules close that door on the /api/
// routes, both applied once, in route:
//
//   - a state-changing method (POST, PUT, DELETE, PATCH) whose Origin is
//     not this server's own (compared with the Host header) and not in
//     Config.CORSOrigins, or whose Sec-Fetch-Site is cross-site, is refused
//     (403 cross_origin);
//   - POST and PUT need Content-Type: application/json, even with an empty
//     body (415 unsupported_media_type): a browser cannot send that type
//     cross-origin without a preflight, which only allowed origins pass.
//
// The /internal/ routes (node to node, octet-stream bodies) are exempt.

// corsMaxAge is how long a browser may cache a preflight answer (seconds).
const corsMaxAge = "600"

// corsAllowHeaders are the request headers an allowed origin may send.
const corsAllowHeaders = "Content-Type, Authorization, Last-Event-ID, X-Corvo-Namespace"

// guard is what route checks before a handler runs.
type guard struct {
	changes bool // state-changing: cross-origin requests are refused
	json    bool // the body must be declared application/json
}

// routeGuard chooses the checks of a route from its method; nil: none.
func routeGuard(method, path string) *guard {
	if !strings.HasPrefix(path, "/api/") {
		return nil
	}
	g := &guard{}
	switch method {
	case fasthttp.MethodPost, fasthttp.MethodPut, fasthttp.MethodPatch:
		g.changes, g.json = true, true
	case fasthttp.MethodDelete:
		g.changes = true
	}
	return g
}

// corsPolicy is Config.CORSOrigins, normalised.
type corsPolicy struct {
	any     bool
	origins map[string]struct{} // lower case, no trailing slash
}

// CheckCORSOrigins reports the first entry of origins that is neither "*"
// nor an origin (scheme://host[:port]).
func CheckCORSOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		i := strings.Index(o, "://")
		if i <= 0 || i+3 == len(o) || strings.ContainsAny(strings.TrimSuffix(o[i+3:], "/"), "/?#@ ") {
			return fmt.Errorf("CORS origin %q is not \"*\" nor scheme://host[:port]", o)
		}
	}
	return nil
}

func newCORSPolicy(origins []string) corsPolicy {
	p := corsPolicy{origins: map[string]struct{}{}}
	for _, o := range origins {
		if o == "*" {
			p.any = true
			continue
		}
		p.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = struct{}{}
	}
	return p
}

func (p *corsPolicy) allows(origin []byte) bool {
	if len(origin) == 0 || string(origin) == "null" {
		return false
	}
	if p.any {
		return true
	}
	_, ok := p.origins[strings.ToLower(string(origin))]
	return ok
}

// crossOrigin reports whether the request comes from a page of another
// origin: its Origin's host differs from the Host it was sent to, or the
// browser says it is cross-site.
func crossOrigin(ctx *fasthttp.RequestCtx) bool {
	if bytes.EqualFold(ctx.Request.Header.Peek("Sec-Fetch-Site"), []byte("cross-site")) {
		return true
	}
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 {
		return false // not a browser, or a same-origin GET-like request
	}
	i := bytes.Index(origin, []byte("://"))
	if i < 0 {
		return true // "null" (sandboxed page, file://) or garbage
	}
	return !bytes.EqualFold(bytes.TrimSuffix(origin[i+3:], []byte("/")), ctx.Host())
}

// jsonContentType reports whether the request declares a JSON body:
// application/json, in any case, with or without parameters.
func jsonContentType(ctx *fasthttp.RequestCtx) bool {
	ct := ctx.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("application/json"))
}

// admit applies g's rules to the request: false when it answered it with
// an error (and the handler must not run). An allowed origin gets its
// Access-Control-Allow-Origin whatever the answer.
func (s *Server) admit(ctx *fasthttp.RequestCtx, g *guard) bool {
	origin := ctx.Request.Header.Peek("Origin")
	allowed := s.cors.allows(origin)
	if allowed {
		ctx.Response.Header.SetBytesV("Access-Control-Allow-Origin", origin)
		ctx.Response.Header.Add("Vary", "Origin")
	}
	if g.changes && !allowed && crossOrigin(ctx) {
		writeError(ctx, codeCrossOrigin.err("cross-origin requests to this endpoint are refused; allow the page's origin with --cors-origin"))
		return false
	}
	if g.json && !jsonContentType(ctx) {
		writeError(ctx, codeUnsupportedMediaType.err(string(ctx.Method())+" requests need Content-Type: application/json (even with an empty body)"))
		return false
	}
	return true
}

// handlePreflight answers OPTIONS on a known path (the router has set
// Allow to its methods): an allowed origin gets the CORS answer, another
// origin a 403, a request without Origin just the Allow header.
func (s *Server) handlePreflight(ctx *fasthttp.RequestCtx) {
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 || !bytes.HasPrefix(ctx.Path(), []byte("/api/")) {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if !s.cors.allows(origin) {
		writeError(ctx, codeCrossOrigin.err("origin "+string(origin)+" is not allowed (--cors-origin)"))
		return
	}
	h := &ctx.Response.Header
	h.SetBytesV("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.SetBytesV("Access-Control-Allow-Methods", h.Peek("Allow"))
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", corsMaxAge)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}
