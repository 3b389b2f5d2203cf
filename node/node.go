// Package node assembles one Corvo node from a Config: the peer client
// (node-to-node), the shard host (dragonboat + Pebble), the mirror
// (SQLite), the event ring and the HTTP gateway, and runs them: Open, Serve, Shutdown. It also owns what a node
// keeps about itself in its data dir (corvo.json, the cluster secret) and
// how a new node joins its cluster (--join, DNS discovery). cmd/corvo maps
// flags to a Config; tests and `corvo bench --embedded` start nodes
// in-process through the same package.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/history"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// Node is one running Corvo node.
type Node struct {
	cfg  Config
	log  zerolog.Logger
	ln   net.Listener
	host *shard.Host
	mir  *mirror.Mirror // nil with NoMirror
	hist *history.Recorder
	hub  *events.Hub // nil with NoEvents
	gw   *gateway.Server
	peer *peer.Client
	mem  *nodeMemory

	clusterSecret string   // loaded by prepareDataDir
	tls           *nodeTLS // nil without TLS

	removed     chan struct{} // closed when another member says this node was removed
	removedOnce sync.Once
	shutCh      chan struct{} // closed when Shutdown begins
	shutOnce    sync.Once
	shutErr     error
	meta        meta
}

// Open prepares the data dir (a new one founds a cluster or joins one),
// opens the shards, the mirror and the event ring, builds the gateway and
// listens on cfg.Bind; Serve then serves. On any error everything already
// opened is closed again. ctx bounds the opening (joining included).
func Open(ctx context.Context, cfg Config) (n *Node, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, &ConfigError{err}
	}
	if cfg.Gateway.OIDC.ClientSecret, err = cfg.oidcClientSecret(); err != nil {
		return nil, &ConfigError{err}
	}
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
		if cfg.NodeName == "" {
			cfg.NodeName = "node-1"
		}
	}
	hostname, _ := os.Hostname()
	if err := cfg.advertise(hostname); err != nil {
		return nil, &ConfigError{err}
	}
	log := cfg.Logger
	n = &Node{cfg: cfg, log: log, removed: make(chan struct{}), shutCh: make(chan struct{})}
	if n.tls, err = loadTLS(cfg); err != nil {
		return nil, &ConfigError{err}
	}

	// The closer stack: each step that opens something pushes how to
	// close it (bound to what it opened: the error paths return a nil
	// Node); an error unwinds what is there, last first.
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	if err := n.prepareDataDir(ctx, hostname); err != nil {
		return nil, err
	}
	cfg = n.cfg // with the cluster secret
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Bind, err)
	}
	closers = append(closers, func() { _ = ln.Close() })
	if n.tls != nil {
		ln = tls.NewListener(ln, n.tls.serverConfig())
	}
	n.ln = ln

	m := n.meta
	plan, from, err := cfg.memoryPlan(m.Shards, membudget.System{})
	if err != nil {
		return nil, &ConfigError{err}
	}
	log.Info().Str("budget", plan.String()).Str("from", from).Msg("memory budget")
	n.mem = newNodeMemory(plan)
	hcfg := shard.Config{DataDir: cfg.DataDir, RaftAddress: m.RaftAddr, RaftListen: cfg.RaftBind, Shards: m.Shards, Logger: log,
		CacheBytes: cfg.CacheBytes, Retention: cfg.Retention, AuditRetention: cfg.AuditRetention,
		NodeID: m.ReplicaID, NodeName: cfg.NodeName, HTTPAddress: cfg.HTTPAdvertise, Join: m.Joined, Learner: m.Learner, Replicas: cfg.Replicas,
		SnapshotEntries: cfg.SnapshotEntries, SnapshotBytes: cfg.SnapshotBytes,
		RTTMillisecond: cfg.Test.RTTMillisecond, ElectionRTT: cfg.Test.ElectionRTT, TickInterval: cfg.Test.TickInterval,
		HoldOutbox: cfg.Test.HoldOutbox,
		TLSCAFile:  cfg.PeerTLSCA, TLSCertFile: cfg.PeerTLSCert, TLSKeyFile: cfg.PeerTLSKey}
	n.mem.size(&hcfg, cfg.CacheBytes)
	// The peer client first: the shard host's outbox relay reaches shards
	// placed on other nodes through it; it learns the membership from the
	// host once that is open (Start).
	pcfg := peer.Config{Secret: n.clusterSecret, RequestTimeout: cfg.Gateway.WithDefaults().RequestTimeout, Logger: log}
	if n.tls != nil {
		pcfg.TLS, pcfg.PeerCerts = n.tls.clientConfig(), n.tls.peer != nil
	}
	n.peer = peer.New(pcfg)
	hcfg.Remote = n.peer.Propose
	if !cfg.NoMirror {
		mcfg := mirror.Config{Path: filepath.Join(cfg.DataDir, "mirror.db"), Shards: m.Shards, Logger: log, FlushWindow: cfg.Test.MirrorFlushWindow,
			PayloadMax: cfg.MirrorPayloadMax, Buffer: n.mem.mirrorQ, CacheBytes: plan.SQLite}
		if n.mir, err = mirror.Open(mcfg); err != nil {
			return nil, fmt.Errorf("open the mirror: %w", err)
		}
		closers = append(closers, n.mir.Close)
		hcfg.JobChanges = true
	}
	if !cfg.NoEvents {
		if n.hub, err = events.New(events.Config{Shards: m.Shards, Capacity: cfg.Test.EventsCapacity}); err != nil {
			return nil, fmt.Errorf("open the event ring: %w", err)
		}
		hcfg.JobEvents = true
	}
	// The queues' history: latency from the Updates' job changes (there
	// when the mirror runs), counts sampled by the gateway.
	hist := history.Config{Shards: m.Shards}
	if c := cfg.Test.Clock; c != nil {
		hcfg.Clock, hist.Now = c, c.Now
	}
	if n.hist, err = history.New(hist); err != nil {
		return nil, fmt.Errorf("open the history: %w", err)
	}
	closers = append(closers, n.hist.Close)
	hook := cfg.Test.OnApplied
	if hcfg.JobChanges {
		hook = chain(n.hist.Applied, hook)
	}
	hcfg.OnApplied = fanOut(n.mir, n.hub, hook)
	if d := cfg.Test.ApplyDelay; d > 0 {
		inner := hcfg.OnApplied
		hcfg.OnApplied = func(info *statemachine.AppliedInfo) {
			if inner != nil {
				inner(info)
			}
			time.Sleep(d)
		}
	}
	hcfg.OnShardRemoved = func(i int) {
		// The replica moved to other nodes: so do its search rows.
		if n.mir != nil {
			if err := n.mir.DropShard(i); err != nil {
				log.Warn().Err(err).Int("shard", i).Msg("dropping a moved shard's mirror rows failed")
			}
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, OpenTimeoutDefault)
	n.host, err = shard.Open(openCtx, hcfg)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start shards: %w", err)
	}
	closers = append(closers, n.host.Close)
	n.mem.start(n.host, n.hub, n.releaseCaches)
	closers = append(closers, n.mem.close)
	n.peer.Start(n.host)
	closers = append(closers, n.peer.Close)
	if n.mir != nil {
		// No rebuild may read a shard while it closes.
		closers = append(closers, n.mir.StopReads)
	}

	gcfg := cfg.gatewayConfig() // checked by Validate
	if gcfg.FreeDisk == nil {
		gcfg.FreeDisk = volumeSpace(cfg.DataDir) // --min-free-disk
	}
	gcfg.OnRemoved = func() { n.removedOnce.Do(func() { close(n.removed) }) }
	if n.hub != nil {
		if err := n.hub.StartFrom(n.host); err != nil {
			return nil, err
		}
		gcfg.Events = n.hub
	}
	if n.mir != nil {
		if err := n.mir.Start(n.host); err != nil {
			return nil, err
		}
		gcfg.Mirror = n.mir
	}
	if err := n.ensureAdminKey(ctx); err != nil {
		return nil, err
	}
	gcfg.Peer, gcfg.Cluster, gcfg.Keys = n.peer, n.host, n.host
	gcfg.History = n.hist
	gcfg.SessionKey = gateway.SessionKeyFrom(n.clusterSecret) // a UI session holds on every node
	gcfg.Memory = n.mem.bodies
	n.gw = gateway.New(gcfg, n.host)
	return n, nil
}

// ConfigError is a Config that cannot work (a usage error).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// prepareDataDir reads corvo.json, or, for a new data dir, founds a
// cluster or joins one (asking a member to add this node) and writes it;
// then loads the cluster secret.
func (n *Node) prepareDataDir(ctx context.Context, hostname string) error {
	cfg := &n.cfg
	m, ok, err := loadMeta(cfg.DataDir)
	if err != nil {
		return &ConfigError{err}
	}
	if ok {
		if err := m.check(cfg); err != nil {
			return &ConfigError{err}
		}
		if n.clusterSecret, err = n.secret(m.Joined); err != nil {
			return &ConfigError{err}
		}
		n.meta = m
		return nil
	}
	join := cfg.Join
	if join == "" && cfg.Discover == "dns" {
		if join, err = discoverJoin(hostname, cfg.DiscoverService, cfg.Bind, net.DefaultResolver); err != nil {
			return &ConfigError{err}
		}
	}
	if n.clusterSecret, err = n.secret(join != ""); err != nil {
		return &ConfigError{err}
	}
	m = meta{Shards: cfg.Shards, RaftAddr: cfg.RaftAdvertise, NodeID: cfg.NodeName, ReplicaID: 1}
	if m.Shards == 0 {
		m.Shards = shard.ShardsDefault
	}
	if join != "" {
		n.log.Info().Str("join", join).Msg("asking the cluster to add this node")
		info, err := joinCluster(ctx, join, joinRequestBody{Name: cfg.NodeName, RaftAddress: cfg.RaftAdvertise, HTTPAddress: cfg.HTTPAdvertise},
			n.clusterSecret, n.joinTLS(), n.log)
		if err != nil {
			return err
		}
		if cfg.Shards != 0 && cfg.Shards != info.Shards {
			return &ConfigError{fmt.Errorf("--shards=%d but the cluster has %d shards", cfg.Shards, info.Shards)}
		}
		m.Shards, m.ReplicaID, m.Joined, m.Learner = info.Shards, info.NodeID, true, info.Learner
	}
	if err := saveMeta(cfg.DataDir, m); err != nil {
		return err
	}
	n.meta = m
	return nil
}

func (n *Node) secret(joining bool) (string, error) {
	return LoadClusterSecret(n.cfg.DataDir, n.cfg.ClusterSecretFile, n.cfg.ClusterSecret, joining, n.log)
}

// fanOut feeds every committed Update to the mirror, the event ring and a
// test hook (nil when none of them runs).
func fanOut(mir *mirror.Mirror, hub *events.Hub, hook func(*statemachine.AppliedInfo)) func(*statemachine.AppliedInfo) {
	var fs []func(*statemachine.AppliedInfo)
	if hub != nil {
		fs = append(fs, hub.Applied)
	}
	if mir != nil {
		fs = append(fs, mir.Applied)
	}
	if hook != nil {
		fs = append(fs, hook)
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	case 2:
		a, b := fs[0], fs[1]
		return func(info *statemachine.AppliedInfo) { a(info); b(info) }
	}
	return func(info *statemachine.AppliedInfo) {
		for _, f := range fs {
			f(info)
		}
	}
}

// chain calls a, then b when there is one.
func chain(a, b func(*statemachine.AppliedInfo)) func(*statemachine.AppliedInfo) {
	if b == nil {
		return a
	}
	return func(info *statemachine.AppliedInfo) { a(info); b(info) }
}

// History is the node's record of its queues' rates, counts and latency.
func (n *Node) History() *history.Recorder { return n.hist }

// Addr is the address the node's HTTP server listens on.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Meta is this node's identity: its replica ID, shard count and Raft address.
func (n *Node) Meta() (replicaID uint64, shards int, raftAddr string) {
	return n.meta.ReplicaID, n.meta.Shards, n.meta.RaftAddr
}

// Host is the node's shard host (tests put other gateways in front of it).
func (n *Node) Host() *shard.Host { return n.host }

// Mirror is the node's mirror, nil with NoMirror.
func (n *Node) Mirror() *mirror.Mirror { return n.mir }

// Events is the node's event ring, nil with NoEvents.
func (n *Node) Events() *events.Hub { return n.hub }

// Removed is closed when another member told this node it was removed
// from the cluster: the node should shut down.
func (n *Node) Removed() <-chan struct{} { return n.removed }

// Serve serves HTTP until Shutdown (it then returns nil) or the listener
// fails.
func (n *Node) Serve() error {
	err := n.gw.Serve(n.ln)
	select {
	case <-n.closing():
		return nil
	default:
	}
	return err
}

// closing is closed once Shutdown has begun.
func (n *Node) closing() <-chan struct{} { return n.shutCh }

// Shutdown stops the node in order: hand this node's shard leaderships to
// other nodes (so their shards keep serving while this one drains), stop
// the gateway (no new connections; in-flight requests finish within
// ShutdownTimeout, long-polls return), stop the mirror's reads of the
// shards, close the shard host, then the mirror. Later calls return the
// first one's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() {
		close(n.shutCh)
		hoCtx, cancel := context.WithTimeout(ctx, HandOffTimeout)
		if k := n.peer.HandOff(hoCtx); k > 0 {
			n.log.Info().Int("leaderships", k).Msg("handed leaderships to other nodes")
		}
		cancel()
		shutCtx, cancel := context.WithTimeout(ctx, n.cfg.ShutdownTimeout)
		defer cancel()
		if err := n.gw.Shutdown(shutCtx); err != nil {
			n.shutErr = fmt.Errorf("http shutdown did not finish cleanly: %w", err)
		}
		if n.mir != nil {
			n.mir.StopReads() // no rebuild may read a shard while it closes
		}
		n.peer.Close()
		n.host.Close()
		if n.mir != nil {
			n.mir.Close()
		}
		n.hist.Close()
		n.mem.close()
	})
	return n.shutErr
}

// Close stops the node at once, without the leadership hand-off or the
// drain (a failed start, or a test).
func (n *Node) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		n.log.Debug().Err(err).Msg("close")
	}
}

// Ready logs that the node serves, with how long it took since start.
func (n *Node) Ready(start time.Time) {
	n.log.Info().Str("http", n.Addr()).Str("raft", n.meta.RaftAddr).Int("shards", n.meta.Shards).Uint64("node_id", n.meta.ReplicaID).
		Str("data_dir", n.cfg.DataDir).Dur("startup", time.Since(start)).Msg("corvo server ready")
}
