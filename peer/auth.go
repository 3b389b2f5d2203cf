package peer

import (
	corvo "github.com/corvohq/corvo/sdk/go"

	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// Node-to-node endpoints — the internal shard propose/read, cluster join,
// the "you were removed" notice and node removal — are never reachable
// without the cluster credential: a secret generated when the cluster is
// bootstrapped and given to every node that joins (Config.Secret). Every
// node-to-node call to them carries it in SecretHeader. A user key, when
// there are some, is not a cluster credential.
//
// With mutual TLS between nodes (Config.PeerCerts), a caller must also
// have presented a client certificate that this node's TLS listener
// verified against the peer CA. The secret stays required with the
// certificate, not replaced by it: the CA may be an organisation's (or a
// cert-manager issuer's) that signs certificates for more than this
// cluster, so a certificate says "a machine we vouch for", the secret "a
// node of this cluster"; and a leaked secret alone (an environment
// variable, a process listing) no longer opens the node-to-node routes
// from a machine without a node's key.

// ALPN is the application protocol a node-to-node TLS handshake offers:
// the listener then serves the node's peer certificate and requires the
// caller's (the API's own certificate may be from another CA).
// The SDK's PeerALPN is the same value, for operators' clients.
const ALPN = corvo.PeerALPN

// SecretHeader carries the cluster secret on node-to-node calls.
const SecretHeader = "X-Corvo-Cluster-Secret"

// MinSecretLen is the shortest cluster secret accepted (32 characters:
// 128 bits or more of a random hex or base64 string).
const MinSecretLen = 32

// Only wraps a node-to-node handler: it runs only for a caller that
// presents this node's cluster secret; any other gets the refusal, through
// fail. A node with no secret configured refuses every such call.
func (c *Client) Only(h fasthttp.RequestHandler, fail func(*fasthttp.RequestCtx, error)) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if err := c.check(ctx); err != nil {
			fail(ctx, err)
			return
		}
		h(ctx)
	}
}

// Trusted reports whether the request carries this node's cluster
// credential: another node of the cluster calling a user route (a status
// probe, a fetch, search or event stream fanned out to it, a forwarded
// request the first node already authorized).
func (c *Client) Trusted(ctx *fasthttp.RequestCtx) bool { return c.check(ctx) == nil }

// Verify is Trusted with the refusal: nil for a caller with the cluster
// credential, else the error to answer.
func (c *Client) Verify(ctx *fasthttp.RequestCtx) error {
	if err := c.check(ctx); err != nil {
		return err
	}
	return nil
}

func (c *Client) check(ctx *fasthttp.RequestCtx) *Error {
	if c.cfg.PeerCerts {
		if st := ctx.TLSConnectionState(); st == nil || len(st.VerifiedChains) == 0 {
			return &Error{Status: 401, Code: corvo.CodePeerCertificateRequired,
				Msg: "this is a node-to-node endpoint: it needs a client certificate issued by the cluster's peer CA (mutual TLS)"}
		}
	}
	got := ctx.Request.Header.Peek(SecretHeader)
	if len(got) == 0 {
		return &Error{Status: 401, Code: corvo.CodeClusterSecretRequired,
			Msg: "this is a node-to-node endpoint: it needs the cluster secret in the " + SecretHeader + " header"}
	}
	want := c.cfg.Secret
	if want == "" || subtle.ConstantTimeCompare(got, []byte(want)) != 1 {
		return &Error{Status: 403, Code: corvo.CodeClusterSecretInvalid, Msg: "the cluster secret is wrong"}
	}
	return nil
}

// sign adds this node's cluster secret to a node-to-node request.
func (c *Client) sign(req *fasthttp.Request) {
	if c.cfg.Secret != "" {
		req.Header.Set(SecretHeader, c.cfg.Secret)
	}
}
