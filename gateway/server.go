// Package gateway is Corvo's HTTP front door (fasthttp + fasthttp/router):
// every route, JSON in and out, errors, metrics. It validates and stamps
// requests, routes them to shards and renders results; lifecycle rules live
// in the state machine.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	frouter "github.com/fasthttp/router"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/history"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// Engine is what the gateway needs from the shard layer.
type Engine interface {
	Shards() int
	Propose(ctx context.Context, shard int, ops ...statemachine.Op) ([]statemachine.Result, error)
	Read(shard int, query interface{}) (interface{}, error)
	Fetchable(queue string) bool
	// Reserve takes up to n of the pending jobs of queues (one shard's)
	// that no claim in flight from this node reserved, for a claim of
	// Reservation.N jobs; Release returns it when the claim answers (wake:
	// it failed or got jobs, so parked long-polls may look again).
	Reserve(queues []string, n int) shard.Reservation
	Release(r shard.Reservation, wake bool)
	ThrottledUntil(queue string) int64
	Watch(queue string) <-chan struct{}
	Head(queue string) statemachine.QueueHead
	IsLeader(shard int) bool
	// Replica is the node this node's replica of the shard hears as its
	// leader (0: none known, or not hosted) and its applied index.
	Replica(shard int) (leader, applied uint64)
	// Hosts reports whether this node hosts a replica of the shard; a
	// request for one it does not host goes to a node that does.
	Hosts(shard int) bool
	// Park leaves a fetch at a shard's proposer to ride in the next entry
	// that enqueues into its queues; Unpark withdraws it (false: too late,
	// its result will arrive).
	Park(shard int, op *statemachine.FetchOp, g *shard.ParkGroup) *shard.Parked
	Unpark(shard int, pk *shard.Parked) bool
}

// Config configures the gateway. New fills unset fields (WithDefaults) and
// refuses a config that fails Validate.
type Config struct {
	MaxPayloadBytes int // largest job payload (413 above); default MaxPayloadDefault
	MaxBatchJobs    int // most jobs per batch enqueue, ack or heartbeat; default MaxBatchJobsDefault
	// MaxBodyBytes is the largest request body (413 above); default
	// MaxBodyBytesDefault, raised to MaxPayloadBytes+BodyOverheadBytes
	// when that is larger. It may not be below MaxPayloadBytes.
	MaxBodyBytes int
	// MaxRestoreBytes is the largest backup POST /api/v1/restore takes
	// (held in memory while it is restored); default
	// MaxRestoreBytesDefault, never below MaxBodyBytes.
	MaxRestoreBytes int
	// RequestTimeout bounds how long a write waits for Raft and a call to
	// another node waits for its answer; default RequestTimeoutDefault.
	RequestTimeout time.Duration
	Logger         zerolog.Logger
	Mirror         Mirror // search; nil: search answers 503
	// History records the queues' rates, counts and latency on this node
	// (history.Recorder, fed by the shard host's Updates); the gateway
	// samples it every 10 s and serves it. nil: no history, latency null.
	History *history.Recorder
	// OnRemoved is called when another member says this node was removed
	// from the cluster; the server should shut down.
	OnRemoved func()
	Events    Events // the event stream; nil: GET /events answers 503
	// EventsKeepalive is how often an idle event stream gets a keepalive
	// comment; default EventsKeepaliveDefault.
	EventsKeepalive time.Duration
	// Peer reaches the other nodes (shards hosted elsewhere, the
	// cross-node halves of fetch, search and events) and holds the
	// cluster credential the node-to-node routes require. nil: a client
	// that knows no other node and refuses every node-to-node call.
	Peer *peer.Client
	// Cluster adds the cluster routes (join, node removal, status); nil:
	// none.
	Cluster Cluster
	// CORSOrigins lists the browser origins (scheme://host[:port], or "*"
	// for any) allowed to call the API from another origin: they get
	// preflight answers and Access-Control-Allow-Origin. Every other
	// cross-origin request to a state-changing route is refused (403
	// cross_origin).
	CORSOrigins []string
	// StrictLeases: ack, fail and heartbeat must name the lease's attempt
	// (400 lease_required otherwise), so a caller that does not hold the
	// job cannot complete it or extend its lease by omitting it.
	StrictLeases bool
	// SearchWait bounds how long a search (or a bulk by filter) waits for
	// the mirror to hold every write this node answered before it began
	// (read your writes); past it the search answers "stale": true.
	// Default SearchWaitDefault; negative: never wait.
	SearchWait time.Duration
	// ReadTimeout is the deadline of a search, list or job read, counted
	// from its arrival (readpool.go): a search it cuts answers the
	// matches found so far ("partial": true). Default ReadTimeoutDefault.
	ReadTimeout time.Duration
	// ReadConcurrency is how many reads run at once; ReadQueue how many
	// more wait for one of them (429 reads_busy beyond). Defaults
	// ReadConcurrencyDefault, ReadQueueDefault.
	ReadConcurrency, ReadQueue int
	// Auth says whether the API needs keys (authn.go). AuthRequired
	// without Keys admits no one.
	Auth AuthMode
	// Keys is the replicated key table; nil: no key is ever valid.
	Keys Keys
	// KeyTouchInterval is how often last-used times of keys are recorded;
	// default KeyTouchIntervalDefault.
	KeyTouchInterval time.Duration
	// ProviderRebalance is how often the node leading shard 0 rebalances
	// providers' shares by demand (providershare.go); default
	// ProviderRebalanceDefault; negative: never (each member keeps the
	// equal split).
	ProviderRebalance time.Duration
	// SessionKey signs the web UI's session tokens (session.go); the node
	// derives it from the cluster secret (SessionKeyFrom). Empty: a key
	// made for this process.
	SessionKey []byte
	// RateRead and RateWrite are each key's requests a second on this
	// node (ratelimit.go); defaults RateReadDefault, RateWriteDefault;
	// negative: unlimited.
	RateRead, RateWrite int
	// AuditAll also records the hot path (enqueue, fetch, ack, fail,
	// heartbeat) in the audit log: one more Raft write per call. Off:
	// only management calls are recorded (the audit table, permissions.go).
	AuditAll bool
	// OIDC is single sign-on for the web UI (oidc.go); an empty Issuer
	// turns it off.
	OIDC OIDCConfig
	// FreeDisk reports the free space of the volume holding the node's
	// data (the node gives a statfs of its data dir; tests their own) for
	// the free-disk guard and /metrics (disk.go). nil: neither.
	FreeDisk DiskProbe
	// MinFreeDisk is the free space below which writes that add data
	// answer 507 insufficient_storage (disk.go); zero: no floor.
	MinFreeDisk DiskFloor
	// DiskCheckInterval is how often FreeDisk is asked at most; default
	// DiskCheckIntervalDefault; negative: on every write that adds data.
	DiskCheckInterval time.Duration
	// Memory accounts request bodies against the node's memory budget
	// (memory.go): a write whose body does not fit is answered 429
	// overloaded with Retry-After before its body is read. nil: bodies are
	// bounded only by MaxBodyBytes each.
	Memory *membudget.Account
	// BudgetRefresh is how old the view of the budgets' spend may grow
	// before an enqueue reads every shard's again (budget.go); default
	// BudgetRefreshDefault; negative: only when this node saw a cost
	// reported or a budget changed, or the UTC day changed.
	BudgetRefresh time.Duration
}

// Defaults of Config (MaxPayloadDefault and MaxBatchJobsDefault are with
// the request limits, EventsKeepaliveDefault with the event stream's).
const (
	MaxBodyBytesDefault    = 64 << 20
	MaxRestoreBytesDefault = 1 << 30
	RequestTimeoutDefault  = 15 * time.Second
	SearchWaitDefault      = 2 * time.Second
	ReadTimeoutDefault     = time.Second
	ReadConcurrencyDefault = 8
	ReadQueueDefault       = 256
	// MaxHeaderBytes bounds a request's line and headers together (431
	// headers_too_large above).
	MaxHeaderBytes = 8 << 10
	// BodyOverheadBytes is what a request body may hold beyond the largest
	// payload (the job's other fields) when MaxBodyBytes is defaulted.
	BodyOverheadBytes = 64 << 10
)

// Mirror is what the gateway needs from the per-node SQLite view.
type Mirror interface {
	Search(ctx context.Context, f mirror.Filter) (*mirror.Page, error)
	RequestRebuild()
	Lag() []int64
	// Mark and WaitFor: read your writes (mirror.Mirror.Mark).
	Mark() []uint64
	WaitFor(ctx context.Context, mark []uint64) error
	SaveBulk(ctx context.Context, r *mirror.BulkRecord) error
	GetBulk(ctx context.Context, id string) (*mirror.BulkRecord, error)
	ListBulk(ctx context.Context, limit int, ns string) ([]mirror.BulkRecord, error)
	InterruptBulk(ctx context.Context, at int64) (int64, error)
	UsageSummary(ctx context.Context, f mirror.UsageFilter) (*mirror.UsageSummary, error)
	ScoreSummary(ctx context.Context, f mirror.ScoreFilter) ([]mirror.ScoreGroup, error)
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	setDefault(&c.MaxPayloadBytes, MaxPayloadDefault)
	setDefault(&c.MaxBatchJobs, MaxBatchJobsDefault)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = max(MaxBodyBytesDefault, c.MaxPayloadBytes+BodyOverheadBytes)
	}
	if c.MaxRestoreBytes == 0 {
		c.MaxRestoreBytes = MaxRestoreBytesDefault
	}
	c.MaxRestoreBytes = max(c.MaxRestoreBytes, c.MaxBodyBytes)
	setDefault(&c.RequestTimeout, RequestTimeoutDefault)
	setDefault(&c.EventsKeepalive, EventsKeepaliveDefault)
	setDefault(&c.SearchWait, SearchWaitDefault)
	setDefault(&c.ReadTimeout, ReadTimeoutDefault)
	setDefault(&c.ReadConcurrency, ReadConcurrencyDefault)
	setDefault(&c.ReadQueue, ReadQueueDefault)
	setDefault(&c.KeyTouchInterval, KeyTouchIntervalDefault)
	setDefault(&c.ProviderRebalance, ProviderRebalanceDefault)
	setDefault(&c.RateRead, RateReadDefault)
	setDefault(&c.RateWrite, RateWriteDefault)
	setDefault(&c.DiskCheckInterval, DiskCheckIntervalDefault)
	setDefault(&c.BudgetRefresh, BudgetRefreshDefault)
	return c
}

// setDefault sets *v to d when *v is the zero value.
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate checks a defaulted config and the rules between its fields.
func (c Config) Validate() error {
	switch {
	case c.MaxPayloadBytes < 1:
		return fmt.Errorf("max payload bytes must be positive, got %d", c.MaxPayloadBytes)
	case c.MaxBatchJobs < 1:
		return fmt.Errorf("max batch jobs must be positive, got %d", c.MaxBatchJobs)
	case c.MaxBodyBytes < c.MaxPayloadBytes:
		return fmt.Errorf("max body bytes (%d) must be at least max payload bytes (%d)", c.MaxBodyBytes, c.MaxPayloadBytes)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request timeout must be positive, got %s", c.RequestTimeout)
	case c.EventsKeepalive <= 0:
		return fmt.Errorf("events keepalive must be positive, got %s", c.EventsKeepalive)
	case c.ReadTimeout <= 0:
		return fmt.Errorf("read timeout must be positive, got %s", c.ReadTimeout)
	case c.ReadConcurrency < 1:
		return fmt.Errorf("read concurrency must be positive, got %d", c.ReadConcurrency)
	case c.ReadQueue < 0:
		return fmt.Errorf("read queue must not be negative, got %d", c.ReadQueue)
	case c.Auth < AuthOpen || c.Auth > AuthOff:
		return fmt.Errorf("unknown auth mode %d", c.Auth)
	case c.KeyTouchInterval <= 0:
		return fmt.Errorf("key touch interval must be positive, got %s", c.KeyTouchInterval)
	case c.MinFreeDisk.Percent < 0 || c.MinFreeDisk.Percent >= 100:
		return fmt.Errorf("min free disk percentage must be 0 to below 100, got %g", c.MinFreeDisk.Percent)
	}
	if err := CheckCORSOrigins(c.CORSOrigins); err != nil {
		return fmt.Errorf("cors origins: %w", err)
	}
	if err := c.OIDC.Validate(); err != nil {
		return err
	}
	return nil
}

// Server serves the HTTP API.
type Server struct {
	cfg    Config
	eng    Engine
	rt     *router.Router
	log    zerolog.Logger
	srv    *fasthttp.Server
	closed chan struct{}
	once   sync.Once

	queueMetrics sync.Map // queue → *queueCounters
	rates        throughput

	ln          atomic.Pointer[trackingListener]
	cluster     Cluster // nil when the engine is not clustered
	peer        *peer.Client
	subscribers atomic.Int64 // open event streams
	bulk        *bulkRunner
	cors        corsPolicy
	touched     keyUse      // keys seen since the last touch (authn.go)
	sso         *sso        // single sign-on; nil when off (oidc.go)
	limits      rateLimits  // per-key token buckets (ratelimit.go)
	disk        *diskGuard  // the free-disk guard; nil: none (disk.go)
	bodies      *bodyLedger // request bodies against the memory budget; nil: none

	sessionOnce   sync.Once
	sessionSecret []byte
	// unidentified limits the audit records of refused calls from
	// unidentified callers (audit.go).
	unidentified bucket
	routes       []string // "METHOD pattern" of every route, as registered

	reads *readPool // searches, lists and job reads (readpool.go)
	clock clock     // the read deadlines' time

	budgetView budgetView    // budget.go
	budgetGen  atomic.Uint64 // budget changes made through this node
}

// New builds a server over an engine. It panics when cfg.WithDefaults()
// fails Validate: callers check their config first (node.Open does).
func New(cfg Config, eng Engine) *Server {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		panic("gateway.New: " + err.Error())
	}
	s := &Server{
		cfg:    cfg,
		eng:    eng,
		rt:     router.New(eng.Shards()),
		log:    cfg.Logger.With().Str("component", "gateway").Logger(),
		closed: make(chan struct{}),
		bulk:   newBulkRunner(),
		cors:   newCORSPolicy(cfg.CORSOrigins),
		peer:   cfg.Peer,
		reads:  newReadPool(cfg.ReadConcurrency, cfg.ReadQueue),
		clock:  wallClock{},
		disk:   newDiskGuard(cfg),
	}
	if s.peer == nil {
		s.peer = peer.New(peer.Config{RequestTimeout: cfg.RequestTimeout, Logger: cfg.Logger})
	}
	if cfg.OIDC.Enabled() {
		s.sso = newSSO(cfg.OIDC, cfg.RequestTimeout, s.log)
	}
	s.interruptLeftovers()
	r := frouter.New()
	r.RedirectTrailingSlash = false
	s.route(r, "POST", "/api/v1/enqueue", s.handleEnqueue)
	s.route(r, "POST", "/api/v1/enqueue/batch", s.handleEnqueueBatch)
	s.route(r, "POST", "/api/v1/fetch", s.handleFetch)
	s.route(r, "POST", "/api/v1/ack/batch", s.handleAckBatch)
	s.route(r, "POST", "/api/v1/ack/{id}", s.handleAck)
	s.route(r, "POST", "/api/v1/fail/{id}", s.handleFail)
	s.route(r, "POST", "/api/v1/unclaim/{id}", s.handleUnclaim)
	s.route(r, "POST", "/api/v1/heartbeat", s.handleHeartbeat)
	s.route(r, "GET", "/api/v1/jobs/{id}", s.handleGetJob)
	s.route(r, "POST", "/api/v1/jobs/{id}/cancel", s.handleCancel)
	s.route(r, "POST", "/api/v1/jobs/{id}/retry", s.handleRetry)
	s.route(r, "POST", "/api/v1/jobs/{id}/move", s.handleMove)
	s.route(r, "POST", "/api/v1/jobs/{id}/approve", s.handleRelease(true))
	s.route(r, "POST", "/api/v1/jobs/{id}/reject", s.handleRelease(false))
	s.route(r, "DELETE", "/api/v1/jobs/{id}", s.handleDelete)
	s.route(r, "GET", "/api/v1/queues", s.handleListQueues)
	s.route(r, "GET", "/api/v1/queues/history", s.handleQueueHistory)
	s.route(r, "POST", "/api/v1/queues/{name}/pause", s.handlePause(true))
	s.route(r, "POST", "/api/v1/queues/{name}/resume", s.handlePause(false))
	s.route(r, "POST", "/api/v1/queues/{name}/concurrency", s.handleConcurrency)
	s.route(r, "POST", "/api/v1/queues/{name}/clear", s.handleClear)
	s.route(r, "POST", "/api/v1/queues/{name}/drain", s.handleDrain)
	s.route(r, "DELETE", "/api/v1/queues/{name}", s.handleDeleteQueue)
	s.route(r, "POST", "/api/v1/queues/{name}/throttle", s.handleThrottle)
	s.route(r, "DELETE", "/api/v1/queues/{name}/throttle", s.handleThrottle)
	s.route(r, "GET", "/api/v1/workers", s.handleWorkers)
	s.route(r, "GET", "/api/v1/dead", s.handleDead)
	s.route(r, "POST", "/api/v1/jobs/search", s.handleSearch)
	s.route(r, "GET", "/api/v1/usage/summary", s.handleUsageSummary)
	s.route(r, "POST", "/api/v1/jobs/{id}/score", s.handleScore)
	s.route(r, "GET", "/api/v1/scores/summary", s.handleScores(false))
	s.route(r, "GET", "/api/v1/scores/compare", s.handleScores(true))
	s.route(r, "GET", "/api/v1/budgets", s.handleListBudgets)
	s.route(r, "PUT", "/api/v1/budgets", s.handleSetBudget)
	s.route(r, "POST", "/api/v1/budgets", s.handleSetBudget)
	s.route(r, "DELETE", "/api/v1/budgets/{scope}", s.handleDeleteBudget)
	s.route(r, "GET", "/api/v1/providers", s.handleListProviders)
	s.route(r, "PUT", "/api/v1/providers", s.handleSetProvider)
	s.route(r, "POST", "/api/v1/providers", s.handleSetProvider)
	s.route(r, "DELETE", "/api/v1/providers/{name}", s.handleDeleteProvider)
	s.route(r, "POST", "/api/v1/queues/{name}/provider", s.handleQueueProvider)
	s.route(r, "DELETE", "/api/v1/queues/{name}/provider", s.handleQueueProvider)
	s.route(r, "POST", "/api/v1/jobs/bulk", s.handleBulk)
	s.route(r, "POST", "/api/v1/admin/rebuild-mirror", s.handleRebuildMirror)
	s.route(r, "GET", "/api/v1/events", s.handleEvents)
	s.route(r, "GET", "/api/v1/bulk", s.handleListBulk)
	s.route(r, "GET", "/api/v1/bulk/{id}", s.handleGetBulk)
	s.route(r, "DELETE", "/api/v1/bulk/{id}", s.handleCancelBulk)
	s.route(r, "GET", "/api/v1/bulk/{id}/progress", s.handleBulkProgress)
	s.route(r, "GET", "/api/v1/batches/{id}", s.handleGetBatch)
	s.route(r, "GET", "/api/v1/schedules", s.handleListSchedules)
	s.route(r, "POST", "/api/v1/schedules", s.handlePutSchedule)
	s.route(r, "PUT", "/api/v1/schedules/{id}", s.handlePutSchedule)
	s.route(r, "DELETE", "/api/v1/schedules/{id}", s.handleDeleteSchedule)
	s.route(r, "POST", "/api/v1/schedules/{id}/pause", s.handlePauseSchedule(true))
	s.route(r, "POST", "/api/v1/schedules/{id}/resume", s.handlePauseSchedule(false))
	s.route(r, "POST", "/api/v1/schedules/{id}/run", s.handleRunSchedule)
	s.route(r, "GET", "/api/v1/audit", s.handleAudit)
	s.route(r, "GET", "/api/v1/auth/keys", s.handleListKeys)
	s.route(r, "POST", "/api/v1/auth/keys", s.handleCreateKey)
	s.route(r, "GET", "/api/v1/auth/keys/{id}", s.handleGetKey)
	s.route(r, "PATCH", "/api/v1/auth/keys/{id}", s.handleUpdateKey)
	s.route(r, "DELETE", "/api/v1/auth/keys/{id}", s.handleRevokeKey)
	s.route(r, "GET", "/api/v1/auth/whoami", s.handleWhoAmI)
	s.route(r, "GET", "/api/v1/namespaces", s.handleListNamespaces)
	s.route(r, "POST", "/api/v1/namespaces", s.handleCreateNamespace)
	s.route(r, "DELETE", "/api/v1/namespaces/{name}", s.handleDeleteNamespace)
	s.route(r, "GET", "/api/v1/auth/roles", s.handleListRoles)
	s.route(r, "GET", "/api/v1/auth/roles/{name}", s.handleGetRole)
	s.route(r, "PUT", "/api/v1/auth/roles/{name}", s.handlePutRole)
	s.route(r, "DELETE", "/api/v1/auth/roles/{name}", s.handleDeleteRole)
	s.route(r, "POST", "/api/v1/auth/session", s.handleLogin)
	s.route(r, "DELETE", "/api/v1/auth/session", s.handleLogout)
	s.route(r, "GET", "/api/v1/auth/methods", s.handleAuthMethods)
	s.route(r, "GET", OIDCLoginPath, s.handleOIDCLogin)
	s.route(r, "GET", oidcCallback, s.handleOIDCCallback)
	// Node-to-node routes: only with the cluster credential (peer.Only).
	if cfg.Cluster != nil {
		s.cluster = cfg.Cluster
		s.route(r, "POST", "/api/v1/cluster/join", s.peer.Only(s.handleJoin, s.fail))
		s.route(r, "DELETE", "/api/v1/cluster/nodes/{id}", s.peer.Only(s.handleRemoveNode, s.fail))
		s.route(r, "GET", "/api/v1/cluster/status", s.handleClusterStatus)
		s.route(r, "POST", "/api/v1/cluster/removed", s.peer.Only(s.handleRemoved, s.fail))
	}
	internal := peer.NewHandlers(s.peer, eng, peer.Limits{FetchQueues: defaultFetchQueueMax, FetchCount: maxFetchCount,
		WorkerIDLen: maxWorkerIDLen, HeartbeatJobs: cfg.MaxBatchJobs}, s.closed, s.fail)
	s.route(r, "POST", "/internal/v1/shards/{n}/propose", s.peer.Only(internal.Propose, s.fail))
	s.route(r, "POST", "/internal/v1/shards/{n}/read", s.peer.Only(internal.Read, s.fail))
	s.route(r, "GET", "/internal/v1/shards/{n}/export", s.peer.Only(internal.Export, s.fail))
	s.route(r, "POST", peer.WaitPath, s.peer.Only(internal.Wait, s.fail))
	s.route(r, "GET", "/api/v1/backup", s.handleBackup)
	s.route(r, "POST", "/api/v1/restore", s.handleRestore)
	s.route(r, "GET", "/healthz", s.handleHealth)
	s.route(r, "GET", "/api/v1/metrics", s.handleMetrics)
	s.route(r, "GET", "/", s.handleUIRedirect)
	s.route(r, "GET", "/ui/{filepath:*}", s.handleUI)
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		if uiRedirect(ctx) {
			return
		}
		writeError(ctx, codeNotFound.err("no such endpoint: "+string(ctx.Method())+" "+string(ctx.Path())))
	}
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		writeError(ctx, codeMethodNotAllowed.err(string(ctx.Method())+" is not allowed on "+string(ctx.Path())))
	}
	r.GlobalOPTIONS = s.handlePreflight
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, v interface{}) {
		s.log.Error().Interface("panic", v).Str("path", string(ctx.Path())).Msg("handler panicked")
		writeError(ctx, codeInternal.err("internal error"))
	}
	handler, headerReceived := r.Handler, restoreBodyLimit(cfg.MaxRestoreBytes)
	if cfg.Memory != nil {
		s.bodies = newBodyLedger(cfg.Memory, cfg.MaxBodyBytes)
		handler, headerReceived = s.bodies.handler(r.Handler), s.admitBody(headerReceived)
	}
	s.srv = &fasthttp.Server{
		Handler:                       handler,
		Name:                          "corvo",
		MaxRequestBodySize:            cfg.MaxBodyBytes,
		HeaderReceived:                headerReceived,
		ReadTimeout:                   5 * time.Minute,
		IdleTimeout:                   2 * time.Minute,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		Logger:                        connLogger{s.log},
		ReadBufferSize:                MaxHeaderBytes,
		SecureErrorLogMessage:         true, // never echo a request's headers (its key) into an answer or a log
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if s.bodies != nil {
				if r, ok := s.bodies.take(&ctx.Request.Header); ok {
					s.bodies.acct.Release(r.n)
					if r.refused != nil {
						lingerOnClose(ctx)
						writeError(ctx, r.refused)
						return
					}
				}
			}
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				lingerOnClose(ctx)
				writeError(ctx, codePayloadTooLarge.err("request body is over the size limit"))
				return
			}
			var small *fasthttp.ErrSmallBuffer
			if errors.As(err, &small) || errors.Is(err, fasthttp.ErrSmallReadBuffer) {
				writeError(ctx, codeHeadersTooLarge.errf("the request line and headers are over %d bytes", MaxHeaderBytes))
				return
			}
			writeError(ctx, codeBadRequest.errf("cannot read the request: %v", err))
		},
	}
	if s.bodies != nil {
		s.srv.ExpectHandler, s.srv.ConnState = s.bodies.expect, s.bodies.connState
	}
	go s.sampleLoop()
	if cfg.History != nil {
		go s.historyLoop()
	}
	if cfg.Keys != nil && cfg.Auth != AuthOff {
		go s.keyTouchLoop()
	}
	if cfg.ProviderRebalance > 0 {
		go s.providerRebalanceLoop()
	}
	return s
}

// route registers a handler wrapped with per-route metrics, on the /api/
// routes the browser rules of gateway/cors.go (a state-changing method
// refuses other origins, and POST/PUT want a JSON content type), and the
// permission the permission table gives the route (it panics for a route
// the table lacks).
func (s *Server) route(r *frouter.Router, method, path string, h fasthttp.RequestHandler) {
	perm, ok := permissions[method+" "+path]
	if !ok {
		panic("gateway: route " + method + " " + path + " has no row in the permission table (permissions.go)")
	}
	audit, ok := audited[method+" "+path]
	if !ok && method != "GET" {
		panic("gateway: route " + method + " " + path + " changes state and has no row in the audit table (permissions.go)")
	}
	record := audit.class == auditManage || audit.class == auditHot && s.cfg.AuditAll
	s.routes = append(s.routes, method+" "+path)
	lat := metrics.GetOrCreateHistogram(`corvo_http_request_duration_seconds{route="` + method + ` ` + path + `"}`)
	prefix := `corvo_http_requests_total{route="` + method + ` ` + path + `",code="`
	var codes sync.Map // status → *metrics.Counter
	guard := routeGuard(method, path)
	if pooledReads[method+" "+path] {
		h = s.pooled(h)
	}
	grows := growsData[method+" "+path]
	r.Handle(method, path, func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		ran := (guard == nil || s.admit(ctx, guard)) && s.authorize(ctx, perm) && (!grows || s.diskRoom(ctx))
		if ran {
			h(ctx)
		}
		if record {
			s.audit(ctx, audit, perm, ran)
		}
		lat.UpdateDuration(start)
		code := ctx.Response.StatusCode()
		c, ok := codes.Load(code)
		if !ok {
			c, _ = codes.LoadOrStore(code, metrics.GetOrCreateCounter(prefix+itoa(code)+`"}`))
		}
		c.(*metrics.Counter).Inc()
	})
}

// Serve serves HTTP on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	tl := &trackingListener{Listener: ln, conns: map[*trackedConn]struct{}{}}
	s.ln.Store(tl)
	select {
	case <-s.closed:
		// Shutdown ran before this listener was known to anyone.
		return tl.Close()
	default:
	}
	return s.srv.Serve(tl)
}

// Shutdown stops accepting connections, ends long-polls and event
// streams, stops background bulk operations (their records say
// interrupted) and waits for in-flight requests.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() { close(s.closed) })
	if tl := s.ln.Load(); tl != nil {
		// fasthttp closes only the listeners its Serve has registered;
		// Serve may have been called and not have got that far.
		_ = tl.Close()
	}
	s.bulk.shutdown(ctx)
	done := make(chan error, 1)
	go func() { done <- s.srv.ShutdownWithContext(ctx) }()
	// An event stream whose client stopped reading blocks in a write that
	// closing s.closed cannot interrupt: give streams a write deadline.
	if tl := s.ln.Load(); tl != nil {
		tl.expireStreams(time.Now().Add(streamShutdownGrace))
	}
	// fasthttp waits for a connection that never sent a request (clients
	// dial spare keep-alive connections) until its read timeout: close
	// those ourselves.
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if tl := s.ln.Load(); tl != nil {
			tl.closeUnused()
		}
		select {
		case err := <-done:
			if s.sso != nil {
				s.sso.client.CloseIdleConnections() // to the issuer
			}
			return err
		case <-t.C:
		}
	}
}

// connLogger takes fasthttp's own messages, which are about one connection
// each (a client that reset it, a plain-HTTP hit on a TLS port, a failed
// handshake), into the node's log at debug level instead of stderr.
type connLogger struct{ log zerolog.Logger }

func (l connLogger) Printf(format string, args ...any) {
	l.log.Debug().Str("layer", "http").Msgf(format, args...)
}

// trackingListener remembers its connections and whether each has sent
// anything yet.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed sync.Once
	err    error
}

// Close closes the listener once; later calls (Shutdown's and fasthttp's)
// return the first one's result.
func (l *trackingListener) Close() error {
	l.closed.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

type trackedConn struct {
	net.Conn
	l      *trackingListener
	used   atomic.Bool
	stream atomic.Bool // serving an SSE stream
	// linger: the connection is closed after an answer sent before the
	// request's body was read (lingerOnClose).
	linger atomic.Bool
	dep    *departure // clientGone's probe, made on first use
}

// lingerTimeout bounds how long a closed connection keeps reading what
// its client still sends (lingerOnClose).
const lingerTimeout = 2 * time.Second

// lingerOnClose marks ctx's connection to close gracefully: the server
// answered without reading the request's body (a 413, or a refusal for
// memory), and closing at once would make the kernel reset the
// connection while the client is still sending, so the client would see
// "connection reset" instead of the answer. On Close the connection
// stops writing (FIN) and reads and drops what arrives, in a small
// buffer, until the client closes or lingerTimeout passes.
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	switch c := ctx.Conn().(type) {
	case *trackedConn:
		c.linger.Store(true)
	case *trackedTLSConn:
		c.linger.Store(true)
	}
}

// streamShutdownGrace is how long Shutdown lets an SSE stream finish its
// last write before the write fails.
const streamShutdownGrace = time.Second

// markStream records that ctx's connection serves an event stream, so
// Shutdown can end it even when its client stopped reading.
func markStream(ctx *fasthttp.RequestCtx) {
	switch c := ctx.Conn().(type) {
	case *trackedConn:
		c.stream.Store(true)
	case *trackedTLSConn:
		c.stream.Store(true)
	}
}

// expireStreams sets a write deadline on every event-stream connection.
func (l *trackingListener) expireStreams(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.stream.Load() {
			_ = c.Conn.SetWriteDeadline(at)
		}
	}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	if t, ok := c.(*tls.Conn); ok {
		// fasthttp finds TLS (ctx.IsTLS, the client certificate) by
		// asking the connection it was handed for its TLS state.
		return &trackedTLSConn{trackedConn: tc, tls: t}, nil
	}
	return tc, nil
}

// trackedTLSConn is a trackedConn over TLS that shows its TLS state.
type trackedTLSConn struct {
	*trackedConn
	tls *tls.Conn
}

func (c *trackedTLSConn) Handshake() error                     { return c.tls.Handshake() }
func (c *trackedTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// closeUnused closes the connections that have not sent a byte.
func (l *trackingListener) closeUnused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if !c.used.Load() {
			_ = c.Conn.Close()
			delete(l.conns, c)
		}
	}
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.used.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	if !c.linger.Load() {
		return c.Conn.Close()
	}
	hc, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || hc.CloseWrite() != nil {
		return c.Conn.Close()
	}
	go func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
		var buf [4 << 10]byte
		for {
			if _, err := c.Conn.Read(buf[:]); err != nil {
				break
			}
		}
		_ = c.Conn.Close()
	}()
	return nil
}

func itoa(v int) string { return string(appendInt(nil, int64(v))) }

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// fail writes any error as the error table says (engineError): the peer
// layer's handlers answer through it.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error) { writeError(ctx, engineError(err)) }

func writeError(ctx *fasthttp.RequestCtx, e *apiError) {
	if (e.status == 429 || e.status == 503) && len(ctx.Response.Header.Peek("Retry-After")) == 0 {
		ctx.Response.Header.Set("Retry-After", "1") // unless the handler knows better
	}
	b := append([]byte(`{"error":`), appendString(nil, e.msg)...)
	b = append(b, `,"code":`...)
	b = appendString(b, e.code)
	b = append(b, '}')
	writeJSON(ctx, e.status, b)
}

// engineError maps a shard-layer error to an API error.
func engineError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var pe *peer.Error
	if errors.As(err, &pe) {
		return relayed(pe.Status, pe.Code, pe.Msg) // another node's answer, as its handler gave it
	}
	switch {
	case errors.Is(err, shard.ErrBusy):
		return codeOverloaded.err("the server is overloaded; retry after the Retry-After delay")
	case errors.Is(err, shard.ErrClosed):
		return codeShuttingDown.err("the server is shutting down")
	case errors.Is(err, context.Canceled):
		return codeShuttingDown.err("the operation was stopped; the request may or may not have been applied")
	case errors.Is(err, shard.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return codeUnavailable.err("no leader could commit the request in time; it may or may not have been applied")
	}
	return codeInternal.err(err.Error())
}

func (s *Server) propose(shardIdx int, ops ...statemachine.Op) ([]statemachine.Result, *apiError) {
	return s.proposeCtx(context.Background(), shardIdx, ops...)
}

// proposerWithin is implemented by engines that bound a proposal's wait
// with a timeout themselves (shard.Host): a parent that is never cancelled
// then costs no context and timer a proposal.
type proposerWithin interface {
	ProposeWithin(timeout time.Duration, shard int, ops ...statemachine.Op) ([]statemachine.Result, error)
}

// proposeCtx is propose under a parent context: the engine when this node
// hosts the shard, else a node that does (proposeRemote, gateway/forward.go).
func (s *Server) proposeCtx(parent context.Context, shardIdx int, ops ...statemachine.Op) ([]statemachine.Result, *apiError) {
	if !s.hosted(shardIdx) {
		return s.proposeRemote(parent, shardIdx, ops)
	}
	var rs []statemachine.Result
	var err error
	if pw, ok := s.eng.(proposerWithin); ok && parent.Done() == nil {
		rs, err = pw.ProposeWithin(s.cfg.RequestTimeout, shardIdx, ops...)
	} else {
		ctx, cancel := context.WithTimeout(parent, s.cfg.RequestTimeout)
		rs, err = s.eng.Propose(ctx, shardIdx, ops...)
		cancel()
	}
	if err != nil {
		return nil, engineError(err)
	}
	return rs, nil
}

// resultError maps a non-OK op result to an API error.
func resultError(r *statemachine.Result) *apiError {
	switch r.Status {
	case statemachine.StatusNotFound:
		return codeNotFound.err(r.Message)
	case statemachine.StatusConflict:
		return codeConflict.err(r.Message)
	case statemachine.StatusInvalid:
		return invalid("%s", r.Message)
	case statemachine.StatusSchemaRequired:
		return codeResultSchemaInvalid.err(r.Message) // the ack handlers validate and try again
	}
	return nil
}

func (s *Server) handleHealth(ctx *fasthttp.RequestCtx) {
	select {
	case <-s.closed:
		writeError(ctx, codeShuttingDown.err("shutting down"))
		return
	default:
	}
	led := 0
	for i := 0; i < s.eng.Shards(); i++ {
		if s.eng.IsLeader(i) {
			led++
		}
	}
	b := append([]byte(`{"status":"ok","shards":`), appendInt(nil, int64(s.eng.Shards()))...)
	b = append(b, `,"shards_led":`...)
	b = appendInt(b, int64(led))
	// "leaders": the node each data shard's replica here hears as its
	// leader (0: none, or not hosted); "applied": its applied index. The
	// other nodes hand a leadership only to a replica that hears them and
	// has caught up (shard.Peers).
	var applied []byte
	b = append(b, `,"leaders":[`...)
	for i := 0; i < s.eng.Shards(); i++ {
		if i > 0 {
			b = append(b, ',')
			applied = append(applied, ',')
		}
		leader, a := s.eng.Replica(i)
		b = appendInt(b, int64(leader))
		applied = appendInt(applied, int64(a))
	}
	b = append(b, `],"applied":[`...)
	b = append(append(b, applied...), ']')
	// "auth": "keys" (every API call needs a key), "open" (loopback:
	// calls without a key act as an admin) or "off" (--auth=off).
	b = append(b, `,"auth":`...)
	b = appendString(b, s.cfg.Auth.String())
	writeJSON(ctx, 200, append(b, '}'))
}

func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	led := 0
	for i := 0; i < s.eng.Shards(); i++ {
		if s.eng.IsLeader(i) {
			led++
		}
	}
	shardsLed.Set(float64(led))
	if s.disk != nil {
		s.refreshDisk(true)
	}
	ctx.SetContentType("text/plain; version=0.0.4")
	metrics.WritePrometheus(ctx, true)
	s.writeLatencyMetrics(ctx)
}

// The metrics library writes "# HELP" and "# TYPE" before each family only
// when asked; without them Prometheus takes every family as untyped.
func init() { metrics.ExposeMetadata(true) }

var shardsLed = metrics.NewGauge(`corvo_shards_led`, nil)

// queueCounters are the per-queue job counters of /metrics.
type queueCounters struct {
	enqueued, fetched, completed, failed, dead *metrics.Counter
}

func (s *Server) counters(queue string) *queueCounters {
	if c, ok := s.queueMetrics.Load(queue); ok {
		return c.(*queueCounters)
	}
	// Names need no escaping (validated charsets). Another namespace's
	// queue is labelled with its namespace and its name there.
	l := `{queue="` + queue + `"}`
	if ns, q := router.SplitQueue(queue); ns != router.DefaultNamespace {
		l = `{namespace="` + ns + `",queue="` + q + `"}`
	}
	c := &queueCounters{
		enqueued:  metrics.GetOrCreateCounter(`corvo_jobs_enqueued_total` + l),
		fetched:   metrics.GetOrCreateCounter(`corvo_jobs_fetched_total` + l),
		completed: metrics.GetOrCreateCounter(`corvo_jobs_completed_total` + l),
		failed:    metrics.GetOrCreateCounter(`corvo_jobs_failed_total` + l),
		dead:      metrics.GetOrCreateCounter(`corvo_jobs_dead_total` + l),
	}
	v, _ := s.queueMetrics.LoadOrStore(queue, c)
	return v.(*queueCounters)
}
