// Package corvo is the Go client for the Corvo job server: a thin HTTP/JSON
// wrapper around every endpoint (Client) and a worker runtime (Worker) that
// fetches, heartbeats, checkpoints and drains on SIGTERM.
//
// It depends only on the standard library and xxhash (the server's
// queue → shard hash, for routing requests: placement.go).
package corvo

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Error is an error answer of the server: an HTTP status plus the stable
// code and message of its JSON body.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the server's Retry-After hint (429, 503), 0 if none.
	RetryAfter time.Duration
	// body is the answer's body (a heartbeat's 409 carries the statuses).
	body []byte
}

func (e *Error) Error() string {
	return fmt.Sprintf("corvo: %d %s: %s", e.Status, e.Code, e.Message)
}

// IsNotFound, IsConflict: common checks on errors returned by the client.
func IsNotFound(err error) bool { var e *Error; return errors.As(err, &e) && e.Status == 404 }

// IsConflict reports a 409: the job is not in a state that allows the call
// (for a worker: it no longer holds the job).
func IsConflict(err error) bool { var e *Error; return errors.As(err, &e) && e.Status == 409 }

// Client calls a Corvo server, a load balancer in front of a cluster, or
// the nodes of a cluster directly: when a node goes away (connection
// refused or reset, or 503 while it shuts down) the client moves to the
// next one.
type Client struct {
	nodes []string // base URLs; every request starts at nodes[cur]
	cur   atomic.Uint32
	mu    sync.RWMutex
	http  *http.Client
	// MaxRetries bounds how often a request answered 429 or 503 is retried
	// after the server's Retry-After delay (default 5).
	MaxRetries int
	// clusterSecret is sent on the node-to-node routes an operator calls
	// (RemoveNode); see WithClusterSecret.
	clusterSecret string
	// apiKey is sent as "Authorization: Bearer" on every call.
	apiKey string
	// namespace, when set, is sent as NamespaceHeader on every call.
	namespace string
	// tls, when set, is the TLS of https:// servers (WithTLSConfig).
	tls *tls.Config
	// enq coalesces concurrent Enqueue calls (coalesce.go) unless
	// noCoalesce (WithoutEnqueueCoalescing).
	enq        coalescer
	noCoalesce bool
	// place routes requests to the nodes hosting their shards
	// (placement.go) unless WithoutPlacement.
	place placer
}

// Option configures a Client.
type Option func(*Client)

// WithClusterSecret gives the client the cluster secret (a node's
// <data-dir>/cluster-secret), which RemoveNode needs: node removal is a
// node-to-node route that no user key opens.
func WithClusterSecret(secret string) Option { return func(c *Client) { c.clusterSecret = secret } }

// WithAPIKey sends the key ("corvo_…") as "Authorization: Bearer" on every
// call. A server that is not open (see docs/api.md, "Authentication")
// answers 401 unauthorized without one.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// APIKeyEnv is the environment variable the CLI, corvo top and corvo bench
// read the API key from.
const APIKeyEnv = "CORVO_API_KEY"

// WithNamespace makes every call act in namespace ns (NamespaceHeader): an
// admin key (or a single sign-on user granted ns) may name any; another
// key acts in its own namespace, and naming another is a 403. Queue names
// in requests and answers are then ns's.
func WithNamespace(ns string) Option { return func(c *Client) { c.namespace = ns } }

// NamespaceHeader names the namespace a request acts in.
const NamespaceHeader = "X-Corvo-Namespace"

// NamespaceEnv is the environment variable the CLI, corvo top and corvo
// bench read the namespace from.
const NamespaceEnv = "CORVO_NAMESPACE"

// ClusterSecretHeader is the header that carries the cluster secret.
const ClusterSecretHeader = "X-Corvo-Cluster-Secret"

// WithoutEnqueueCoalescing makes every Enqueue its own request. By
// default, Enqueue calls made while another is in flight are sent
// together as the next POST /api/v1/enqueue/batch (see Client.Enqueue).
func WithoutEnqueueCoalescing() Option { return func(c *Client) { c.noCoalesce = true } }

// WithHTTPClient replaces the default http.Client.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTLSConfig makes the client reach https:// servers with tc: a
// RootCAs pool holding the CA of servers whose certificates no system CA
// issued (see TLSConfigFromCA), a client certificate. It applies to the
// default http.Client or to one given with WithHTTPClient whose Transport
// is an *http.Transport (or nil); a client with another RoundTripper keeps
// its own TLS settings.
func WithTLSConfig(tc *tls.Config) Option { return func(c *Client) { c.tls = tc } }

// TLSConfigFromCA is a TLS config that trusts the certificates in the PEM
// file caFile (and only them), for WithTLSConfig.
func TLSConfigFromCA(caFile string) (*tls.Config, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("corvo: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("corvo: CA file %s holds no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// PeerALPN is the application protocol a node-to-node TLS handshake
// offers. A server with mutual TLS between nodes (--peer-tls-*) answers
// such a handshake with its node certificate and requires the caller's,
// issued by the peer CA: the node-to-node routes an operator calls (node
// removal, RemoveNode) take a caller only through it. PeerTLSConfig sets
// it.
const PeerALPN = "corvo-peer"

// PeerTLSConfig is a TLS config for the node-to-node routes of a cluster
// with mutual TLS between nodes, for WithTLSConfig: it presents the node
// certificate in certFile with its key in keyFile (one issued by the
// cluster's peer CA, for client authentication), offers PeerALPN, and
// verifies the node's certificate against the CA certificates in caFile
// (the peer CA; "" trusts the system's roots). RemoveNode needs it, with
// WithClusterSecret, on such a cluster.
func PeerTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("corvo: node certificate %s with key %s: %w", certFile, keyFile, err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		if tc, err = TLSConfigFromCA(caFile); err != nil {
			return nil, err
		}
	}
	tc.Certificates = []tls.Certificate{pair}
	tc.NextProtos = []string{PeerALPN}
	return tc, nil
}

// New returns a client for the server at baseURL (e.g.
// http://localhost:8080). baseURL may list several nodes of a cluster,
// comma-separated; see also Discover.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		nodes:      splitNodes(baseURL),
		http:       &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}},
		MaxRetries: 5,
	}
	for _, o := range opts {
		o(c)
	}
	if c.tls != nil {
		t, ok := c.http.Transport.(*http.Transport)
		if c.http.Transport == nil {
			t, ok = http.DefaultTransport.(*http.Transport)
		}
		if ok {
			t = t.Clone()
			t.TLSClientConfig = c.tls
			h := *c.http
			h.Transport = t
			c.http = &h
		}
	}
	return c
}

func splitNodes(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// Nodes lists the base URLs the client uses, the current one first.
func (c *Client) Nodes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	at := int(c.cur.Load()) % len(c.nodes)
	return append(append([]string(nil), c.nodes[at:]...), c.nodes[:at]...)
}

// base is the node requests go to now.
func (c *Client) base() (string, uint32) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	at := c.cur.Load()
	return c.nodes[int(at)%len(c.nodes)], at
}

// failover moves to the next node unless another request already did.
func (c *Client) failover(from uint32) {
	c.cur.CompareAndSwap(from, from+1)
}

// Discover asks the cluster for its members (GET /api/v1/cluster/status)
// and from then on spreads over every node that is up, so the client
// survives the loss of the node it was given. It also takes the cluster's
// placement from the same answer (see WithoutPlacement), so that routing
// starts with the next request.
func (c *Client) Discover(ctx context.Context) error {
	var st ClusterStatus
	if _, err := c.do(ctx, "GET", "/api/v1/cluster/status", nil, &st); err != nil {
		return err
	}
	cur, _ := c.base()
	scheme := "http://"
	if strings.HasPrefix(cur, "https://") {
		scheme = "https://"
	}
	nodes := []string{cur}
	for _, n := range st.Nodes {
		if u := scheme + n.HTTPAddress; n.HTTPAddress != "" && n.Status == "up" && u != cur {
			nodes = append(nodes, u)
		}
	}
	c.mu.Lock()
	c.nodes = nodes
	c.cur.Store(0)
	c.mu.Unlock()
	if c.place.off.Load() {
		return nil
	}
	c.place.started.Store(true)
	return c.loadPlacement(ctx, &st)
}

// do sends a JSON request; out (if not nil) receives a 2xx JSON answer. It
// retries 429 and 503 answers after their Retry-After delay, and connection
// failures (a node going away behind a load balancer) with a short backoff.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	body, err := marshalBody(in)
	if err != nil {
		return 0, err
	}
	return c.doBody(ctx, method, path, body, out)
}

// marshalBody encodes a request body (nil: none).
func marshalBody(in any) ([]byte, error) {
	if in == nil {
		return nil, nil
	}
	return json.Marshal(in)
}

// doBody is do with the request body encoded already (nil: none).
func (c *Client) doBody(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	for attempt := 0; ; attempt++ {
		base, at := c.base()
		status, err := c.once(ctx, method, base+path, body, out)
		if err == nil {
			return status, nil
		}
		var ae *Error
		// A spent budget stays spent until UTC midnight: not retried.
		retryable := errors.As(err, &ae) && (ae.Status == 429 || ae.Status == 503) && ae.Code != CodeBudgetExceeded
		wait := 50 * time.Millisecond << min(attempt, 5)
		if retryable && ae.RetryAfter > 0 {
			wait = ae.RetryAfter
		}
		if retryable && ae.Code == CodeShuttingDown {
			c.failover(at) // this node is stopping; another one answers at once
			wait = 0
		}
		var ue *url.Error
		if errors.As(err, &ue) && !ue.Timeout() && ctx.Err() == nil {
			retryable = true // connection refused / reset: another node may answer
			c.failover(at)
			if len(c.Nodes()) > 1 && attempt < len(c.Nodes()) {
				wait = 0
			}
		}
		if !retryable || attempt >= c.MaxRetries {
			return status, err
		}
		select {
		case <-ctx.Done():
			return status, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// authorize adds the API key and the namespace, if the client has them.
func (c *Client) authorize(req *http.Request) {
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.namespace != "" {
		req.Header.Set(NamespaceHeader, c.namespace)
	}
}

func (c *Client) once(ctx context.Context, method, target string, body []byte, out any) (int, error) {
	status, data, err := c.roundTrip(ctx, method, target, body)
	if err != nil {
		return status, err
	}
	if out != nil && status != http.StatusNoContent && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return status, fmt.Errorf("corvo: decode %s %s: %w", method, target, err)
		}
	}
	return status, nil
}

// roundTrip sends one request and reads the answer: an error answer
// (status >= 400) is an *Error, and data still holds its body.
func (c *Client) roundTrip(ctx context.Context, method, target string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil || method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json") // the server wants it even without a body
	}
	if c.clusterSecret != "" && strings.Contains(req.URL.Path, "/api/v1/cluster/nodes/") {
		req.Header.Set(ClusterSecretHeader, c.clusterSecret)
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.Header.Get(ForwardedHeader) != "" && c.place.cur.Load() != nil {
		c.refreshPlacement() // routed to a node that does not host it
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if resp.StatusCode >= 400 {
		e := &Error{Status: resp.StatusCode, body: data}
		var eb ErrorBody
		if json.Unmarshal(data, &eb) == nil {
			e.Code, e.Message = eb.Code, eb.Error
		} else {
			e.Message = strings.TrimSpace(string(data))
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if secs, err := strconv.ParseFloat(ra, 64); err == nil {
				e.RetryAfter = time.Duration(secs * float64(time.Second))
			}
		}
		return resp.StatusCode, data, e
	}
	return resp.StatusCode, data, nil
}
