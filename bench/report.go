package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Report is the result of a benchmark run. Rates are in jobs per second,
// durations in seconds and latencies in milliseconds.
type Report struct {
	// Mode is the benchmark mode that ran.
	Mode string `json:"mode"`
	// Config summarises the effective configuration.
	Config ConfigSummary `json:"config"`
	// DurationS is the active time of the run: from the start until the
	// producers finished or the last job was acked, whichever is later.
	// Idle long-poll waits at the very end are not included.
	DurationS float64 `json:"duration_s"`
	// Enqueued is the number of jobs accepted by the server.
	Enqueued int64 `json:"enqueued"`
	// Completed is the number of this run's jobs acked successfully.
	Completed int64 `json:"completed"`
	// Errors counts failed requests: non-2xx answers other than 429,
	// transport errors and per-job errors of batch acks.
	Errors int64 `json:"errors"`
	// Throttled counts 429 answers (each was retried after Retry-After).
	Throttled int64 `json:"throttled"`
	// Stale counts fetched jobs not enqueued by this run (left over in the
	// queues); they are acked but not counted as completed.
	Stale int64 `json:"stale,omitempty"`
	// DuplicatesSeen counts deliveries of this run's jobs that had been
	// delivered before (as the peers' harness's duplicates_seen; only
	// counted in runs bound by a job count).
	DuplicatesSeen int64 `json:"duplicates_seen"`
	// EnqueueS is the time producers ran.
	EnqueueS float64 `json:"enqueue_s"`
	// EnqueueRate is Enqueued / EnqueueS.
	EnqueueRate float64 `json:"enqueue_rate"`
	// ProcessS is the time from the workers' start to the last ack.
	ProcessS float64 `json:"process_s,omitempty"`
	// CompleteRate is Completed / ProcessS.
	CompleteRate float64 `json:"complete_rate"`
	// LifecycleRate (lifecycle mode) is Completed / (EnqueueS + ProcessS).
	LifecycleRate float64 `json:"lifecycle_rate,omitempty"`
	// Latency holds the latency distributions that were measured.
	Latency Latencies `json:"latency_ms"`
	// ServerCPUS is the CPU time (user+system) the servers' processes
	// used during the run, from process_cpu_seconds_total of
	// /api/v1/metrics before and after; 0 when it was not measured.
	ServerCPUS float64 `json:"server_cpu_s,omitempty"`
	// ServerCPUPer1kJobs is ServerCPUS per 1,000 jobs (enqueued in enqueue
	// mode, completed in the others).
	ServerCPUPer1kJobs float64 `json:"server_cpu_s_per_1k_jobs,omitempty"`

	// The figures below are named as in the JSON line of the peers'
	// harness (shared/peers/redis: BullMQ, Asynq, Faktory), so that a
	// script can divide them; each is set by the modes that measure it.
	//
	// EnqueueSingleJobsS is EnqueueRate of a run with one job per enqueue
	// request (modes enqueue and lifecycle).
	EnqueueSingleJobsS float64 `json:"enqueue_single_jobs_s,omitempty"`
	// EnqueueBulkJobsS is EnqueueRate of a run with batched enqueues
	// (modes enqueue and lifecycle).
	EnqueueBulkJobsS float64 `json:"enqueue_bulk_jobs_s,omitempty"`
	// ProcessJobsS (lifecycle) is CompleteRate: the backlog worked off.
	ProcessJobsS float64 `json:"process_jobs_s,omitempty"`
	// E2EJobsS (e2e) is CompleteRate, E2EProducerJobsS the producers' own
	// EnqueueRate, and the E2E*Ms the enqueue-to-start latency.
	E2EJobsS         float64 `json:"e2e_jobs_s,omitempty"`
	E2EProducerJobsS float64 `json:"e2e_producer_jobs_s,omitempty"`
	E2EP50Ms         float64 `json:"e2e_p50_ms,omitempty"`
	E2EP99Ms         float64 `json:"e2e_p99_ms,omitempty"`
	E2EMaxMs         float64 `json:"e2e_max_ms,omitempty"`
	// FixedRateOfferedJobsS and FixedRateJobs (fixed-rate) are the
	// schedule; FixedRateAchievedJobsS is the senders' EnqueueRate (below
	// the offered rate: the senders or the server could not keep up); the
	// FixedRate*Ms are the enqueue-to-delivery latency (from the enqueue
	// request being sent to the fetch answer carrying the job arriving).
	FixedRateOfferedJobsS  int     `json:"fixed_rate_offered_jobs_s,omitempty"`
	FixedRateJobs          int     `json:"fixed_rate_jobs,omitempty"`
	FixedRateAchievedJobsS float64 `json:"fixed_rate_achieved_jobs_s,omitempty"`
	FixedRateP50Ms         float64 `json:"fixed_rate_p50_ms,omitempty"`
	FixedRateP90Ms         float64 `json:"fixed_rate_p90_ms,omitempty"`
	FixedRateP99Ms         float64 `json:"fixed_rate_p99_ms,omitempty"`
	FixedRateMaxMs         float64 `json:"fixed_rate_max_ms,omitempty"`

	// LastError is the last error seen, if any.
	LastError string `json:"last_error,omitempty"`
	// Interrupted is set when the caller's context ended the run early.
	Interrupted bool `json:"interrupted,omitempty"`
}

// ConfigSummary is the effective configuration of a run.
type ConfigSummary struct {
	URL          string  `json:"url"`
	Jobs         int     `json:"jobs,omitempty"`
	DurationS    float64 `json:"duration_s,omitempty"`
	Producers    int     `json:"producers"`
	Workers      int     `json:"workers"`
	EnqueueBatch int     `json:"enqueue_batch"`
	FetchBatch   int     `json:"fetch_batch"`
	AckBatch     int     `json:"ack_batch"`
	Queues       int     `json:"queues"`
	QueuePrefix  string  `json:"queue_prefix"`
	PayloadSize  int     `json:"payload_size"`
	Rate         int     `json:"rate,omitempty"`
	Senders      int     `json:"senders,omitempty"`
	FetchTimeout int     `json:"fetch_timeout"`
	JobTimeMS    float64 `json:"job_time_ms,omitempty"`
}

// Latencies groups the measured latency distributions; nil entries were not
// measured in this mode.
type Latencies struct {
	// EnqueueReq is the round trip of enqueue requests.
	EnqueueReq *LatencySummary `json:"enqueue_req,omitempty"`
	// FetchReq is the round trip of fetch requests that returned jobs
	// (empty long-poll answers are not included).
	FetchReq *LatencySummary `json:"fetch_req,omitempty"`
	// AckReq is the round trip of ack requests.
	AckReq *LatencySummary `json:"ack_req,omitempty"`
	// EnqueueToStart is from the producer sending the enqueue to the
	// worker receiving the job.
	EnqueueToStart *LatencySummary `json:"enqueue_to_start,omitempty"`
	// EnqueueToAck is from the producer sending the enqueue to the ack
	// answer arriving.
	EnqueueToAck *LatencySummary `json:"enqueue_to_ack,omitempty"`
	// SendLag (fixed-rate) is how late the senders sent jobs after their
	// scheduled time: large values mean the schedule slipped (all senders
	// were waiting for answers) and the latencies above are understated.
	SendLag *LatencySummary `json:"send_lag,omitempty"`
}

// LatencySummary describes one latency distribution in milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// buildReport assembles the report from the timeline and merged stats.
func (r *runner) buildReport(tl timeline, st *stats, interrupted bool) *Report {
	c := r.cfg
	rep := &Report{
		Mode: c.Mode,
		Config: ConfigSummary{
			URL: c.URL, Jobs: c.Jobs, Producers: c.Producers, Workers: c.Workers,
			EnqueueBatch: c.EnqueueBatch, FetchBatch: c.FetchBatch, AckBatch: c.AckBatch,
			Queues: c.Queues, QueuePrefix: c.QueuePrefix, PayloadSize: c.PayloadSize,
			Rate: c.Rate, FetchTimeout: c.FetchTimeout, JobTimeMS: float64(c.JobTime) / float64(time.Millisecond),
		},
		DurationS:      activeEnd(tl, st).Sub(tl.start).Seconds(),
		Enqueued:       r.ctr.enqueued.Load(),
		Completed:      r.ctr.completed.Load(),
		Errors:         r.ctr.errors.Load(),
		Throttled:      r.ctr.throttled.Load(),
		Stale:          r.ctr.stale.Load(),
		DuplicatesSeen: r.ctr.dupes.Load(),
		EnqueueS:       tl.prodEnd.Sub(tl.start).Seconds(),
		Interrupted:    interrupted,
		Latency: Latencies{
			EnqueueReq:     st.summary(kindEnqueueReq),
			FetchReq:       st.summary(kindFetchReq),
			AckReq:         st.summary(kindAckReq),
			EnqueueToStart: st.summary(kindToStart),
			EnqueueToAck:   st.summary(kindToAck),
			SendLag:        st.summary(kindSendLag),
		},
	}
	if c.Jobs == 0 {
		rep.Config.DurationS = c.Duration.Seconds()
	}
	switch c.Mode {
	case ModeEnqueue:
		rep.Config.Workers, rep.Config.FetchBatch, rep.Config.AckBatch = 0, 0, 0
	case ModeFixedRate:
		rep.Config.Producers, rep.Config.Senders = 0, c.Senders
	}
	if st.lastErr != nil {
		rep.LastError = st.lastErr.Error()
	}
	rep.EnqueueRate = rate(rep.Enqueued, rep.EnqueueS)
	if !tl.workStart.IsZero() && !st.lastAck.IsZero() {
		rep.ProcessS = st.lastAck.Sub(tl.workStart).Seconds()
		rep.CompleteRate = rate(rep.Completed, rep.ProcessS)
	}
	if c.Mode == ModeLifecycle {
		rep.LifecycleRate = rate(rep.Completed, rep.EnqueueS+rep.ProcessS)
	}
	rep.setPeerFigures(c)
	return rep
}

// setPeerFigures fills the figures named as in the peers' harness.
func (rep *Report) setPeerFigures(c Config) {
	round := func(v float64) float64 { return math.Round(v*10) / 10 }
	switch c.Mode {
	case ModeEnqueue, ModeLifecycle:
		if c.EnqueueBatch == 1 {
			rep.EnqueueSingleJobsS = round(rep.EnqueueRate)
		} else {
			rep.EnqueueBulkJobsS = round(rep.EnqueueRate)
		}
		if c.Mode == ModeLifecycle {
			rep.ProcessJobsS = round(rep.CompleteRate)
		}
	case ModeE2E:
		rep.E2EJobsS = round(rep.CompleteRate)
		rep.E2EProducerJobsS = round(rep.EnqueueRate)
		if l := rep.Latency.EnqueueToStart; l != nil {
			rep.E2EP50Ms, rep.E2EP99Ms, rep.E2EMaxMs = l.P50, l.P99, l.Max
		}
	case ModeFixedRate:
		rep.FixedRateOfferedJobsS, rep.FixedRateJobs = c.Rate, c.Jobs
		rep.FixedRateAchievedJobsS = round(rep.EnqueueRate)
		if l := rep.Latency.EnqueueToStart; l != nil {
			rep.FixedRateP50Ms, rep.FixedRateP90Ms, rep.FixedRateP99Ms, rep.FixedRateMaxMs = l.P50, l.P90, l.P99, l.Max
		}
	}
}

// setServerCPU records the servers' CPU seconds spent during the run.
func (rep *Report) setServerCPU(secs float64) {
	rep.ServerCPUS = math.Round(secs*1000) / 1000
	jobs := rep.Completed
	if rep.Mode == ModeEnqueue {
		jobs = rep.Enqueued
	}
	if jobs > 0 {
		rep.ServerCPUPer1kJobs = math.Round(secs/float64(jobs)*1000*10000) / 10000
	}
}

// activeEnd is when the last producer finished or the last ack arrived.
func activeEnd(tl timeline, st *stats) time.Time {
	if st.lastAck.After(tl.prodEnd) {
		return st.lastAck
	}
	return tl.prodEnd
}

func rate(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// WriteJSON writes the report as one line of JSON (a script can read the
// last line of the output).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("bench: write json report: %w", err)
	}
	return nil
}

// WriteText writes a human-readable summary of the report.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	r.writeHeader(&b)
	r.writeCounts(&b)
	r.writeLatencies(&b)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("bench: write text report: %w", err)
	}
	return nil
}

func (r *Report) writeHeader(b *strings.Builder) {
	c := r.Config
	if r.Mode == ModeFixedRate {
		fmt.Fprintf(b, "mode=%s senders=%d", r.Mode, c.Senders)
	} else {
		fmt.Fprintf(b, "mode=%s producers=%d", r.Mode, c.Producers)
	}
	if r.Mode != ModeEnqueue {
		fmt.Fprintf(b, " workers=%d", c.Workers)
	}
	fmt.Fprintf(b, " enqueue_batch=%d", c.EnqueueBatch)
	if r.Mode != ModeEnqueue {
		fmt.Fprintf(b, " fetch_batch=%d ack_batch=%d", c.FetchBatch, c.AckBatch)
	}
	fmt.Fprintf(b, " queues=%d payload=%dB", c.Queues, c.PayloadSize)
	if c.Rate > 0 {
		fmt.Fprintf(b, " rate=%d/s", c.Rate)
	}
	if c.JobTimeMS > 0 && r.Mode != ModeEnqueue {
		fmt.Fprintf(b, " job_time=%gms", c.JobTimeMS)
	}
	b.WriteString("\n")
}

func (r *Report) writeCounts(b *strings.Builder) {
	row := func(label, value, extra string) {
		fmt.Fprintf(b, "%-16s%s%s\n", label, value, extra)
	}
	withRate := func(n int64, rate float64) string {
		return fmt.Sprintf("%-10s(%s jobs/s)", commaInt(n), commaInt(int64(math.Round(rate))))
	}
	row("duration", fmtSeconds(r.DurationS), "")
	if r.Mode == ModeLifecycle {
		row("enqueue phase", fmt.Sprintf("%-10s", fmtSeconds(r.EnqueueS)), fmt.Sprintf("(%s jobs/s)", commaInt(int64(math.Round(r.EnqueueRate)))))
		row("process phase", fmt.Sprintf("%-10s", fmtSeconds(r.ProcessS)), fmt.Sprintf("(%s jobs/s)", commaInt(int64(math.Round(r.CompleteRate)))))
		row("full lifecycle", commaInt(int64(math.Round(r.LifecycleRate))), " jobs/s")
	}
	if r.Mode == ModeFixedRate {
		row("offered", commaInt(int64(r.FixedRateOfferedJobsS)), " jobs/s")
	}
	row("enqueued", withRate(r.Enqueued, r.EnqueueRate), "")
	if r.Mode != ModeEnqueue {
		row("completed", withRate(r.Completed, r.CompleteRate), "")
	}
	if r.ServerCPUS > 0 {
		row("server cpu", fmtSeconds(r.ServerCPUS), fmt.Sprintf(" (%.3fs per 1,000 jobs)", r.ServerCPUPer1kJobs))
	}
	row("errors", commaInt(r.Errors), "")
	row("throttled", commaInt(r.Throttled), "")
	if r.DuplicatesSeen > 0 {
		row("duplicates", commaInt(r.DuplicatesSeen), "  (jobs delivered again)")
	}
	if r.Stale > 0 {
		row("stale", commaInt(r.Stale), "  (jobs from earlier runs, acked)")
	}
	if r.LastError != "" {
		row("last error", r.LastError, "")
	}
	if r.Interrupted {
		row("interrupted", "yes", "")
	}
}

func (r *Report) writeLatencies(b *strings.Builder) {
	rows := []struct {
		label string
		s     *LatencySummary
	}{
		{"enqueue req", r.Latency.EnqueueReq},
		{"fetch req", r.Latency.FetchReq},
		{"ack req", r.Latency.AckReq},
		{"enqueue->start", r.Latency.EnqueueToStart},
		{"enqueue->ack", r.Latency.EnqueueToAck},
		{"send lag", r.Latency.SendLag},
	}
	header := false
	for _, row := range rows {
		if row.s == nil {
			continue
		}
		if !header {
			fmt.Fprintf(b, "%-17s%6s%8s%8s%8s%12s\n", "latency (ms)", "p50", "p90", "p99", "max", "count")
			header = true
		}
		fmt.Fprintf(b, "  %-15s%6.2f%8.2f%8.2f%8.2f%12s\n",
			row.label, row.s.P50, row.s.P90, row.s.P99, row.s.Max, commaInt(row.s.Count))
	}
}

func fmtSeconds(s float64) string {
	return strconv.FormatFloat(s, 'f', 2, 64) + "s"
}

// commaInt formats n with thousands separators.
func commaInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	if s[0] == '-' {
		b.WriteByte('-')
		s = s[1:]
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
