package peer

import (
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
)

// Forward sends the request, whole, to the first of targets that takes it
// before deadline, and copies the answer back. A target that cannot be
// dialled is skipped; one that was reached is not retried elsewhere (the
// request may have been applied there).
func (c *Client) Forward(ctx *fasthttp.RequestCtx, targets []string, deadline time.Time) error {
	if len(targets) == 0 {
		return errNoTarget
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	ctx.Request.CopyTo(req)
	req.Header.Set(HopHeader, "1")
	req.Header.Del("Connection")
	// This node applied the browser rules; the receiver sees its own
	// address as Host and would take the page's Origin for foreign.
	req.Header.Del("Origin")
	req.Header.Del("Sec-Fetch-Site")
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	var last error
	for _, addr := range targets {
		req.SetHost(addr)
		req.URI().SetScheme(strings.TrimSuffix(c.scheme, "://"))
		err := c.host(addr).DoDeadline(req, resp, deadline)
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
		if !DialFailed(err) {
			return err // reached, then failed: it may have applied the request
		}
	}
	return last
}

// NamespaceHeader names the namespace a request acts in. A node-to-node
// call made for a request of another namespace than the default one sends
// it, with names as that namespace sees them: the receiver, admitting the
// cluster credential, acts in that namespace as the first node did.
const NamespaceHeader = "X-Corvo-Namespace"

// setNamespace marks a node-to-node request with the namespace ns.
func setNamespace(h interface{ Set(k, v string) }, ns string) {
	if ns != "" && ns != router.DefaultNamespace {
		h.Set(NamespaceHeader, ns)
	}
}

// hopPost prepares a node-to-node POST of body: marked with the hop header
// (its receiver never forwards it again) and carrying the cluster secret
// (on a server that needs keys, it stands for the caller this node
// admitted). release returns both to their pools.
func (c *Client) hopPost(contentType string, body []byte) (req *fasthttp.Request, resp *fasthttp.Response, release func()) {
	req, resp = fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(contentType)
	req.Header.Set(HopHeader, "1")
	c.sign(req)
	req.SetBodyRaw(body)
	return req, resp, func() { fasthttp.ReleaseRequest(req); fasthttp.ReleaseResponse(resp) }
}
