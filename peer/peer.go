// Package peer is Corvo's node-to-node layer: which nodes host a shard
// (the one target list), forwarding a request to one of them, remote
// propose and read through the internal shard endpoints, the cross-node
// halves of fetch, search and the event stream (which node is asked for
// which shards, the calls, their retries and fail-over: fetchrounds.go,
// searchplan.go, upstreams.go), liveness probing and leadership
// spreading, and the cluster credential every node-to-node endpoint
// requires. The gateway keeps the one route table, the local halves and
// the merging; it calls a Client for everything that crosses to another
// node and registers the Handlers peer provides. peer never imports the
// gateway.
package peer

import (
	corvo "github.com/corvohq/corvo/sdk/go"

	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/shard"
)

// Headers of node-to-node requests.
const (
	// HopHeader marks a request one node sent another: its receiver never
	// forwards it again, so loops are impossible.
	HopHeader = "X-Corvo-Forwarded"
	// NotHostedHeader marks a 503 from a node that does not host the shard
	// asked for: nothing was done there, another node may be tried.
	NotHostedHeader = "X-Corvo-Not-Hosted"
	// TimeoutHeader is how long (ms) the caller will wait for the answer;
	// the receiver's proposal gives up by then.
	TimeoutHeader = "X-Corvo-Timeout-Ms"
)

// ProbeInterval is how often each node checks the others' /healthz.
const ProbeInterval = time.Second

// RequestTimeoutDefault is Config.RequestTimeout's default (the gateway's).
const RequestTimeoutDefault = 15 * time.Second

// Membership is what the peer layer needs from the shard layer
// (*shard.Host): who this node is, the cluster's nodes and placement, and
// the leadership moves it drives.
type Membership interface {
	NodeID() uint64
	Meta() (shard.MetaState, error)
	BalanceLeaders(p shard.Peers) bool
	HandOff(ctx context.Context, p shard.Peers) int
}

// Config configures a Client.
type Config struct {
	// Secret is the cluster credential (see auth.go). Empty: the
	// node-to-node endpoints refuse everyone.
	Secret string
	// TLS, when set, is the client side of node-to-node calls: they go to
	// https:// addresses with it (the other nodes verified against its
	// roots, this node's certificate presented when it has one).
	TLS *tls.Config
	// PeerCerts: node-to-node endpoints also require the caller's client
	// certificate, verified by this node's TLS listener (mutual TLS
	// between nodes; see auth.go).
	PeerCerts bool
	// RequestTimeout bounds a remote propose, read or forwarded request.
	RequestTimeout time.Duration
	// Targets, when set, lists the HTTP addresses hosting a shard in
	// place of the placement (tests; called concurrently).
	Targets func(shard int) []string
	Logger  zerolog.Logger
}

// Error is a failure with the answer a handler would give for it: the
// status and code of the JSON error, as the node that failed gave them
// when it was another node's answer.
type Error struct {
	Status int
	Code   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func unavailable(msg string) *Error {
	return &Error{Status: 503, Code: corvo.CodeUnavailable, Msg: msg}
}

// Client reaches the other nodes of the cluster.
type Client struct {
	cfg     Config
	log     zerolog.Logger
	members atomic.Pointer[membership] // nil until Start

	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient
	next    atomic.Uint64 // round robin over targets

	small  *fasthttp.Client // probes and one-off calls
	events *http.Client     // event streams
	waits  *http.Client     // waits on other nodes' queues (wait.go)
	scheme string           // "http://" or "https://"

	pmu  sync.Mutex
	seen map[uint64]time.Time // last good /healthz
	led  map[uint64]int       // data shards each node said it leads, then
	// replicas: what each node said of its replica of each data shard,
	// then (the leader it hears, its applied index)
	replicas map[uint64]replicaViews

	// idle: the fetch groups whose last claim found nothing
	// (fetchrounds.go); a fetch waits on them before claiming.
	idle idleGroups

	stop     chan struct{}
	stopOnce sync.Once
	loop     sync.WaitGroup
}

type membership struct{ Membership }

// New builds a client. It knows no other node until Start.
func New(cfg Config) *Client {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = RequestTimeoutDefault
	}
	c := &Client{
		cfg: cfg,
		log: cfg.Logger.With().Str("component", "peer").Logger(),
		small: &fasthttp.Client{
			Name:                "corvo-peer",
			ReadTimeout:         2 * time.Second,
			WriteTimeout:        2 * time.Second,
			MaxIdleConnDuration: time.Minute,
			TLSConfig:           cfg.TLS,
		},
		events:   newEventsClient(cfg.TLS),
		waits:    newWaitClient(cfg.TLS),
		scheme:   "http://",
		seen:     map[uint64]time.Time{},
		led:      map[uint64]int{},
		replicas: map[uint64]replicaViews{},
		stop:     make(chan struct{}),
	}
	if cfg.TLS != nil {
		c.scheme = "https://"
	}
	return c
}

// URL is the URL of path on the node at addr (host:port), with the scheme
// node-to-node calls use.
func (c *Client) URL(addr, path string) string { return c.scheme + addr + path }

// Start gives the client the cluster's membership, once the shard layer
// that holds it is open, and starts probing the other nodes and spreading
// shard leaderships over the live ones until Close.
func (c *Client) Start(m Membership) {
	if !c.members.CompareAndSwap(nil, &membership{m}) {
		panic("peer: Start called twice")
	}
	c.loop.Add(1)
	go c.run()
}

// Close stops the probing loop.
func (c *Client) Close() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.loop.Wait()
}

// RequestTimeout is how long a remote call may take.
func (c *Client) RequestTimeout() time.Duration { return c.cfg.RequestTimeout }

// host is the keep-alive connection pool to one node.
func (c *Client) host(addr string) *fasthttp.HostClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clients == nil {
		c.clients = map[string]*fasthttp.HostClient{}
	}
	h := c.clients[addr]
	if h == nil {
		h = &fasthttp.HostClient{Addr: addr, Name: "corvo-forward", MaxConns: 1024,
			MaxIdleConnDuration: time.Minute, DisablePathNormalizing: true,
			IsTLS: c.cfg.TLS != nil, TLSConfig: c.cfg.TLS}
		c.clients[addr] = h
	}
	return h
}

// Next is a round-robin counter, for callers that rotate over their own
// sources.
func (c *Client) Next() uint64 { return c.next.Add(1) }

// Targets lists the HTTP addresses of the other nodes that host shard sh,
// in the order to try them: Config.Targets when set, as given; else the
// nodes the placement puts sh on, those answering their health probe
// first, rotated so the load spreads, then the others (a caller skips
// those it cannot reach).
func (c *Client) Targets(sh int) []string {
	if c.cfg.Targets != nil {
		return c.cfg.Targets(sh)
	}
	m := c.members.Load()
	if m == nil {
		return nil
	}
	st, err := m.Meta()
	if err != nil {
		return nil
	}
	self := m.NodeID()
	var up, down []string
	for _, id := range st.NodesOf(sh) {
		n := st.Nodes[id]
		if id == self || n == nil || n.HTTPAddr == "" {
			continue
		}
		if c.Alive(id) {
			up = append(up, n.HTTPAddr)
		} else {
			down = append(down, n.HTTPAddr)
		}
	}
	if len(up) > 1 {
		k := int(c.next.Add(1) % uint64(len(up)))
		up = append(up[k:], up[:k]...)
	}
	return append(up, down...)
}

// others lists the other live nodes with an HTTP address.
func (c *Client) others() []shard.Node {
	m := c.members.Load()
	if m == nil {
		return nil
	}
	st, err := m.Meta()
	if err != nil {
		return nil
	}
	var out []shard.Node
	for _, n := range st.Live() {
		if n.ID != m.NodeID() && n.HTTPAddr != "" {
			out = append(out, n)
		}
	}
	return out
}

// Alive reports whether node id (this one always) answered its health
// probe within the last three probes.
func (c *Client) Alive(id uint64) bool {
	if m := c.members.Load(); m != nil && id == m.NodeID() {
		return true
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	t, ok := c.seen[id]
	return ok && time.Since(t) < 3*ProbeInterval+time.Second
}

// Leads is how many data shards node id leads, as its last /healthz said
// (ok false when it is not alive or did not say).
func (c *Client) Leads(id uint64) (int, bool) {
	if !c.Alive(id) {
		return 0, false
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	n, ok := c.led[id]
	return n, ok
}

// replicaViews is what a node's /healthz said of its replicas, by data
// shard: the leader each hears and its applied index.
type replicaViews struct{ leaders, applied []uint64 }

// Replica is what node's replica of data shard i said at the last probe
// (shard.Peers): the leader it hears (0: none, or not hosted) and its
// applied index; known is false when the node did not say (an older
// version, or no answer yet).
func (c *Client) Replica(node uint64, i int) (leader, applied uint64, known bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	v, ok := c.replicas[node]
	if !ok || i < 0 {
		return 0, 0, false
	}
	if i >= len(v.leaders) {
		return 0, 0, true
	}
	return v.leaders[i], v.applied[i], true
}

// probe checks every other live node's /healthz in parallel, and notes
// how many shards each leads.
func (c *Client) probe(nodes []shard.Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func(n shard.Node) {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(c.URL(n.HTTPAddr, "/healthz"))
			err := c.small.DoTimeout(req, resp, time.Second)
			c.pmu.Lock()
			defer c.pmu.Unlock()
			if err == nil && resp.StatusCode() == 200 {
				c.seen[n.ID] = time.Now()
				var h struct {
					Led     *int     `json:"shards_led"`
					Leaders []uint64 `json:"leaders"`
					Applied []uint64 `json:"applied"`
				}
				ok := json.Unmarshal(resp.Body(), &h) == nil
				if ok && h.Led != nil {
					c.led[n.ID] = *h.Led
				} else {
					delete(c.led, n.ID)
				}
				if ok && h.Leaders != nil && len(h.Applied) == len(h.Leaders) {
					c.replicas[n.ID] = replicaViews{leaders: h.Leaders, applied: h.Applied}
				} else {
					delete(c.replicas, n.ID)
				}
			}
		}(n)
	}
	wg.Wait()
}

// run probes the other nodes and spreads leaderships over the live ones,
// until Close.
func (c *Client) run() {
	defer c.loop.Done()
	t := time.NewTicker(ProbeInterval)
	defer t.Stop()
	m := c.members.Load()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		st, err := m.Meta()
		if err != nil {
			continue
		}
		live := st.Live()
		if len(live) < 2 {
			continue
		}
		c.probe(c.others())
		m.BalanceLeaders(c)
	}
}

// HandOff moves this node's leaderships to live nodes before it stops
// (graceful shutdown), waiting at most until ctx ends; it returns how many
// moved.
func (c *Client) HandOff(ctx context.Context) int {
	m := c.members.Load()
	if m == nil {
		return 0
	}
	if others := c.others(); len(others) > 0 {
		c.probe(others)
	}
	return m.HandOff(ctx, c)
}

// DialFailed reports whether a call failed before any connection was made,
// so nothing was sent: another node may be tried even for a write.
func DialFailed(err error) bool {
	var op *net.OpError
	return errors.Is(err, fasthttp.ErrDialTimeout) || (errors.As(err, &op) && op.Op == "dial")
}

// errNoTarget: no node that may host the shard answered.
var errNoTarget = errors.New("no node hosting the shard answered")

// Forwarded reports whether a request came from another node (it carries
// the hop header): it is never sent on again.
func Forwarded(ctx *fasthttp.RequestCtx) bool {
	return len(ctx.Request.Header.Peek(HopHeader)) > 0
}
