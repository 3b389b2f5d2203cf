package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // served only with --pprof-bind
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

type serverFlags struct {
	bind            string
	dataDir         string
	raftBind        string
	nodeID          string
	shards          int
	maxPayload      int
	logLevel        string
	shutdownTimeout time.Duration
	pprofBind       string
	cacheMB         int
	retention       time.Duration
	noMirror        bool
	noEvents        bool
	corsOrigins     []string
	strictLeases    bool

	// Clustering.
	bootstrap       bool
	join            string
	raftAdvertise   string
	httpAdvertise   string
	replicas        int
	discover        string
	discoverService string
	snapshotEntries uint64
	secretFile      string
}

func newServerCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Start a Corvo server: a single node, or a member of a cluster (--join)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.bind, "bind", ":8080", "HTTP listen address")
	fl.StringVar(&f.dataDir, "data-dir", "./corvo-data", "directory for all data (Raft log and Pebble shards)")
	fl.StringVar(&f.raftBind, "raft-bind", "127.0.0.1:9400", "Raft listen address (host:port); fixed for the life of the data dir")
	host, _ := os.Hostname()
	if host == "" {
		host = "node-1"
	}
	fl.StringVar(&f.nodeID, "node-id", host, "this node's name (default: the host name)")
	fl.BoolVar(&f.bootstrap, "bootstrap", false, "start a new cluster with this node as its first member (the default without --join)")
	fl.StringVar(&f.join, "join", "", "join the cluster of the node serving HTTP at host:port (comma-separated list: try each)")
	fl.StringVar(&f.raftAdvertise, "raft-advertise", "", "Raft address other nodes reach this node on (default: --raft-bind)")
	fl.StringVar(&f.httpAdvertise, "http-advertise", "", "HTTP address other nodes and clients reach this node on (default: --bind, with the Raft host when --bind has none)")
	fl.Uint64Var(&f.snapshotEntries, "snapshot-entries", shard.SnapshotEntriesDefault, "Raft entries each shard applies between snapshots (a replica further behind than a fifth of that catches up from a snapshot)")
	fl.StringVar(&f.secretFile, "cluster-secret-file", "", "file holding the cluster secret that node-to-node calls carry (env CORVO_CLUSTER_SECRET); a founding node without one generates it into <data-dir>/cluster-secret, a joining node must be given it")
	fl.IntVar(&f.replicas, "replicas", 3, "replicas per shard (set at bootstrap): each shard is placed on this many nodes, or on every node while there are fewer")
	fl.StringVar(&f.discover, "discover", "", `find peers automatically: "dns" (a Kubernetes headless service; the pod with ordinal 0 bootstraps, the rest join)`)
	fl.StringVar(&f.discoverService, "discover-service", "", "with --discover=dns: the headless service's DNS name (e.g. corvo-headless.default.svc.cluster.local)")
	fl.IntVar(&f.shards, "shards", 0, fmt.Sprintf("number of shards, fixed at first start (default %d)", shard.ShardsDefault))
	fl.IntVar(&f.maxPayload, "max-payload", gateway.MaxPayloadDefault, "largest job payload in bytes (413 above)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight requests")
	fl.DurationVar(&f.retention, "retention", shard.RetentionDefault, "how long completed, dead and cancelled jobs are kept (e.g. 168h); negative: forever")
	fl.BoolVar(&f.noMirror, "no-mirror", false, "run without the SQLite mirror (no search, no asynchronous bulk; more throughput)")
	fl.BoolVar(&f.noEvents, "no-events", false, "run without the event stream (GET /api/v1/events)")
	fl.IntVar(&f.cacheMB, "cache-mb", shard.CacheBytesDefault>>20, "Pebble block cache in MiB, shared by every shard")
	fl.StringVar(&f.pprofBind, "pprof-bind", "", "serve Go pprof profiles on this address (e.g. 127.0.0.1:6060); off when empty")
	fl.StringSliceVar(&f.corsOrigins, "cors-origin", envList("CORVO_CORS_ORIGINS"),
		`browser origin (scheme://host[:port], or "*") allowed to call the API from its pages; repeatable or comma-separated (default $CORVO_CORS_ORIGINS). Other origins cannot change anything`)
	strict, _ := strconv.ParseBool(os.Getenv("CORVO_STRICT_LEASES"))
	fl.BoolVar(&f.strictLeases, "strict-leases", strict,
		`ack, fail and heartbeat must name the lease's "attempt" (400 lease_required otherwise), so only the holder can complete a job or extend its lease (default $CORVO_STRICT_LEASES)`)
	return cmd
}

// envList splits a comma-separated environment variable; nil when unset.
func envList(name string) []string {
	var out []string
	for _, v := range strings.Split(os.Getenv(name), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// nodeMeta is written at first start (for a joining node: once the
// cluster has added it); settings that can never change are checked
// against it on every start.
type nodeMeta struct {
	Shards    int    `json:"shards"`
	RaftAddr  string `json:"raft_address"`
	NodeID    string `json:"node_id"`
	ReplicaID uint64 `json:"replica_id,omitempty"` // 0 in data dirs from before clustering: 1
	Joined    bool   `json:"joined,omitempty"`
	// Learner: joined as a non-voting replica. It stays true: such a node
	// always starts its replicas non-voting (see shard.Config.Learner).
	Learner bool `json:"learner,omitempty"`
}

func metaPath(dir string) string { return filepath.Join(dir, "corvo.json") }

// loadMeta reads corvo.json; ok is false when the data dir is new.
func loadMeta(dir string) (m nodeMeta, ok bool, err error) {
	b, err := os.ReadFile(metaPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, false, fmt.Errorf("%s is corrupt: %w", metaPath(dir), err)
	}
	if m.ReplicaID == 0 {
		m.ReplicaID = 1
	}
	return m, true, nil
}

func saveMeta(dir string, m nodeMeta) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	tmp := metaPath(dir) + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, metaPath(dir))
}

// checkMeta rejects flags that contradict what the data dir was made with.
func checkMeta(dir string, m nodeMeta, f *serverFlags) error {
	if f.shards != 0 && f.shards != m.Shards {
		return fmt.Errorf("--shards=%d but %s was created with %d shards; the shard count cannot change", f.shards, dir, m.Shards)
	}
	if f.raftAdvertise != m.RaftAddr {
		return fmt.Errorf("the Raft address %s (--raft-advertise, default --raft-bind) but %s belongs to Raft address %s", f.raftAdvertise, dir, m.RaftAddr)
	}
	return nil
}

// defaultAdvertise fills the advertised addresses from the bind addresses.
func (f *serverFlags) defaultAdvertise(hostname string) error {
	if f.discover == "dns" && f.discoverService != "" {
		// In Kubernetes, a pod's stable name is <pod>.<headless service>.
		stable := hostname + "." + f.discoverService
		if f.raftAdvertise == "" {
			_, port, err := net.SplitHostPort(f.raftBind)
			if err != nil {
				return fmt.Errorf("--raft-bind: %w", err)
			}
			f.raftAdvertise = net.JoinHostPort(stable, port)
		}
		if f.httpAdvertise == "" {
			_, port, err := net.SplitHostPort(f.bind)
			if err != nil {
				return fmt.Errorf("--bind: %w", err)
			}
			f.httpAdvertise = net.JoinHostPort(stable, port)
		}
	}
	if f.raftAdvertise == "" {
		f.raftAdvertise = f.raftBind
	}
	rhost, _, err := net.SplitHostPort(f.raftAdvertise)
	if err != nil {
		return fmt.Errorf("--raft-advertise: %w", err)
	}
	if rhost == "" || net.ParseIP(rhost).IsUnspecified() {
		return fmt.Errorf("the Raft address %s has no host other nodes can reach: set --raft-advertise", f.raftAdvertise)
	}
	if f.httpAdvertise == "" {
		host, port, err := net.SplitHostPort(f.bind)
		if err != nil {
			return fmt.Errorf("--bind: %w", err)
		}
		if host == "" || net.ParseIP(host).IsUnspecified() {
			host = rhost
		}
		f.httpAdvertise = net.JoinHostPort(host, port)
	}
	return nil
}

func runServer(ctx context.Context, f serverFlags) error {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("--log-level: %w", err)}
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("node", f.nodeID).Logger()
	hostname, _ := os.Hostname()
	if err := f.defaultAdvertise(hostname); err != nil {
		return &exitError{exitUsage, err}
	}
	if f.bootstrap && f.join != "" {
		return &exitError{exitUsage, errors.New("--bootstrap and --join exclude each other")}
	}
	if f.discover != "" && f.discover != "dns" {
		return &exitError{exitUsage, fmt.Errorf("--discover must be dns, not %q", f.discover)}
	}
	if f.discover == "dns" && f.discoverService == "" {
		return &exitError{exitUsage, errors.New("--discover=dns needs --discover-service")}
	}
	if f.replicas < 1 {
		return &exitError{exitUsage, errors.New("--replicas must be at least 1")}
	}
	if err := gateway.CheckCORSOrigins(f.corsOrigins); err != nil {
		return &exitError{exitUsage, fmt.Errorf("--cors-origin: %w", err)}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	meta, ok, err := loadMeta(f.dataDir)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	var secret string
	if ok {
		if err := checkMeta(f.dataDir, meta, &f); err != nil {
			return &exitError{exitUsage, err}
		}
		if secret, err = loadClusterSecret(f.dataDir, f.secretFile, meta.Joined, log); err != nil {
			return &exitError{exitUsage, err}
		}
	} else {
		join := f.join
		if join == "" && f.discover == "dns" {
			if join, err = discoverJoin(hostname, f.discoverService, f.bind, net.DefaultResolver); err != nil {
				return &exitError{exitUsage, err}
			}
		}
		if secret, err = loadClusterSecret(f.dataDir, f.secretFile, join != "", log); err != nil {
			return &exitError{exitUsage, err}
		}
		meta = nodeMeta{Shards: f.shards, RaftAddr: f.raftAdvertise, NodeID: f.nodeID, ReplicaID: 1}
		if meta.Shards == 0 {
			meta.Shards = shard.ShardsDefault
		}
		if join != "" {
			log.Info().Str("join", join).Msg("asking the cluster to add this node")
			info, err := joinCluster(sigCtx, join, joinRequestBody{Name: f.nodeID, RaftAddress: f.raftAdvertise, HTTPAddress: f.httpAdvertise}, secret, log)
			if err != nil {
				return &exitError{exitError_, err}
			}
			if f.shards != 0 && f.shards != info.Shards {
				return &exitError{exitUsage, fmt.Errorf("--shards=%d but the cluster has %d shards", f.shards, info.Shards)}
			}
			meta.Shards, meta.ReplicaID, meta.Joined, meta.Learner = info.Shards, info.NodeID, true, info.Learner
		}
		if err := saveMeta(f.dataDir, meta); err != nil {
			return &exitError{exitError_, err}
		}
	}
	ln, err := net.Listen("tcp", f.bind)
	if err != nil {
		return &exitError{exitError_, fmt.Errorf("listen on %s: %w", f.bind, err)}
	}
	if f.pprofBind != "" {
		go func() {
			if err := http.ListenAndServe(f.pprofBind, nil); err != nil {
				log.Warn().Err(err).Msg("pprof listener stopped")
			}
		}()
	}
	start := time.Now()
	var mir *mirror.Mirror
	hcfg := shard.Config{DataDir: f.dataDir, RaftAddress: meta.RaftAddr, RaftListen: f.raftBind, Shards: meta.Shards, Logger: log,
		CacheBytes: int64(f.cacheMB) << 20, Retention: f.retention,
		NodeID: meta.ReplicaID, NodeName: f.nodeID, HTTPAddress: f.httpAdvertise, Join: meta.Joined, Learner: meta.Learner, Replicas: f.replicas,
		SnapshotEntries: f.snapshotEntries,
		HoldOutbox:      os.Getenv("CORVO_TEST_HOLD_OUTBOX") == "1"} // test hook: see TestE2EOutboxSurvivesKill
	if !f.noMirror {
		if mir, err = mirror.Open(mirror.Config{Path: filepath.Join(f.dataDir, "mirror.db"), Logger: log}, meta.Shards); err != nil {
			ln.Close()
			return &exitError{exitError_, fmt.Errorf("open the mirror: %w", err)}
		}
		hcfg.JobChanges = true
	}
	var hub *events.Hub
	if !f.noEvents {
		hub = events.New(meta.Shards, events.CapacityDefault)
		hcfg.JobEvents = true
	}
	hcfg.OnApplied = fanOut(mir, hub)
	hcfg.OnShardRemoved = func(i int) {
		// The replica moved to other nodes: so do its search rows.
		if mir != nil {
			if err := mir.DropShard(i); err != nil {
				log.Warn().Err(err).Int("shard", i).Msg("dropping a moved shard's mirror rows failed")
			}
		}
	}
	closeMirror := func() {
		if mir != nil {
			mir.Close()
		}
	}
	openCtx, cancel := context.WithTimeout(sigCtx, 2*time.Minute)
	host, err := shard.Open(openCtx, hcfg)
	cancel()
	if err != nil {
		ln.Close()
		closeMirror()
		return &exitError{exitError_, fmt.Errorf("start shards: %w", err)}
	}
	removed := make(chan struct{})
	var removedOnce sync.Once
	gcfg := gateway.Config{MaxPayloadBytes: f.maxPayload, Logger: log, ClusterSecret: secret, CORSOrigins: f.corsOrigins, StrictLeases: f.strictLeases,
		OnRemoved: func() { removedOnce.Do(func() { close(removed) }) }}
	if hub != nil {
		if err := hub.StartFrom(host); err != nil {
			ln.Close()
			host.Close()
			closeMirror()
			return &exitError{exitError_, err}
		}
		gcfg.Events = hub
	}
	if mir != nil {
		if err := mir.Start(host); err != nil {
			ln.Close()
			host.Close()
			closeMirror()
			return &exitError{exitError_, err}
		}
		gcfg.Mirror = mir
	}
	gw := gateway.New(gcfg, host)
	host.SetRemote(gw.ProposeElsewhere) // outbox deliveries to shards placed on other nodes
	serveErr := make(chan error, 1)
	go func() { serveErr <- gw.Serve(ln) }()
	log.Info().Str("http", ln.Addr().String()).Str("raft", meta.RaftAddr).Int("shards", meta.Shards).Uint64("node_id", meta.ReplicaID).
		Str("data_dir", f.dataDir).Dur("startup", time.Since(start)).Msg("corvo server ready")

	select {
	case <-sigCtx.Done():
		log.Info().Msg("shutting down: draining requests")
	case <-removed:
		log.Warn().Msg("removed from the cluster: shutting down")
	case err := <-serveErr:
		host.Close()
		closeMirror()
		return &exitError{exitError_, fmt.Errorf("http server: %w", err)}
	}
	// Hand leaderships to other nodes first, so their shards keep
	// serving while this one drains.
	hoCtx, hoCancel := context.WithTimeout(context.Background(), handOffTimeout)
	if n := gw.HandOff(hoCtx); n > 0 {
		log.Info().Int("leaderships", n).Msg("handed leaderships to other nodes")
	}
	hoCancel()
	shutCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := gw.Shutdown(shutCtx); err != nil {
		log.Warn().Err(err).Msg("http shutdown did not finish cleanly")
	}
	if mir != nil {
		mir.StopReads() // no rebuild may read a shard while it closes
	}
	host.Close()
	closeMirror()
	log.Info().Msg("corvo server stopped")
	return nil
}

// fanOut feeds every committed Update to the mirror and the event ring
// (nil when neither runs).
func fanOut(mir *mirror.Mirror, hub *events.Hub) func(*statemachine.AppliedInfo) {
	switch {
	case mir != nil && hub != nil:
		return func(info *statemachine.AppliedInfo) { hub.Applied(info); mir.Applied(info) }
	case mir != nil:
		return mir.Applied
	case hub != nil:
		return hub.Applied
	}
	return nil
}
