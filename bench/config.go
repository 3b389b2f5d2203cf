// Package bench implements the HTTP load generator behind `corvo bench`.
//
// It is a pure HTTP client: it talks to a running Corvo server through the
// public JSON API (enqueue, fetch, ack) and measures throughput and latency.
// Four modes are supported:
//
//   - "enqueue": producers only; measures enqueue throughput and latency.
//   - "lifecycle": enqueue everything first, then fetch+ack until drained,
//     reporting both phases separately and the combined lifecycle rate.
//   - "e2e": producers and workers run concurrently; measures completed jobs/s
//     and enqueue-to-start / enqueue-to-ack latency.
//   - "fixed-rate": open loop: Senders send jobs on a fixed schedule of Rate
//     jobs/s (job i is due at start+i/Rate, sent then whatever the answers
//     to earlier jobs), while workers fetch and ack them; measures the
//     enqueue-to-delivery latency under a load below saturation.
//
// Every worker fetches from all Queues, rotating the list by one queue per
// fetch (each worker starting at a different queue), so no queue is
// favoured by its position; producers spread jobs over the queues
// round-robin.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// Benchmark modes accepted in Config.Mode.
const (
	ModeEnqueue   = "enqueue"
	ModeLifecycle = "lifecycle"
	ModeE2E       = "e2e"
	ModeFixedRate = "fixed-rate"
)

// Defaults applied by Config.WithDefaults for zero-valued fields.
const (
	DefaultProducers    = 16
	DefaultWorkers      = 16
	DefaultEnqueueBatch = 1
	DefaultFetchBatch   = 1
	DefaultAckBatch     = 1
	DefaultQueues       = 1
	DefaultQueuePrefix  = "bench"
	DefaultPayloadSize  = 64
	DefaultFetchTimeout = 1
	DefaultSenders      = 32
)

// MaxEnqueueBatch is the largest batch accepted by POST /api/v1/enqueue/batch.
const MaxEnqueueBatch = 10000

// Config describes one benchmark run.
type Config struct {
	// URL is the base URL of the Corvo server, e.g. http://127.0.0.1:8080,
	// or several nodes of a cluster, comma-separated: producers and
	// workers are spread over them round-robin.
	URL string
	// APIKey is sent on every request as "Authorization: Bearer"; "" sends
	// none (a server open on loopback). Mode enqueue needs a key that may
	// enqueue (producer); the others enqueue and work jobs, which of the
	// built-in roles only admin may do both of.
	APIKey string
	// TLSConfig, when set, is the TLS configuration of https:// URLs (a
	// CA to trust: corvo.TLSConfigFromCA); nil: the system's roots.
	TLSConfig *tls.Config
	// Mode is one of "enqueue", "lifecycle", "e2e" or "fixed-rate".
	Mode string
	// Duration is how long to produce jobs; it is only used when Jobs == 0.
	// In fixed-rate mode it means Rate*Duration jobs.
	Duration time.Duration
	// Jobs stops the run after this many jobs: enqueued for "enqueue" mode,
	// completed (acked) for the other modes.
	Jobs int
	// Producers is the number of concurrent producer goroutines (default
	// 16); fixed-rate mode uses Senders instead.
	Producers int
	// Workers is the number of concurrent worker goroutines (default 16).
	Workers int
	// EnqueueBatch is the number of jobs per enqueue request; 1 uses
	// POST /enqueue, >1 uses POST /enqueue/batch (default 1).
	EnqueueBatch int
	// FetchBatch is the number of jobs per fetch; 1 uses a plain fetch, >1
	// adds "count" to the fetch request (default 1).
	FetchBatch int
	// AckBatch is the number of acks per request; 1 uses POST /ack/{id}, >1
	// uses POST /ack/batch (default 1).
	AckBatch int
	// AckFetch (with FetchBatch and AckBatch 1): each ack carries the
	// worker's next fetch (count 1, no wait), so while jobs are pending a
	// worker makes one request per job; an ack that brings no job is
	// followed by a long-poll fetch as usual.
	AckFetch bool
	// Queues is the number of queues, named <QueuePrefix>.q0 ... (default 1).
	// Producers spread jobs over them round-robin; every worker fetches
	// from all of them, in an order rotated by one queue per fetch.
	Queues int
	// Placement, for a cluster: read the placement from the first URL's
	// cluster status and send each request straight to a node hosting its
	// shard (placement.go); the URLs then only name where to ask.
	Placement bool
	// QueuePrefix prefixes the queue names (default "bench").
	QueuePrefix string
	// PayloadSize is the approximate size of each job payload in bytes
	// (default 64).
	PayloadSize int
	// Rate, if > 0, is the combined steady enqueue rate of all producers in
	// jobs/s. Useful for latency measurements below saturation. In modes
	// other than fixed-rate the producers are paced by tokens that are
	// dropped when they fall behind (closed loop); fixed-rate mode requires
	// it and sends on schedule (open loop).
	Rate int
	// Senders is the number of concurrent sender goroutines of fixed-rate
	// mode (default 32): each sends the next due job, so up to Senders
	// enqueue requests may be outstanding before the schedule slips.
	Senders int
	// SkipServerCPU disables reading process_cpu_seconds_total from the
	// servers' /api/v1/metrics before and after the run (set it when the
	// server runs in the benchmark's own process, whose CPU time would
	// include the load generator's).
	SkipServerCPU bool
	// FetchTimeout is the long-poll timeout of fetch requests in seconds
	// (default 1).
	FetchTimeout int
	// JobTime is how long each job's handler runs before its ack (a
	// sleep, which keeps the worker's slot busy as real work would; 0:
	// none). With it the figures show what the ack round trip costs a
	// worker whose handlers take time: a slot waits for it between jobs.
	JobTime time.Duration
	// sleep waits out JobTime (nil: sleepCtx; tests replace it).
	sleep func(context.Context, time.Duration) error
	// Client is "http" (default: the load generator's own requests, shaped
	// by the batch settings) or "sdk" (mode e2e only: the Go SDK's
	// Client.Enqueue from Producers goroutines and one Worker of Workers
	// slots, untuned; the batch settings do not apply).
	Client string
	// Out receives progress lines while the benchmark runs; nil disables them.
	Out io.Writer
}

// WithDefaults returns a copy of c with zero-valued fields set to their
// defaults. Mode, URL, Duration, Jobs and Rate have no defaults.
func (c Config) WithDefaults() Config {
	setDefault(&c.Producers, DefaultProducers)
	setDefault(&c.Workers, DefaultWorkers)
	setDefault(&c.EnqueueBatch, DefaultEnqueueBatch)
	setDefault(&c.FetchBatch, DefaultFetchBatch)
	setDefault(&c.AckBatch, DefaultAckBatch)
	setDefault(&c.Queues, DefaultQueues)
	setDefault(&c.PayloadSize, DefaultPayloadSize)
	setDefault(&c.FetchTimeout, DefaultFetchTimeout)
	setDefault(&c.Senders, DefaultSenders)
	if c.QueuePrefix == "" {
		c.QueuePrefix = DefaultQueuePrefix
	}
	c.Mode = strings.ToLower(strings.TrimSpace(c.Mode))
	if c.Client == "" {
		c.Client = ClientHTTP
	}
	return c
}

func setDefault(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

// Validate reports the first problem found in c. Zero values are accepted
// wherever WithDefaults supplies a default.
func (c Config) Validate() error {
	if err := validateURLs(c.URL); err != nil {
		return err
	}
	mode := strings.ToLower(strings.TrimSpace(c.Mode))
	switch mode {
	case ModeEnqueue, ModeLifecycle, ModeE2E:
	case ModeFixedRate:
		if c.Rate <= 0 {
			return errors.New("bench: fixed-rate mode needs a rate > 0 (jobs/s)")
		}
	case "":
		return errors.New("bench: mode is required (enqueue, lifecycle, e2e or fixed-rate)")
	default:
		return fmt.Errorf("bench: unknown mode %q (want enqueue, lifecycle, e2e or fixed-rate)", c.Mode)
	}
	switch c.Client {
	case "", ClientHTTP:
	case ClientSDK:
		if mode != ModeE2E {
			return fmt.Errorf("bench: client sdk runs mode e2e only, not %q", mode)
		}
		if strings.Contains(c.URL, ",") {
			return errors.New("bench: client sdk takes one URL")
		}
	default:
		return fmt.Errorf("bench: unknown client %q (want http or sdk)", c.Client)
	}
	if c.JobTime < 0 {
		return fmt.Errorf("bench: job time must not be negative, got %s", c.JobTime)
	}
	if c.Duration < 0 {
		return fmt.Errorf("bench: duration must not be negative, got %s", c.Duration)
	}
	if c.Jobs < 0 {
		return fmt.Errorf("bench: jobs must not be negative, got %d", c.Jobs)
	}
	if c.Jobs == 0 && c.Duration == 0 {
		return errors.New("bench: either jobs or duration must be set")
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"producers", c.Producers},
		{"workers", c.Workers},
		{"enqueue batch", c.EnqueueBatch},
		{"fetch batch", c.FetchBatch},
		{"ack batch", c.AckBatch},
		{"queues", c.Queues},
		{"payload size", c.PayloadSize},
		{"rate", c.Rate},
		{"senders", c.Senders},
		{"fetch timeout", c.FetchTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("bench: %s must not be negative, got %d", f.name, f.v)
		}
	}
	if mode == ModeFixedRate && c.EnqueueBatch > 1 {
		return errors.New("bench: fixed-rate mode sends one job per request (no enqueue batch)")
	}
	if c.EnqueueBatch > MaxEnqueueBatch {
		return fmt.Errorf("bench: enqueue batch must be at most %d, got %d", MaxEnqueueBatch, c.EnqueueBatch)
	}
	return nil
}

// urls splits URL into its servers.
func (c Config) urls() []string {
	var out []string
	for _, u := range strings.Split(c.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func validateURLs(raw string) error {
	if strings.Trim(raw, ", ") == "" {
		return errors.New("bench: url is required")
	}
	for _, u := range (Config{URL: raw}).urls() {
		if err := validateURL(u); err != nil {
			return err
		}
	}
	return nil
}

func validateURL(raw string) error {
	if raw == "" {
		return errors.New("bench: url is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("bench: invalid url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("bench: url %q must use http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("bench: url %q has no host", raw)
	}
	return nil
}

// queueNames returns the queue names used by the run.
func (c Config) queueNames() []string {
	names := make([]string, c.Queues)
	for i := range names {
		names[i] = fmt.Sprintf("%s.q%d", c.QueuePrefix, i)
	}
	return names
}
