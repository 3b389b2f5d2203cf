package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// Defaults of Config.
const (
	BindDefault            = ":8080"
	DataDirDefault         = "./corvo-data"
	RaftBindDefault        = "127.0.0.1:9400"
	ReplicasDefault        = 3
	ShutdownTimeoutDefault = 30 * time.Second
	// HandOffTimeout bounds how long a stopping node waits for its
	// leaderships to move (an election timeout or two).
	HandOffTimeout = 5 * time.Second
	// The shard host's defaults, for flags.
	ShardsDefault           = shard.ShardsDefault
	SnapshotEntriesDefault  = shard.SnapshotEntriesDefault
	SnapshotBytesDefault    = shard.SnapshotBytesDefault
	MirrorPayloadMaxDefault = mirror.PayloadMaxDefault
	RetentionDefault        = shard.RetentionDefault
	AuditRetentionDefault   = shard.AuditRetentionDefault
	CacheBytesDefault       = shard.CacheBytesDefault
	// MaxPayloadDefault is the largest job payload by default.
	MaxPayloadDefault = gateway.MaxPayloadDefault
	// OpenTimeoutDefault bounds opening the shards (and catching up, for a
	// node that joined).
	OpenTimeoutDefault = 2 * time.Minute
)

// Config is everything one Corvo node is made of: where it keeps its data,
// what it listens on, the shard host's, the gateway's, the mirror's and the
// event stream's settings, and how it finds its cluster. cmd/corvo fills it
// from flags; tests and `corvo bench --embedded` fill it directly.
type Config struct {
	DataDir  string // the Raft log, the Pebble shards, the mirror, corvo.json
	Bind     string // HTTP listen address
	RaftBind string // Raft listen address; fixed for the life of DataDir
	NodeName string // this node's name (default: the host name)
	Shards   int    // fixed at first start (0: shard.ShardsDefault)
	Logger   zerolog.Logger

	// Clustering. Without Join (and without Discover finding a member to
	// join) a new data dir founds a cluster.
	Bootstrap       bool
	Join            string // comma-separated HTTP addresses of members
	RaftAdvertise   string // default RaftBind
	HTTPAdvertise   string // default Bind, with the Raft host when Bind has none
	Replicas        int    // replicas per shard (set at bootstrap)
	Discover        string // "" or "dns" (a Kubernetes headless service)
	DiscoverService string
	SnapshotEntries uint64
	SnapshotBytes   int64 // 0: shard.SnapshotBytesDefault; negative: by entry count only
	// ClusterSecret is the credential of node-to-node calls; when empty,
	// ClusterSecretFile is read, else the one stored in DataDir, else a
	// founding node generates one (see LoadClusterSecret).
	ClusterSecret     string
	ClusterSecretFile string
	// TLSCert and TLSKey (PEM files, both or neither) serve the API and
	// the UI over TLS 1.2 or later; read again on SIGHUP (tls.go).
	TLSCert, TLSKey string
	// PeerTLSCA, PeerTLSCert and PeerTLSKey (all or none) make nodes
	// authenticate each other with mutual TLS: the Raft transport and
	// node-to-node HTTP calls (tls.go). The cluster secret is still
	// required on node-to-node routes.
	PeerTLSCA, PeerTLSCert, PeerTLSKey string

	// The server.
	MaxPayloadBytes int           // largest job payload (0: gateway.MaxPayloadDefault)
	MaxRestoreBytes int           // largest backup a restore takes (0: gateway.MaxRestoreBytesDefault)
	ShutdownTimeout time.Duration // how long Shutdown waits for in-flight requests
	CacheBytes      int64         // Pebble block cache (0: an eighth of MaxMemory, at most shard.CacheBytesDefault)
	// MaxMemory is the node's memory budget (memory.go): the caches are
	// sized from it, and what grows with load (request bodies, proposal
	// queues, the mirror's buffer) is refused past it. 0: a fraction of
	// the cgroup memory limit, or of the RAM (membudget.DefaultFraction).
	MaxMemory      int64
	Retention      time.Duration // finished jobs are kept this long; negative: forever
	AuditRetention time.Duration // audit records are kept this long; negative: forever
	NoMirror       bool          // no SQLite mirror: no search, no async bulk
	// MirrorPayloadMax is how many bytes of a payload the mirror keeps
	// (a longer one: its first bytes; search pages leave it out).
	// 0: mirror.PayloadMaxDefault; negative: whole payloads.
	MirrorPayloadMax int
	NoEvents         bool // no event stream
	// PprofBind, when set, serves the Go profiler on its own loopback
	// listener (Run).
	PprofBind string
	// Auth is AuthAuto (default: keys unless Bind is loopback), AuthOn or
	// AuthOff (no keys at all, for trusted networks).
	Auth string
	// AdminKey (or the content of AdminKeyFile) is an API key that is
	// made an admin key of the cluster at start (see adminkey.go).
	AdminKey     string
	AdminKeyFile string
	// OIDCClientSecretFile holds single sign-on's client secret when
	// Gateway.OIDC.ClientSecret (CORVO_OIDC_CLIENT_SECRET) is empty.
	OIDCClientSecretFile string
	// Gateway is the rest of the gateway's settings (CORS, strict leases,
	// limits); the node fills its mirror, events, logger, cluster secret
	// and payload limit.
	Gateway gateway.Config

	Test TestConfig
}

// TestConfig holds hooks for tests; production leaves it zero.
type TestConfig struct {
	// HoldOutbox keeps the outbox relay from delivering (a test crashes a
	// node between an outbox write and its delivery).
	HoldOutbox bool
	// Fast Raft timing for in-process tests (0: shard defaults).
	RTTMillisecond uint64
	ElectionRTT    uint64
	TickInterval   time.Duration
	// MirrorFlushWindow, when set, replaces the mirror's flush window.
	MirrorFlushWindow time.Duration
	// EventsCapacity, when set, sizes the event ring.
	EventsCapacity int
	// OnApplied, when set, also hears every committed Update.
	OnApplied func(*statemachine.AppliedInfo)
	// Clock, when set, is the time the node stamps its Raft entries with
	// and its history keeps (a test steps it to make known delays).
	Clock shard.Clock
	// ApplyDelay, when set, holds every replica of this node this long
	// after each applied Update: a follower that trails its leader.
	ApplyDelay time.Duration
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DataDirDefault
	}
	if c.Bind == "" {
		c.Bind = BindDefault
	}
	if c.RaftBind == "" {
		c.RaftBind = RaftBindDefault
	}
	if c.Replicas == 0 {
		c.Replicas = ReplicasDefault
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = ShutdownTimeoutDefault
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = shard.SnapshotEntriesDefault
	}
	if c.Retention == 0 {
		c.Retention = shard.RetentionDefault
	}
	if c.AuditRetention == 0 {
		c.AuditRetention = shard.AuditRetentionDefault
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = gateway.MaxPayloadDefault
	}
	return c
}

// Validate checks the settings and the rules between them.
func (c Config) Validate() error {
	if c.Bootstrap && c.Join != "" {
		return errors.New("--bootstrap and --join exclude each other")
	}
	if c.Discover != "" && c.Discover != "dns" {
		return fmt.Errorf("--discover must be dns, not %q", c.Discover)
	}
	if c.Discover == "dns" && c.DiscoverService == "" {
		return errors.New("--discover=dns needs --discover-service")
	}
	if c.Replicas < 1 {
		return errors.New("--replicas must be at least 1")
	}
	if c.Shards < 0 {
		return errors.New("--shards must be positive")
	}
	if c.MaxRestoreBytes < 0 {
		return fmt.Errorf("max restore bytes must not be negative, got %d", c.MaxRestoreBytes)
	}
	if c.MaxPayloadBytes < 0 {
		return errors.New("--max-payload must be positive")
	}
	if c.MaxMemory < 0 {
		return errors.New("--max-memory must be positive")
	}
	if c.MaxMemory > 0 && c.MaxMemory < membudget.MinTotal {
		return fmt.Errorf("--max-memory must be at least %s", membudget.FormatBytes(membudget.MinTotal))
	}
	if c.PprofBind != "" && !Loopback(c.PprofBind) {
		return fmt.Errorf("--pprof-bind %s: the profiler listens on loopback only", c.PprofBind)
	}
	switch c.Auth {
	case "", AuthAuto, AuthOn, AuthOff:
	default:
		return fmt.Errorf("--auth must be auto, on or off, not %q", c.Auth)
	}
	if _, _, err := c.givenAdminKey(); err != nil {
		return err
	}
	if _, err := c.oidcClientSecret(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := gateway.CheckCORSOrigins(c.Gateway.CORSOrigins); err != nil {
		return fmt.Errorf("--cors-origin: %w", err)
	}
	if err := c.gatewayConfig().WithDefaults().Validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if _, _, err := net.SplitHostPort(c.Bind); err != nil {
		return fmt.Errorf("--bind: %w", err)
	}
	if _, _, err := net.SplitHostPort(c.RaftBind); err != nil {
		return fmt.Errorf("--raft-bind: %w", err)
	}
	return nil
}

// gatewayConfig is Gateway with the settings the node owns (the payload
// limit, the logger); Open adds the mirror, the events and the callbacks.
func (c Config) gatewayConfig() gateway.Config {
	g := c.Gateway
	g.MaxPayloadBytes, g.MaxRestoreBytes, g.Logger = c.MaxPayloadBytes, c.MaxRestoreBytes, c.Logger
	g.Auth = c.authMode()
	return g
}

// advertise fills the advertised addresses from the bind addresses; in
// Kubernetes (--discover=dns) from the pod's stable DNS name.
func (c *Config) advertise(hostname string) error {
	if c.Discover == "dns" && c.DiscoverService != "" {
		// In Kubernetes, a pod's stable name is <pod>.<headless service>.
		stable := hostname + "." + c.DiscoverService
		if c.RaftAdvertise == "" {
			_, port, err := net.SplitHostPort(c.RaftBind)
			if err != nil {
				return fmt.Errorf("--raft-bind: %w", err)
			}
			c.RaftAdvertise = net.JoinHostPort(stable, port)
		}
		if c.HTTPAdvertise == "" {
			_, port, err := net.SplitHostPort(c.Bind)
			if err != nil {
				return fmt.Errorf("--bind: %w", err)
			}
			c.HTTPAdvertise = net.JoinHostPort(stable, port)
		}
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftBind
	}
	rhost, _, err := net.SplitHostPort(c.RaftAdvertise)
	if err != nil {
		return fmt.Errorf("--raft-advertise: %w", err)
	}
	if rhost == "" || net.ParseIP(rhost).IsUnspecified() {
		return fmt.Errorf("the Raft address %s has no host other nodes can reach: set --raft-advertise", c.RaftAdvertise)
	}
	if c.HTTPAdvertise == "" {
		host, port, err := net.SplitHostPort(c.Bind)
		if err != nil {
			return fmt.Errorf("--bind: %w", err)
		}
		if host == "" || net.ParseIP(host).IsUnspecified() {
			host = rhost
		}
		c.HTTPAdvertise = net.JoinHostPort(host, port)
	}
	return nil
}

// oidcClientSecret is single sign-on's client secret: the one given
// (CORVO_OIDC_CLIENT_SECRET), else OIDCClientSecretFile's content.
func (c Config) oidcClientSecret() (string, error) {
	if c.OIDCClientSecretFile == "" || c.Gateway.OIDC.ClientSecret != "" {
		return c.Gateway.OIDC.ClientSecret, nil
	}
	if !c.Gateway.OIDC.Enabled() {
		return "", errors.New("--oidc-client-secret-file needs --oidc-issuer")
	}
	b, err := os.ReadFile(c.OIDCClientSecretFile)
	if err != nil {
		return "", fmt.Errorf("--oidc-client-secret-file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("--oidc-client-secret-file %s is empty", c.OIDCClientSecretFile)
	}
	return secret, nil
}
