package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Run is `corvo server`: it opens the node, serves until ctx ends (SIGTERM)
// or the cluster removes the node, then shuts down in order; SIGHUP reads
// the TLS certificates again. The Go profiler, when Config.PprofBind is
// set, has its own listener, which must be on loopback: it is never served
// on the API's port.
func Run(ctx context.Context, cfg Config) error {
	start := time.Now()
	n, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	log := n.log
	if cfg.PprofBind != "" {
		stop, err := servePprof(cfg.PprofBind)
		if err != nil {
			n.Close()
			return err
		}
		defer stop()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- n.Serve() }()
	// SIGHUP reads the TLS certificates again (only with TLS: without it
	// SIGHUP keeps its default meaning).
	var hup chan os.Signal
	if n.tls != nil {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	n.Ready(start)
	for {
		select {
		case <-hup:
			_ = n.ReloadTLS() // logged; the certificates in use stay
			continue
		case <-ctx.Done():
			log.Info().Msg("shutting down: draining requests")
		case <-n.Removed():
			log.Warn().Msg("removed from the cluster: shutting down")
		case err := <-serveErr:
			n.Close()
			return fmt.Errorf("http server: %w", err)
		}
		break
	}
	if err := n.Shutdown(context.Background()); err != nil {
		log.Warn().Err(err).Msg("shutdown")
	}
	log.Info().Msg("corvo server stopped")
	return nil
}

// servePprof serves the Go profiler on bind (loopback only) until stop.
func servePprof(bind string) (stop func(), err error) {
	if !Loopback(bind) {
		return nil, &ConfigError{fmt.Errorf("--pprof-bind %s: the profiler listens on loopback only (127.0.0.1:6060, [::1]:6060, localhost:6060)", bind)}
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("--pprof-bind: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed: nothing to serve any more
		}
	}()
	return func() { _ = srv.Close(); <-done }, nil
}
