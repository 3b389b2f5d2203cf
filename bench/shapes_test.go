package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkersRotateQueues: every fetch names all queues; each worker
// rotates the list by one queue per fetch, so every queue comes first in
// turn; workers start at different queues; producers spread the jobs
// round-robin.
func TestWorkersRotateQueues(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeLifecycle)
	cfg.Jobs, cfg.Queues, cfg.Workers = 300, 3, 3

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 300, rep.Completed)
	require.Equal(t, map[string]int{"bench.q0": 100, "bench.q1": 100, "bench.q2": 100}, f.queueCounts())

	all := []string{"bench.q0", "bench.q1", "bench.q2"}
	orders := f.orders()
	require.Len(t, orders, 3, "one worker id per worker")
	var firstQueues []string
	for w, list := range orders {
		require.GreaterOrEqual(t, len(list), len(all), "worker %s fetched too rarely to check", w)
		firstQueues = append(firstQueues, list[0][0])
		seen := map[string]int{}
		for k, qs := range list {
			sorted := slices.Sorted(slices.Values(qs))
			require.Equal(t, all, sorted, "worker %s fetch %d names every queue once", w, k)
			if k > 0 {
				prev := list[k-1]
				require.Equal(t, append(append([]string(nil), prev[1:]...), prev[0]), qs,
					"worker %s fetch %d is the previous list rotated by one", w, k)
			}
			seen[qs[0]]++
		}
		require.Len(t, seen, len(all), "worker %s put every queue first", w)
	}
	sort.Strings(firstQueues)
	require.Equal(t, all, firstQueues, "the workers start at different queues")
}

// TestFixedRateSendsOnSchedule: fixed-rate mode sends exactly the jobs of
// the schedule (by count, or rate x duration), no faster than the rate, and
// measures the delivery latency and the send lag of each.
func TestFixedRateSendsOnSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		jobs     int
		duration time.Duration
		want     int
	}{
		{"jobs", 60, 0, 60},
		{"duration", 0, 300 * time.Millisecond, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t)
			cfg := Config{URL: f.URL, Mode: ModeFixedRate, Rate: 200, Senders: 4, Workers: 2, Queues: 2,
				Jobs: tc.jobs, Duration: tc.duration}

			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			require.Zero(t, rep.Errors, rep.LastError)
			require.EqualValues(t, tc.want, f.enqueued.Load())
			require.EqualValues(t, tc.want, f.count(epEnqueue))
			require.EqualValues(t, tc.want, rep.Enqueued)
			require.EqualValues(t, tc.want, rep.Completed)
			requireAllAcked(t, f, tc.want)
			// Job i is not sent before start+i/rate: the last one at 295 ms.
			require.GreaterOrEqual(t, rep.EnqueueS, float64(tc.want-1)/200)
			require.LessOrEqual(t, rep.FixedRateAchievedJobsS, 200*float64(tc.want)/float64(tc.want-1)+0.1)
			require.Equal(t, 200, rep.FixedRateOfferedJobsS)
			require.Equal(t, tc.want, rep.FixedRateJobs)
			require.EqualValues(t, tc.want, rep.Latency.EnqueueToStart.Count)
			require.EqualValues(t, tc.want, rep.Latency.SendLag.Count)
			require.Equal(t, rep.Latency.EnqueueToStart.P99, rep.FixedRateP99Ms)
			require.Positive(t, rep.FixedRateP50Ms)
			require.Equal(t, 4, rep.Config.Senders)
			require.Zero(t, rep.Config.Producers)
			require.EqualValues(t, 4, f.health.Load(), "every sender connected before the schedule")
			text := renderText(t, rep)
			require.Contains(t, text, "mode=fixed-rate senders=4 workers=2")
			require.Contains(t, text, "offered         200 jobs/s")
			require.Contains(t, text, "send lag")
		})
	}
}

// TestFixedRateIsOpenLoop: a slow server does not slow the senders down
// while enough of them are free: each job goes out when it is due, not
// when the answer to the previous one arrived.
func TestFixedRateIsOpenLoop(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(f *fakeServer) { f.enqueueDelay = 200 * time.Millisecond })
	cfg := Config{URL: f.URL, Mode: ModeFixedRate, Rate: 100, Senders: 20, Workers: 2, Jobs: 20}

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 20, rep.Completed)
	// On schedule: the last job is due at 190 ms and answered 200 ms
	// later. One job at a time would take 20 x 200 ms = 4 s.
	require.Less(t, rep.EnqueueS, 2.0)
	require.GreaterOrEqual(t, rep.Latency.EnqueueReq.P50, 200.0)
}

// TestReportJSONLine: -o json is one line that a script can parse, with
// the figures named as in the peers' harness and the server's CPU time.
func TestReportJSONLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  string
		batch int
		keys  []string
	}{
		{ModeEnqueue, 1, []string{"enqueue_single_jobs_s"}},
		{ModeLifecycle, 100, []string{"enqueue_bulk_jobs_s", "process_jobs_s"}},
		{ModeE2E, 1, []string{"e2e_jobs_s", "e2e_producer_jobs_s", "e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms"}},
		{ModeFixedRate, 1, []string{"fixed_rate_offered_jobs_s", "fixed_rate_jobs", "fixed_rate_achieved_jobs_s",
			"fixed_rate_p50_ms", "fixed_rate_p90_ms", "fixed_rate_p99_ms", "fixed_rate_max_ms"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, func(f *fakeServer) { f.cpuMetrics = true })
			cfg := testConfig(f, tc.mode)
			cfg.Jobs, cfg.EnqueueBatch, cfg.Rate = 200, tc.batch, 2000

			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, rep.WriteJSON(&buf))
			out := buf.String()
			require.Equal(t, 1, strings.Count(out, "\n"), "one line")
			require.True(t, strings.HasSuffix(out, "\n"))

			var raw map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
			for _, k := range tc.keys {
				require.Contains(t, raw, k)
				require.Positive(t, raw[k], k)
			}
			for _, k := range []string{"enqueue_single_jobs_s", "enqueue_bulk_jobs_s", "process_jobs_s",
				"e2e_jobs_s", "fixed_rate_p50_ms"} {
				if !slices.Contains(tc.keys, k) {
					require.NotContains(t, raw, k, "not measured in mode %s", tc.mode)
				}
			}
			// The fake's CPU counter grew by cpuStep between the reads
			// before and after the run.
			require.InDelta(t, cpuStep, raw["server_cpu_s"], 1e-9)
			require.InDelta(t, cpuStep/200*1000, raw["server_cpu_s_per_1k_jobs"], 1e-4)
			var back Report
			require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
			require.Equal(t, *rep, back)
		})
	}
}

// TestServerCPUUnreadable: a server without a readable process CPU metric
// (the fake without cpuMetrics answers 405) still benchmarks; no CPU
// figure is made up.
func TestServerCPUUnreadable(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	rep, err := Run(context.Background(), testConfig(f, ModeEnqueue))
	require.NoError(t, err)
	require.EqualValues(t, testJobs, rep.Enqueued)
	require.Zero(t, rep.ServerCPUS)
	require.Zero(t, rep.ServerCPUPer1kJobs)

	g := newFakeServer(t, func(f *fakeServer) { f.cpuMetrics = true })
	cfg := testConfig(g, ModeEnqueue)
	cfg.SkipServerCPU = true
	rep, err = Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Zero(t, rep.ServerCPUS)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Zero(t, g.cpuReads, "SkipServerCPU reads no metrics")
}

func TestParseCPUSeconds(t *testing.T) {
	t.Parallel()
	v, err := parseCPUSeconds([]byte("# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total_x 3\n" +
		"process_cpu_seconds_total 12.5\n"))
	require.NoError(t, err)
	require.Equal(t, 12.5, v)
	_, err = parseCPUSeconds([]byte("go_goroutines 3\n"))
	require.ErrorContains(t, err, "no process_cpu_seconds_total")
	_, err = parseCPUSeconds([]byte("process_cpu_seconds_total abc\n"))
	require.ErrorContains(t, err, "process_cpu_seconds_total")
}

// TestSmallPayload: a payload size below the bench header's sends the
// header alone (no pad field), which workers still recognise as the run's.
func TestSmallPayload(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeLifecycle)
	cfg.Jobs, cfg.PayloadSize = 20, 35

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 20, rep.Completed)
	require.EqualValues(t, 20, rep.Latency.EnqueueToStart.Count, "jobs recognised as the run's")
	for _, n := range f.payloadSizes() {
		require.Less(t, n, payloadOverhead-len(`,"pad":""`)+1)
	}
}

// TestDuplicatesSeen: a job of the run delivered a second time is counted
// as the peers' harness counts it; none are in a normal run.
func TestDuplicatesSeen(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, func(f *fakeServer) { f.dupFirst = true })
	cfg := testConfig(f, ModeLifecycle)
	cfg.Workers = 1

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.DuplicatesSeen)
	// The run waited for every distinct job and counts each once.
	require.EqualValues(t, testJobs, rep.Completed)
	requireAllAcked(t, f, testJobs+1)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	require.Contains(t, buf.String(), `"duplicates_seen":1`)
	require.Contains(t, renderText(t, rep), "duplicates      1")

	g := newFakeServer(t)
	rep, err = Run(context.Background(), testConfig(g, ModeE2E))
	require.NoError(t, err)
	require.EqualValues(t, testJobs, rep.Completed)
	require.Zero(t, rep.DuplicatesSeen)
}

// TestAckFetchOneRequestPerJob: with AckFetch a worker working a backlog
// takes its next job from each ack's answer, so it long-polls only when an
// ack brings nothing; every job is still acked exactly once.
func TestAckFetchOneRequestPerJob(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeLifecycle)
	cfg.Jobs, cfg.Queues, cfg.Workers, cfg.EnqueueBatch, cfg.AckFetch = 400, 2, 2, 400, true

	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.EqualValues(t, 400, rep.Completed)
	jobs, maxPerJob := f.ackCounts()
	require.Equal(t, 400, jobs)
	require.Equal(t, 1, maxPerJob, "no job acked twice")
	require.EqualValues(t, 400, f.count(epAck))
	require.Greater(t, f.count(epAckFetch), int64(300), "the acks carried the next fetch")
	require.Less(t, f.count(epFetch), int64(100), "the workers long-polled only when an ack brought nothing")
}

// TestJobTimeRunsBeforeEachAck: with JobTime, every job's handler (the
// sleep) runs once, for JobTime, before its ack, whether acks go one by
// one, carry the next fetch or go in batches; the report names it.
func TestJobTimeRunsBeforeEachAck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ackBatch int
		ackFetch bool
	}{{"ack", 1, false}, {"ack-fetch", 1, true}, {"ack-batch", 5, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t)
			cfg := testConfig(f, ModeLifecycle)
			cfg.Jobs, cfg.Workers, cfg.AckBatch, cfg.AckFetch = 60, 3, tc.ackBatch, tc.ackFetch
			cfg.JobTime = time.Hour // never slept: the stub below counts
			var mu sync.Mutex
			var slept []time.Duration
			cfg.sleep = func(_ context.Context, d time.Duration) error {
				mu.Lock()
				slept = append(slept, d)
				mu.Unlock()
				return nil
			}
			rep, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			require.EqualValues(t, 60, rep.Completed)
			require.Len(t, slept, 60, "one handler run per job")
			for _, d := range slept {
				require.Equal(t, time.Hour, d)
			}
			require.InDelta(t, float64(time.Hour/time.Millisecond), rep.Config.JobTimeMS, 0.001)
		})
	}
}

// TestJobTimeCutShortAcksNothing: a handler the run's end stops (its
// sleep returns the context's error) acks nothing.
func TestJobTimeCutShortAcksNothing(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t)
	cfg := testConfig(f, ModeLifecycle)
	cfg.Jobs, cfg.Workers = 10, 1
	cfg.JobTime = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.sleep = func(context.Context, time.Duration) error {
		cancel() // the run ends while the first handler runs
		return context.Canceled
	}
	rep, _ := Run(ctx, cfg)
	require.NotNil(t, rep)
	require.Zero(t, rep.Completed)
	require.Zero(t, f.count(epAck)+f.count(epAckBatch)+f.count(epAckFetch), "no ack request")
}
