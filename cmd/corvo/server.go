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
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/events"
	"github.com/corvohq/corvo/gateway"
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
}

func newServerCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Start a Corvo server (single node, embedded storage)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.bind, "bind", ":8080", "HTTP listen address")
	fl.StringVar(&f.dataDir, "data-dir", "./corvo-data", "directory for all data (Raft log and Pebble shards)")
	fl.StringVar(&f.raftBind, "raft-bind", "127.0.0.1:9400", "Raft listen address (host:port); fixed for the life of the data dir")
	fl.StringVar(&f.nodeID, "node-id", "node-1", "this node's name")
	fl.IntVar(&f.shards, "shards", 0, fmt.Sprintf("number of shards, fixed at first start (default %d)", shard.ShardsDefault))
	fl.IntVar(&f.maxPayload, "max-payload", gateway.MaxPayloadDefault, "largest job payload in bytes (413 above)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight requests")
	fl.DurationVar(&f.retention, "retention", shard.RetentionDefault, "how long completed, dead and cancelled jobs are kept (e.g. 168h); negative: forever")
	fl.BoolVar(&f.noMirror, "no-mirror", false, "run without the SQLite mirror (no search, no asynchronous bulk; more throughput)")
	fl.BoolVar(&f.noEvents, "no-events", false, "run without the event stream (GET /api/v1/events)")
	fl.IntVar(&f.cacheMB, "cache-mb", shard.CacheBytesDefault>>20, "Pebble block cache in MiB, shared by every shard")
	fl.StringVar(&f.pprofBind, "pprof-bind", "", "serve Go pprof profiles on this address (e.g. 127.0.0.1:6060); off when empty")
	return cmd
}

// nodeMeta is written at first start; settings that can never change are
// checked against it on every start.
type nodeMeta struct {
	Shards   int    `json:"shards"`
	RaftAddr string `json:"raft_address"`
	NodeID   string `json:"node_id"`
}

func loadOrInitMeta(dir string, f *serverFlags) (nodeMeta, error) {
	path := filepath.Join(dir, "corvo.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		m := nodeMeta{Shards: f.shards, RaftAddr: f.raftBind, NodeID: f.nodeID}
		if m.Shards == 0 {
			m.Shards = shard.ShardsDefault
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return m, err
		}
		out, _ := json.MarshalIndent(m, "", "  ")
		return m, os.WriteFile(path, append(out, '\n'), 0o644)
	}
	if err != nil {
		return nodeMeta{}, err
	}
	var m nodeMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s is corrupt: %w", path, err)
	}
	if f.shards != 0 && f.shards != m.Shards {
		return m, fmt.Errorf("--shards=%d but %s was created with %d shards; the shard count cannot change", f.shards, dir, m.Shards)
	}
	if f.raftBind != m.RaftAddr {
		return m, fmt.Errorf("--raft-bind=%s but %s belongs to Raft address %s", f.raftBind, dir, m.RaftAddr)
	}
	return m, nil
}

func runServer(ctx context.Context, f serverFlags) error {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("--log-level: %w", err)}
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("node", f.nodeID).Logger()
	meta, err := loadOrInitMeta(f.dataDir, &f)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	ln, err := net.Listen("tcp", f.bind)
	if err != nil {
		return &exitError{exitError_, fmt.Errorf("listen on %s: %w", f.bind, err)}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if f.pprofBind != "" {
		go func() {
			if err := http.ListenAndServe(f.pprofBind, nil); err != nil {
				log.Warn().Err(err).Msg("pprof listener stopped")
			}
		}()
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	start := time.Now()
	var mir *mirror.Mirror
	hcfg := shard.Config{DataDir: f.dataDir, RaftAddress: meta.RaftAddr, Shards: meta.Shards, Logger: log, CacheBytes: int64(f.cacheMB) << 20, Retention: f.retention,
		HoldOutbox: os.Getenv("CORVO_TEST_HOLD_OUTBOX") == "1"} // test hook: see TestE2EOutboxSurvivesKill
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
	gcfg := gateway.Config{MaxPayloadBytes: f.maxPayload, Logger: log}
	if hub != nil {
		if err := startEvents(hub, host); err != nil {
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
	serveErr := make(chan error, 1)
	go func() { serveErr <- gw.Serve(ln) }()
	log.Info().Str("http", ln.Addr().String()).Str("raft", meta.RaftAddr).Int("shards", meta.Shards).
		Str("data_dir", f.dataDir).Dur("startup", time.Since(start)).Msg("corvo server ready")

	select {
	case <-sigCtx.Done():
		log.Info().Msg("shutting down: draining requests")
	case err := <-serveErr:
		host.Close()
		closeMirror()
		return &exitError{exitError_, fmt.Errorf("http server: %w", err)}
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := gw.Shutdown(shutCtx); err != nil {
		log.Warn().Err(err).Msg("http shutdown did not finish cleanly")
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

// startEvents tells the event ring where each shard's history began for
// this run.
func startEvents(hub *events.Hub, host *shard.Host) error {
	opened := make([]uint64, host.Shards())
	for i := range opened {
		v, err := host.Read(i, statemachine.OpenedAtQuery{})
		if err != nil {
			return fmt.Errorf("events: shard %d: %w", i, err)
		}
		opened[i] = v.(uint64)
	}
	hub.Start(opened)
	return nil
}
