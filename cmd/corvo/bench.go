package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/corvohq/corvo/bench"
	"github.com/corvohq/corvo/node"
)

func newBenchCmd() *cobra.Command {
	var cfg bench.Config
	var output, cpuProfile string
	var embedded bool
	var shards int
	var serverArgs []string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a Corvo server over HTTP (or an embedded one in a temp dir)",
		Long: `Load-test a Corvo server over HTTP (or an embedded one in a temp dir).

Modes: enqueue (producers only), lifecycle (enqueue everything, then work
the backlog), e2e (producers and workers at once, as fast as they go) and
fixed-rate (open loop: --senders send one job per request on a fixed
schedule of --rate jobs/s, job i due at start+i/rate whatever the answers
to earlier ones, while --workers fetch and ack; reports the
enqueue-to-delivery latency, from the enqueue request being sent to the
fetch answer arriving, as the peers' harness in shared/peers measures it,
and how late the senders were behind the schedule).

Producers spread jobs over --queues round-robin; every worker fetches from
all of them, the list rotated by one queue per fetch.

-o json prints one line of JSON: the report, the servers' CPU seconds
(process_cpu_seconds_total before and after; not with the embedded server,
whose process is also the load generator's) and the figures named as in
the peers' harness (enqueue_single_jobs_s, enqueue_bulk_jobs_s,
process_jobs_s, e2e_jobs_s, e2e_p50_ms, fixed_rate_p99_ms, ...).`,
		Example: `  corvo bench --mode lifecycle --jobs 100000
  corvo bench --mode e2e --duration 10s --rate 1000
  corvo bench --mode e2e --jobs 100000 --producers 16 --workers 32 --queues 8 --payload-size 35
  corvo bench --client sdk --mode e2e --jobs 100000 --producers 16 --workers 32
  corvo bench --client sdk --mode e2e --job-time 2ms --producers 16 --workers 32 --queues 8
  corvo bench --mode fixed-rate --rate 1000 --senders 32 --workers 8 --queues 8 --duration 20s -o json
  corvo bench --url http://10.0.0.5:8080 --mode enqueue --enqueue-batch 100 --jobs 1000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return &exitError{exitUsage, fmt.Errorf("--output must be table or json")}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if embedded || !cmd.Flags().Changed("url") && os.Getenv("CORVO_URL") == "" {
				url, shutdown, err := startEmbedded(shards, serverArgs)
				if err != nil {
					return &exitError{exitError_, err}
				}
				defer shutdown()
				cfg.URL = url
				cfg.SkipServerCPU = true // its process is this one
			} else {
				// The embedded server is open on loopback and knows no key.
				cfg.APIKey = apiKey()
				cfg.TLSConfig = clientTLS // --tls-ca
			}
			cfg.Out = os.Stderr
			cfg = cfg.WithDefaults()
			if err := cfg.Validate(); err != nil {
				return &exitError{exitUsage, err}
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return &exitError{exitError_, err}
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return &exitError{exitError_, err}
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.Run(ctx, cfg)
			if rep != nil {
				if output == "json" {
					_ = rep.WriteJSON(cmd.OutOrStdout())
				} else {
					_ = rep.WriteText(cmd.OutOrStdout())
				}
			}
			if errors.Is(err, bench.ErrRefused) {
				err = fmt.Errorf("%w\n%s", err, authHint())
			}
			if err != nil {
				return &exitError{exitError_, err}
			}
			return nil
		},
	}
	def := os.Getenv("CORVO_URL")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.URL, "url", def, "server to load, or a comma-separated list of cluster nodes to spread the load over (default: start an embedded server in a temp dir)")
	fl.BoolVar(&embedded, "embedded", false, "start an embedded server in a temp dir even if --url/CORVO_URL is set")
	fl.IntVar(&shards, "shards", 0, "shards of the embedded server")
	fl.StringArrayVar(&serverArgs, "server-arg", nil, "extra flag for the embedded server (repeatable), e.g. --server-arg=--no-mirror")
	fl.StringVar(&cfg.Mode, "mode", "e2e", "enqueue, lifecycle, e2e or fixed-rate")
	fl.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run (when --jobs is 0; fixed-rate: rate x duration jobs)")
	fl.IntVar(&cfg.Jobs, "jobs", 0, "stop after this many jobs")
	fl.IntVar(&cfg.Producers, "producers", 16, "concurrent producers (not fixed-rate)")
	fl.IntVar(&cfg.Senders, "senders", bench.DefaultSenders, "fixed-rate: concurrent open-loop senders")
	fl.IntVar(&cfg.Workers, "workers", 16, "concurrent workers")
	fl.IntVar(&cfg.EnqueueBatch, "enqueue-batch", 1, "jobs per enqueue request")
	fl.IntVar(&cfg.FetchBatch, "fetch-batch", 1, "jobs per fetch")
	fl.IntVar(&cfg.AckBatch, "ack-batch", 1, "acks per request")
	fl.BoolVar(&cfg.AckFetch, "ack-fetch", false, "with --fetch-batch 1 and --ack-batch 1: each ack carries the next fetch (count 1, no wait), one request per job while jobs are pending")
	fl.IntVar(&cfg.Queues, "queues", 1, "number of queues (every worker fetches from all, in rotating order)")
	fl.StringVar(&cfg.QueuePrefix, "queue-prefix", bench.DefaultQueuePrefix, "the queues are <prefix>.q0, <prefix>.q1, ... (their names choose their shards)")
	fl.BoolVar(&cfg.Placement, "placement", false, "cluster: read the placement from the first --url and send each request straight to a node hosting its shard (each worker then fetches from its node's queues)")
	fl.IntVar(&cfg.PayloadSize, "payload-size", 64, "approximate payload bytes")
	fl.IntVar(&cfg.Rate, "rate", 0, "steady enqueue rate in jobs/s (0: as fast as possible; required by fixed-rate)")
	fl.IntVar(&cfg.FetchTimeout, "fetch-timeout", 1, "long-poll seconds")
	fl.DurationVar(&cfg.JobTime, "job-time", 0, "how long each job's handler runs before its ack (a sleep: a worker's slot is busy as real work keeps it, e.g. 2ms); 0: none")
	fl.StringVar(&cfg.Client, "client", bench.ClientHTTP, "http (the load generator's own requests) or sdk (e2e through the Go SDK: Client.Enqueue from --producers goroutines, one Worker of --workers slots, untuned)")
	fl.StringVarP(&output, "output", "o", "table", "table or json (one line)")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write this process's CPU profile (the load generator's, or the SDK client's with --client sdk) to the file")
	return cmd
}

// startEmbedded starts a node in this process, in a temp dir, through the
// node package — the same assembly as `corvo server`, with the server's
// flags (extra) — so the load generator measures a real server over real
// HTTP.
func startEmbedded(shards int, extra []string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "corvo-bench-")
	if err != nil {
		return "", nil, err
	}
	httpAddr, raftAddr := freePort(), freePort()
	if httpAddr == "" || raftAddr == "" {
		return "", nil, fmt.Errorf("no free port")
	}
	var f serverFlags
	fl := pflag.NewFlagSet("server", pflag.ContinueOnError)
	f.register(fl)
	args := append([]string{"--bind", httpAddr, "--raft-bind", raftAddr, "--data-dir", dir, "--log-level", "warn"}, extra...)
	if shards > 0 {
		args = append(args, "--shards", strconv.Itoa(shards))
	}
	if err := fl.Parse(args); err != nil {
		return "", nil, fmt.Errorf("--server-arg: %w", err)
	}
	cfg, err := f.config()
	if err != nil {
		return "", nil, err
	}
	n, err := node.Open(context.Background(), cfg)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	go func() { _ = n.Serve() }()
	shutdown := func() {
		_ = n.Shutdown(context.Background())
		_ = os.RemoveAll(dir)
	}
	return "http://" + n.Addr(), shutdown, nil
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}
