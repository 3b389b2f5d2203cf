package gateway

import (
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// Node-to-node endpoints — the internal shard propose/read, cluster join,
// the "you were removed" notice and node removal — are never reachable
// without the cluster credential: a secret generated when the cluster is
// bootstrapped and given to every node that joins (Config.ClusterSecret).
// Every node-to-node call to them carries it in ClusterSecretHeader. A user
// key, when there are some, is not a cluster credential.

// ClusterSecretHeader carries the cluster secret on node-to-node calls.
const ClusterSecretHeader = "X-Corvo-Cluster-Secret"

// MinClusterSecretLen is the shortest cluster secret accepted (32
// characters: 128 bits or more of a random hex or base64 string).
const MinClusterSecretLen = 32

// peerOnly wraps a node-to-node handler: it runs only for a caller that
// presents this node's cluster secret. A node with no secret configured
// refuses every such call.
func (s *Server) peerOnly(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if aerr := s.checkPeer(ctx); aerr != nil {
			writeError(ctx, aerr)
			return
		}
		h(ctx)
	}
}

func (s *Server) checkPeer(ctx *fasthttp.RequestCtx) *apiError {
	got := ctx.Request.Header.Peek(ClusterSecretHeader)
	if len(got) == 0 {
		return codeClusterSecretRequired.err("this is a node-to-node endpoint: it needs the cluster secret in the " + ClusterSecretHeader + " header")
	}
	want := s.cfg.ClusterSecret
	if want == "" || subtle.ConstantTimeCompare(got, []byte(want)) != 1 {
		return codeClusterSecretInvalid.err("the cluster secret is wrong")
	}
	return nil
}

// signPeer adds this node's cluster secret to a node-to-node request.
func (s *Server) signPeer(req *fasthttp.Request) {
	if s.cfg.ClusterSecret != "" {
		req.Header.Set(ClusterSecretHeader, s.cfg.ClusterSecret)
	}
}
