package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

const testJobs = 500

// testConfig returns a small configuration against f.
func testConfig(f *fakeServer, mode string) Config {
	return Config{URL: f.URL, Mode: mode, Jobs: testJobs, Producers: 4, Workers: 4}
}

// requireAllAcked checks that the fake saw every job acked exactly once.
func requireAllAcked(t *testing.T, f *fakeServer, jobs int) {
	t.Helper()
	n, maxPerJob := f.ackCounts()
	require.Equal(t, jobs, n, "distinct acked jobs")
	require.Equal(t, 1, maxPerJob, "no job acked twice")
}

func TestRunModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeEnqueue, ModeLifecycle, ModeE2E} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t)
			var out bytes.Buffer
			cfg := testConfig(f, mode)
			cfg.Out = &out

			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)

			require.Equal(t, mode, rep.Mode)
			require.EqualValues(t, testJobs, rep.Enqueued)
			require.EqualValues(t, testJobs, f.enqueued.Load())
			require.Zero(t, rep.Errors, rep.LastError)
			require.Zero(t, rep.Throttled)
			require.Positive(t, rep.EnqueueRate)
			require.EqualValues(t, testJobs, f.count(epEnqueue))
			require.Zero(t, f.count(epEnqueueBatch))
			require.NotNil(t, rep.Latency.EnqueueReq)
			require.EqualValues(t, testJobs, rep.Latency.EnqueueReq.Count)

			if mode == ModeEnqueue {
				require.Zero(t, rep.Completed)
				require.Zero(t, f.count(epFetch))
				require.Nil(t, rep.Latency.FetchReq)
				return
			}
			require.EqualValues(t, testJobs, rep.Completed)
			require.Positive(t, rep.CompleteRate)
			requireAllAcked(t, f, testJobs)
			require.GreaterOrEqual(t, f.count(epFetch), int64(testJobs))
			require.EqualValues(t, testJobs, f.count(epAck))
			require.Zero(t, f.count(epFetchBatch)+f.count(epAckBatch))
			require.EqualValues(t, testJobs, rep.Latency.AckReq.Count)
			require.EqualValues(t, testJobs, rep.Latency.EnqueueToStart.Count)
			require.EqualValues(t, testJobs, rep.Latency.EnqueueToAck.Count)
			require.LessOrEqual(t, rep.Latency.EnqueueToStart.P50, rep.Latency.EnqueueToAck.Max)
			if mode == ModeLifecycle {
				require.Positive(t, rep.LifecycleRate)
				require.Positive(t, rep.ProcessS)
				require.Contains(t, out.String(), "phase 2: process 500 jobs")
			}
		})
	}
}

func TestRunBatching(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeLifecycle, ModeE2E} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t)
			cfg := testConfig(f, mode)
			cfg.EnqueueBatch, cfg.FetchBatch, cfg.AckBatch = 50, 10, 10
			cfg.Queues = 3

			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)

			require.EqualValues(t, testJobs, rep.Enqueued)
			require.EqualValues(t, testJobs, rep.Completed)
			require.Zero(t, rep.Errors, rep.LastError)
			requireAllAcked(t, f, testJobs)

			require.EqualValues(t, testJobs/50, f.count(epEnqueueBatch))
			require.GreaterOrEqual(t, f.count(epFetchBatch), int64(testJobs/10))
			require.GreaterOrEqual(t, f.count(epAckBatch), int64(testJobs/10))
			require.Zero(t, f.count(epEnqueue)+f.count(epFetch)+f.count(epAck), "single-job endpoints used")
			require.EqualValues(t, testJobs/50, rep.Latency.EnqueueReq.Count)
			require.Equal(t, map[string]int{"bench.q0": 167, "bench.q1": 167, "bench.q2": 166}, f.queueCounts())
		})
	}
}

func TestRunUnevenBatches(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeE2E)
	cfg.Jobs = 123
	cfg.EnqueueBatch, cfg.FetchBatch, cfg.AckBatch = 7, 3, 5

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 123, rep.Enqueued)
	require.EqualValues(t, 123, rep.Completed)
	requireAllAcked(t, f, 123)
	require.EqualValues(t, 18, f.count(epEnqueueBatch)) // 17 full + 1 of 4
}

func TestRunThrottled(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(f *fakeServer) { f.throttleEvery = 10 })
	cfg := testConfig(f, ModeE2E)
	cfg.AckBatch = 5

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)

	require.Positive(t, rep.Throttled)
	require.Equal(t, f.throttled.Load(), rep.Throttled)
	require.Zero(t, rep.Errors, rep.LastError)
	require.EqualValues(t, testJobs, rep.Enqueued)
	require.EqualValues(t, testJobs, rep.Completed)
	requireAllAcked(t, f, testJobs)
}

func TestRunStaleJobs(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	f.seed("bench.q0", `{"t":1,"r":"someone-else"}`)
	f.seed("bench.q0", `[1,2,3]`)
	cfg := testConfig(f, ModeLifecycle)
	cfg.Jobs = 50

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 50, rep.Completed)
	require.EqualValues(t, 2, rep.Stale)
	requireAllAcked(t, f, 52)
	require.EqualValues(t, 50, rep.Latency.EnqueueToStart.Count)
}

func TestRunDuration(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeEnqueue, ModeLifecycle, ModeE2E} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t)
			cfg := testConfig(f, mode)
			cfg.Jobs, cfg.Duration = 0, 200*time.Millisecond

			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			require.Positive(t, rep.Enqueued)
			require.Equal(t, f.enqueued.Load(), rep.Enqueued)
			require.GreaterOrEqual(t, rep.EnqueueS, 0.2)
			if mode != ModeEnqueue {
				require.Equal(t, rep.Enqueued, rep.Completed)
				requireAllAcked(t, f, int(rep.Enqueued))
			}
		})
	}
}

func TestRunRate(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 10} {
		t.Run("batch"+strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t)
			cfg := testConfig(f, ModeE2E)
			cfg.Jobs, cfg.Duration, cfg.Rate, cfg.EnqueueBatch = 0, 300*time.Millisecond, 500, batch

			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			// The pacer never hands out more than rate*duration jobs.
			require.LessOrEqual(t, rep.Enqueued, int64(150))
			require.GreaterOrEqual(t, rep.Enqueued, int64(10))
			require.Equal(t, rep.Enqueued, rep.Completed)
			require.Contains(t, renderText(t, rep), "rate=500/s")
		})
	}
}

func TestStallDetector(t *testing.T) {
	t.Parallel()
	var s stallDetector
	t0 := time.Now()
	require.False(t, s.stalled(t0, false, 0))
	require.False(t, s.stalled(t0.Add(time.Hour), false, 0), "inactive never stalls")
	require.False(t, s.stalled(t0, true, 5))
	require.False(t, s.stalled(t0.Add(stallTimeout-time.Millisecond), true, 5))
	require.False(t, s.stalled(t0.Add(stallTimeout), true, 6), "progress resets the clock")
	require.True(t, s.stalled(t0.Add(2*stallTimeout), true, 6))
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFakeServer(t, func(f *fakeServer) {
		f.onEnqueue = func(total int64) {
			if total >= 100 {
				cancel()
			}
		}
	})
	cfg := testConfig(f, ModeE2E)
	cfg.Jobs, cfg.Duration = 0, time.Hour

	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.True(t, rep.Interrupted)
	require.GreaterOrEqual(t, rep.Enqueued, int64(100))
	require.Less(t, rep.DurationS, 30.0)
}

func TestRunServerFailing(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(f *fakeServer) { f.failEnqueue = true })
	cfg := testConfig(f, ModeEnqueue)

	rep, err := Run(context.Background(), cfg)
	require.Error(t, err)
	require.ErrorContains(t, err, "HTTP 500")
	require.NotNil(t, rep)
	require.Zero(t, rep.Enqueued)
	require.Positive(t, rep.Errors)
	require.Contains(t, rep.LastError, "enqueue disabled")
}

// TestRunAPIKey: every request carries Config.APIKey; a server that
// refuses the key (401) ends the run at once, with ErrRefused.
func TestRunAPIKey(t *testing.T) {
	t.Parallel()
	const key = "corvo_0123456789abcdef_benchkeybenchkeybenchkeybenchkeybenchkeybe"
	f := newFakeServer(t, func(f *fakeServer) { f.apiKey = key })
	cfg := testConfig(f, ModeE2E)
	cfg.APIKey = key
	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, testJobs, rep.Completed)
	require.Zero(t, f.refused.Load())

	for _, sent := range []string{"", "corvo_0123456789abcdef_wrongwrongwrongwrongwrongwrongwrongwrongwro"} {
		f := newFakeServer(t, func(f *fakeServer) { f.apiKey = key })
		cfg := testConfig(f, ModeE2E)
		cfg.APIKey = sent
		cfg.Duration, cfg.Jobs = time.Minute, 0
		start := time.Now()
		rep, err := Run(context.Background(), cfg)
		require.ErrorIs(t, err, ErrRefused)
		require.ErrorContains(t, err, "HTTP 401 unauthorized")
		require.Less(t, time.Since(start), 30*time.Second, "the first refusal ends the run")
		require.Zero(t, rep.Enqueued)
		require.Less(t, f.refused.Load(), int64(maxConsecutiveErrors), "no retrying a refused key")
	}
}

func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeE2E)
	cfg.URL += "/nope" // every request is answered with 404

	rep, err := Run(context.Background(), cfg)
	require.Error(t, err)
	require.NotNil(t, rep)
	require.Zero(t, rep.Enqueued)
	require.Positive(t, rep.Errors)
}

func TestPayloadSize(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeEnqueue)
	cfg.Jobs, cfg.PayloadSize = 20, 300

	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	sizes := f.payloadSizes()
	require.Len(t, sizes, 20)
	for _, n := range sizes {
		require.InDelta(t, 300, n, 20)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	valid := Config{URL: "http://127.0.0.1:8080", Mode: ModeE2E, Jobs: 10}
	require.NoError(t, valid.Validate())
	require.NoError(t, valid.WithDefaults().Validate())

	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "url is required"},
		{"bad scheme", func(c *Config) { c.URL = "ftp://x" }, "http or https"},
		{"no host", func(c *Config) { c.URL = "http://" }, "no host"},
		{"unparsable url", func(c *Config) { c.URL = "http://[::1" }, "invalid url"},
		{"no mode", func(c *Config) { c.Mode = "" }, "mode is required"},
		{"unknown mode", func(c *Config) { c.Mode = "turbo" }, `unknown mode "turbo"`},
		{"no jobs or duration", func(c *Config) { c.Jobs = 0 }, "either jobs or duration"},
		{"negative jobs", func(c *Config) { c.Jobs = -1 }, "jobs must not be negative"},
		{"negative duration", func(c *Config) { c.Duration = -time.Second }, "duration must not be negative"},
		{"negative producers", func(c *Config) { c.Producers = -1 }, "producers must not be negative"},
		{"negative workers", func(c *Config) { c.Workers = -2 }, "workers must not be negative"},
		{"negative enqueue batch", func(c *Config) { c.EnqueueBatch = -1 }, "enqueue batch must not be negative"},
		{"huge enqueue batch", func(c *Config) { c.EnqueueBatch = 10001 }, "at most 10000"},
		{"negative fetch batch", func(c *Config) { c.FetchBatch = -1 }, "fetch batch must not be negative"},
		{"negative ack batch", func(c *Config) { c.AckBatch = -1 }, "ack batch must not be negative"},
		{"negative queues", func(c *Config) { c.Queues = -1 }, "queues must not be negative"},
		{"negative payload", func(c *Config) { c.PayloadSize = -1 }, "payload size must not be negative"},
		{"negative rate", func(c *Config) { c.Rate = -5 }, "rate must not be negative"},
		{"negative fetch timeout", func(c *Config) { c.FetchTimeout = -1 }, "fetch timeout must not be negative"},
		{"negative senders", func(c *Config) { c.Senders = -1 }, "senders must not be negative"},
		{"fixed-rate without rate", func(c *Config) { c.Mode = ModeFixedRate }, "fixed-rate mode needs a rate"},
		{"fixed-rate with batches", func(c *Config) { c.Mode, c.Rate, c.EnqueueBatch = " Fixed-Rate", 10, 5 }, "one job per request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tt.modify(&cfg)
			require.ErrorContains(t, cfg.Validate(), tt.want)
			_, err := Run(context.Background(), cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := Config{Mode: " E2E ", Producers: 3}.WithDefaults()
	require.Equal(t, Config{
		Mode: ModeE2E, Producers: 3, Workers: 16, EnqueueBatch: 1, FetchBatch: 1, AckBatch: 1,
		Queues: 1, QueuePrefix: "bench", PayloadSize: 64, FetchTimeout: 1, Senders: 32, Client: ClientHTTP,
	}, got)
}

func TestReportJSONRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeLifecycle)
	cfg.Jobs = 100

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)

	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var got Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	require.Equal(t, *rep, got)

	var raw map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	for _, key := range []string{"mode", "config", "duration_s", "enqueued", "completed", "errors",
		"throttled", "enqueue_rate", "complete_rate", "lifecycle_rate", "latency_ms"} {
		require.Contains(t, raw, key)
	}
	lat := raw["latency_ms"].(map[string]any)
	for _, key := range []string{"enqueue_req", "fetch_req", "ack_req", "enqueue_to_start", "enqueue_to_ack"} {
		require.Contains(t, lat, key)
	}
}

func TestWriteText(t *testing.T) {
	t.Parallel()
	rep := &Report{
		Mode: ModeE2E,
		Config: ConfigSummary{Producers: 16, Workers: 16, EnqueueBatch: 1, FetchBatch: 1, AckBatch: 1,
			Queues: 1, PayloadSize: 64},
		DurationS: 10.02, Enqueued: 123456, Completed: 123456, EnqueueRate: 12321, CompleteRate: 12321.4,
		Latency: Latencies{EnqueueReq: &LatencySummary{Count: 123456, P50: 0.41, P90: 0.8, P99: 1.9, Max: 12.3}},
	}
	text := renderText(t, rep)
	want := []string{
		"mode=e2e producers=16 workers=16 enqueue_batch=1 fetch_batch=1 ack_batch=1 queues=1 payload=64B\n",
		"duration        10.02s\n",
		"enqueued        123,456   (12,321 jobs/s)\n",
		"completed       123,456   (12,321 jobs/s)\n",
		"errors          0\n",
		"throttled       0\n",
		"latency (ms)        p50     p90     p99     max",
		"  enqueue req      0.41    0.80    1.90   12.30",
	}
	for _, w := range want {
		require.Contains(t, text, w)
	}
	require.NotContains(t, text, "fetch req")
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0.05", 50 * time.Millisecond},
		{"2", 2 * time.Second},
		{" 1 ", time.Second},
		{"0", 0},
		{"", defaultRetryAfter},
		{"soon", defaultRetryAfter},
		{"-1", defaultRetryAfter},
		{"NaN", defaultRetryAfter},
		{"100000", maxRetryAfter},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, parseRetryAfter([]byte(tt.in), now), "Retry-After %q", tt.in)
	}
}

func TestCommaInt(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{
		0: "0", 12: "12", 999: "999", 1000: "1,000", 123456: "123,456", 1234567: "1,234,567", -98765: "-98,765",
	} {
		require.Equal(t, want, commaInt(in))
	}
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"job_1", `a"b\c`, "tab\tnl\n\x01", "üñí", "bad\xffutf8"} {
		var got string
		require.NoError(t, json.Unmarshal(appendJSONString(nil, s), &got))
		require.Equal(t, strings.ToValidUTF8(s, "\ufffd"), got)
	}
}

func renderText(t *testing.T, rep *Report) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, rep.WriteText(&buf))
	return buf.String()
}

// TestHTTPClientTrustsTheGivenCA: an https:// server whose certificate no
// system CA issued is reached with Config.TLSConfig, and refused without.
func TestHTTPClientTrustsTheGivenCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	get := func(tc *tls.Config) error {
		c, err := newHTTPClient(srv.URL, 1, "", tc)
		require.NoError(t, err)
		defer c.close()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(c.base + "/healthz")
		return c.hc.DoTimeout(req, resp, 5*time.Second)
	}
	require.NoError(t, get(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	require.Error(t, get(nil), "a certificate no trusted CA issued was accepted")
}
