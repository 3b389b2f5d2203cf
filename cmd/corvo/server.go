package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/node"
)

// serverFlags are `corvo server`'s flags, mapped onto a node.Config.
type serverFlags struct {
	cfg      node.Config
	logLevel string
	cacheMB  int
	// mirrorPayloadMax is --mirror-payload-max (0: whole payloads).
	mirrorPayloadMax int
	maxMem           string   // --max-memory, a size
	roleMap          []string // --oidc-role-map entries
}

// register defines the server's flags on fl.
func (f *serverFlags) register(fl *pflag.FlagSet) {
	c := &f.cfg
	fl.StringVar(&c.Bind, "bind", node.BindDefault, "HTTP listen address")
	fl.StringVar(&c.DataDir, "data-dir", node.DataDirDefault, "directory for all data (Raft log and Pebble shards)")
	fl.StringVar(&c.RaftBind, "raft-bind", node.RaftBindDefault, "Raft listen address (host:port); fixed for the life of the data dir")
	host, _ := os.Hostname()
	fl.StringVar(&c.NodeName, "node-id", host, "this node's name (default: the host name)")
	fl.BoolVar(&c.Bootstrap, "bootstrap", false, "start a new cluster with this node as its first member (the default without --join)")
	fl.StringVar(&c.Join, "join", "", "join the cluster of the node serving HTTP at host:port (comma-separated list: try each)")
	fl.StringVar(&c.RaftAdvertise, "raft-advertise", "", "Raft address other nodes reach this node on (default: --raft-bind)")
	fl.StringVar(&c.HTTPAdvertise, "http-advertise", "", "HTTP address other nodes and clients reach this node on (default: --bind, with the Raft host when --bind has none)")
	fl.Uint64Var(&c.SnapshotEntries, "snapshot-entries", node.SnapshotEntriesDefault, "Raft entries each shard applies between snapshots (a replica further behind than a fifth of that catches up from a snapshot)")
	fl.Int64Var(&c.SnapshotBytes, "snapshot-bytes", node.SnapshotBytesDefault, "bytes of Raft entries each shard applies between snapshots, whatever their count: the Raft log keeps a quarter to a half of it (negative: by --snapshot-entries only)")
	fl.StringVar(&c.ClusterSecretFile, "cluster-secret-file", "", "file holding the cluster secret that node-to-node calls carry (env CORVO_CLUSTER_SECRET); a founding node without one generates it into <data-dir>/cluster-secret, a joining node must be given it")
	fl.IntVar(&c.Replicas, "replicas", node.ReplicasDefault, "replicas per shard (set at bootstrap): each shard is placed on this many nodes, or on every node while there are fewer")
	fl.StringVar(&c.Discover, "discover", "", `find peers automatically: "dns" (a Kubernetes headless service; the pod with ordinal 0 bootstraps, the rest join)`)
	fl.StringVar(&c.DiscoverService, "discover-service", "", "with --discover=dns: the headless service's DNS name (e.g. corvo-headless.default.svc.cluster.local)")
	fl.IntVar(&c.Shards, "shards", 0, fmt.Sprintf("number of shards, fixed at first start (default %d)", node.ShardsDefault))
	fl.IntVar(&c.MaxPayloadBytes, "max-payload", node.MaxPayloadDefault, "largest job payload in bytes (413 above)")
	c.Gateway.MinFreeDisk = gateway.MinFreeDiskDefault
	fl.Var(diskFloorFlag{&c.Gateway.MinFreeDisk}, "min-free-disk",
		`free space of the data volume below which writes that add data (enqueue, batch enqueue, schedules, move, restore) answer 507 while acks, fails, deletes and reads go on: a size (2GiB, 500MB), a percentage of the volume (5%), both (the smaller wins), or 0 for no floor`)
	fl.IntVar(&c.MaxRestoreBytes, "max-restore", gateway.MaxRestoreBytesDefault, "largest backup file corvo restore may send, in bytes (held in memory while restored)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", node.ShutdownTimeoutDefault, "how long SIGTERM waits for in-flight requests")
	fl.DurationVar(&c.Retention, "retention", node.RetentionDefault, "how long completed, dead and cancelled jobs are kept (e.g. 168h); negative: forever")
	fl.DurationVar(&c.AuditRetention, "audit-retention", node.AuditRetentionDefault, "how long audit records are kept (e.g. 2160h); negative: forever")
	fl.BoolVar(&c.Gateway.AuditAll, "audit-all", false, "also audit the hot path: enqueue, fetch, ack, fail and heartbeat (one more Raft write per call)")
	fl.DurationVar(&c.Gateway.ProviderRebalance, "provider-rebalance", gateway.ProviderRebalanceDefault,
		"how often a provider's limits are re-shared by demand over the shards of its linked queues (busy ones get what idle ones leave; one node does it); negative (e.g. -1s): never, each shard keeps an equal share")
	fl.BoolVar(&c.NoMirror, "no-mirror", false, "run without the SQLite mirror (no search, no asynchronous bulk; more throughput)")
	fl.IntVar(&f.mirrorPayloadMax, "mirror-payload-max", node.MirrorPayloadMaxDefault, "bytes of each payload the search mirror keeps: a longer one is kept as its first bytes (search pages leave out payloads over 8 KiB, GET /api/v1/jobs/{id} shows them whole; payload_contains sees the prefix, payload_jq never matches it); 0: whole payloads")
	fl.BoolVar(&c.NoEvents, "no-events", false, "run without the event stream (GET /api/v1/events)")
	fl.IntVar(&f.cacheMB, "cache-mb", 0, fmt.Sprintf("Pebble block cache in MiB, shared by every shard (default: an eighth of --max-memory, at most %d)", node.CacheBytesDefault>>20))
	fl.StringVar(&f.maxMem, "max-memory", os.Getenv("CORVO_MAX_MEMORY"),
		`memory budget (e.g. 1GiB, 512MiB): caches are sized from it, and past it new writes get 429 with Retry-After while reads keep working (default $CORVO_MAX_MEMORY, else half the container's cgroup memory limit, or of the RAM)`)
	fl.StringVar(&c.PprofBind, "pprof-bind", "", "serve Go pprof profiles on their own loopback listener (e.g. 127.0.0.1:6060); off when empty")
	fl.StringSliceVar(&c.Gateway.CORSOrigins, "cors-origin", envList("CORVO_CORS_ORIGINS"),
		`browser origin (scheme://host[:port], or "*") allowed to call the API from its pages; repeatable or comma-separated (default $CORVO_CORS_ORIGINS). Other origins cannot change anything`)
	strict, _ := strconv.ParseBool(os.Getenv("CORVO_STRICT_LEASES"))
	fl.BoolVar(&c.Gateway.StrictLeases, "strict-leases", strict,
		`ack, fail and heartbeat must name the lease's "attempt" (400 lease_required otherwise), so only the holder can complete a job or extend its lease (default $CORVO_STRICT_LEASES)`)
	fl.StringVar(&c.Auth, "auth", envOr("CORVO_AUTH", node.AuthAuto),
		`API keys: "auto" (needed unless --bind is loopback only), "on" (always needed) or "off" (never: every caller is an admin; trusted networks only) (default $CORVO_AUTH)`)
	fl.DurationVar(&c.Gateway.ReadTimeout, "read-timeout", gateway.ReadTimeoutDefault, `deadline of a search, list or job read, from its arrival: a search it cuts answers the matches found so far ("partial": true), or 400 filter_needs_index when it found none`)
	fl.IntVar(&c.Gateway.ReadConcurrency, "read-concurrency", gateway.ReadConcurrencyDefault, "searches, lists and job reads running at once on this node; up to 256 more wait for a slot until their deadline (429 reads_busy beyond)")
	fl.IntVar(&c.Gateway.RateRead, "rate-limit-read", 0, "each API key's GETs a second on this node (default 2000; -1: unlimited; a key's own rate_read wins)")
	fl.IntVar(&c.Gateway.RateWrite, "rate-limit-write", 0, "each API key's POST/PUT/PATCH/DELETEs a second on this node (default 1000; -1: unlimited; a key's own rate_write wins)")
	fl.StringVar(&c.AdminKeyFile, "admin-key-file", "", "file holding an API key to make an admin key of the cluster (env CORVO_ADMIN_KEY); off loopback without one, the first start writes a new admin key to <data-dir>/admin-key")
	fl.StringVar(&c.TLSCert, "tls-cert", os.Getenv("CORVO_TLS_CERT"), "PEM certificate (chain) to serve the API and UI over TLS with; with --tls-key; read again on SIGHUP (default $CORVO_TLS_CERT)")
	fl.StringVar(&c.TLSKey, "tls-key", os.Getenv("CORVO_TLS_KEY"), "PEM private key of --tls-cert (default $CORVO_TLS_KEY)")
	fl.StringVar(&c.PeerTLSCA, "peer-tls-ca", os.Getenv("CORVO_PEER_TLS_CA"), "PEM CA that issues the nodes' certificates: mutual TLS between nodes (Raft and node-to-node HTTP); with --peer-tls-cert and --peer-tls-key (default $CORVO_PEER_TLS_CA)")
	fl.StringVar(&c.PeerTLSCert, "peer-tls-cert", os.Getenv("CORVO_PEER_TLS_CERT"), "this node's PEM certificate for mutual TLS, issued by --peer-tls-ca for server and client authentication (default $CORVO_PEER_TLS_CERT)")
	fl.StringVar(&c.PeerTLSKey, "peer-tls-key", os.Getenv("CORVO_PEER_TLS_KEY"), "PEM private key of --peer-tls-cert (default $CORVO_PEER_TLS_KEY)")
	o := &c.Gateway.OIDC
	fl.StringVar(&o.Issuer, "oidc-issuer", os.Getenv("CORVO_OIDC_ISSUER"), "single sign-on for the web UI: the OpenID Connect issuer URL (discovered at start; default $CORVO_OIDC_ISSUER)")
	fl.StringVar(&o.ClientID, "oidc-client-id", os.Getenv("CORVO_OIDC_CLIENT_ID"), "the client ID registered at --oidc-issuer (default $CORVO_OIDC_CLIENT_ID)")
	fl.StringVar(&c.OIDCClientSecretFile, "oidc-client-secret-file", os.Getenv("CORVO_OIDC_CLIENT_SECRET_FILE"), "file holding the client secret (env CORVO_OIDC_CLIENT_SECRET; none: a public client, PKCE alone)")
	fl.StringVar(&o.RedirectURL, "oidc-redirect-url", os.Getenv("CORVO_OIDC_REDIRECT_URL"), "the public URL of this cluster's /auth/oidc/callback, as registered at the issuer; required with --oidc-issuer (default $CORVO_OIDC_REDIRECT_URL)")
	fl.StringVar(&o.GroupsClaim, "oidc-groups-claim", envOr("CORVO_OIDC_GROUPS_CLAIM", gateway.OIDCGroupsClaimDefault), "the ID token claim holding the user's groups (default $CORVO_OIDC_GROUPS_CLAIM)")
	fl.StringSliceVar(&f.roleMap, "oidc-role-map", envList("CORVO_OIDC_ROLE_MAP"), "group=namespace:role (a built-in role): what a group may do in a namespace; repeatable or comma-separated; a user gets the most powerful role their groups give in each namespace (default $CORVO_OIDC_ROLE_MAP)")
	fl.BoolVar(&c.Test.HoldOutbox, "test-hold-outbox", false, "tests only: never deliver outbox records")
	_ = fl.MarkHidden("test-hold-outbox")
	fl.DurationVar(&c.Test.ApplyDelay, "test-apply-delay", 0, "tests only: hold this node's replicas after each applied entry batch")
	_ = fl.MarkHidden("test-apply-delay")
}

// config completes the node.Config from the parsed flags and the
// environment.
func (f *serverFlags) config() (node.Config, error) {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return node.Config{}, fmt.Errorf("--log-level: %w", err)
	}
	c := f.cfg
	c.Logger = zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("node", c.NodeName).Logger()
	c.CacheBytes = int64(f.cacheMB) << 20
	c.MirrorPayloadMax = f.mirrorPayloadMax
	if f.mirrorPayloadMax <= 0 {
		c.MirrorPayloadMax = -1 // whole payloads
	}
	if f.maxMem != "" {
		if c.MaxMemory, err = membudget.ParseBytes(f.maxMem); err != nil {
			return node.Config{}, fmt.Errorf("--max-memory: %w", err)
		}
	}
	if c.ClusterSecretFile == "" {
		c.ClusterSecret = os.Getenv("CORVO_CLUSTER_SECRET")
	}
	if c.AdminKeyFile == "" {
		c.AdminKey = os.Getenv("CORVO_ADMIN_KEY")
	}
	if c.OIDCClientSecretFile == "" {
		c.Gateway.OIDC.ClientSecret = os.Getenv("CORVO_OIDC_CLIENT_SECRET")
	}
	rm, err := gateway.ParseRoleMap(f.roleMap)
	if err != nil {
		return node.Config{}, err
	}
	c.Gateway.OIDC.RoleMap = rm
	return c, nil
}

func newServerCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Start a Corvo server: a single node, or a member of a cluster (--join)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), &f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func runServer(ctx context.Context, f *serverFlags) error {
	cfg, err := f.config()
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := node.Run(sigCtx, cfg); err != nil {
		var ce *node.ConfigError
		if errors.As(err, &ce) {
			return &exitError{exitUsage, err}
		}
		return &exitError{exitError_, err}
	}
	return nil
}

// diskFloorFlag is --min-free-disk: a gateway.DiskFloor as
// gateway.ParseDiskFloor reads it.
type diskFloorFlag struct{ f *gateway.DiskFloor }

func (d diskFloorFlag) String() string {
	if d.f == nil {
		return ""
	}
	return d.f.String()
}
func (d diskFloorFlag) Type() string { return "floor" }
func (d diskFloorFlag) Set(s string) error {
	f, err := gateway.ParseDiskFloor(s)
	if err != nil {
		return err
	}
	*d.f = f
	return nil
}

// envOr is the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envList reads a comma-separated list from the environment.
func envList(name string) []string {
	var out []string
	for _, v := range strings.Split(os.Getenv(name), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
