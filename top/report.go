package top

import (
	"encoding/json"
	"fmt"
	corvo "github.com/corvohq/corvo/sdk/go"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is one snapshot as `corvo top --once --output json` prints it.
// Rates are the server's (over about the last minute; null until it has
// measured), since one snapshot has no interval of its own.
type Report struct {
	URL     string         `json:"url"`
	At      time.Time      `json:"at"`
	Health  Health         `json:"health"`
	Totals  ReportTotals   `json:"totals"`
	Queues  []ReportQueue  `json:"queues"`
	Workers []ReportWorker `json:"workers"`
}

// ReportTotals sums every queue.
type ReportTotals struct {
	Queues        int      `json:"queues"`
	PausedQueues  int      `json:"paused_queues"`
	Pending       int64    `json:"pending"`
	Active        int64    `json:"active"`
	Scheduled     int64    `json:"scheduled"`
	Retrying      int64    `json:"retrying"`
	Held          int64    `json:"held"`
	Dead          int64    `json:"dead"`
	EnqueuedPerS  *float64 `json:"enqueued_per_s"`
	CompletedPerS *float64 `json:"completed_per_s"`
	FailedPerS    *float64 `json:"failed_per_s"`
	OldestPending *float64 `json:"oldest_pending_s"` // the largest queue's figure
	Workers       int      `json:"workers"`
	WorkerJobs    int      `json:"worker_active_jobs"`
}

// ReportQueue is one queue.
type ReportQueue struct {
	Name          string   `json:"name"`
	Pending       int64    `json:"pending"`
	Active        int64    `json:"active"`
	Scheduled     int64    `json:"scheduled"`
	Retrying      int64    `json:"retrying"`
	Held          int64    `json:"held"`
	Completed     int64    `json:"completed"`
	Dead          int64    `json:"dead"`
	Paused        bool     `json:"paused"`
	EnqueuedPerS  *float64 `json:"enqueued_per_s"`
	CompletedPerS *float64 `json:"completed_per_s"`
	FailedPerS    *float64 `json:"failed_per_s"`
	// OldestPending is the age in seconds of the oldest pending job; null
	// when nothing is pending or it is unknown.
	OldestPending *float64 `json:"oldest_pending_s"`
	// Latency is the server's wait and run quantiles over its window.
	Latency *corvo.QueueLatency `json:"latency"`
}

// ReportWorker is one worker.
type ReportWorker struct {
	ID         string    `json:"id"`
	Hostname   *string   `json:"hostname"`
	Queues     []string  `json:"queues"`
	ActiveJobs int       `json:"active_jobs"`
	LastSeen   time.Time `json:"last_seen"`
	IdleS      float64   `json:"last_seen_s"` // seconds since last seen
}

func ptr(known bool, v float64) *float64 {
	if !known {
		return nil
	}
	v = math.Round(v*10) / 10
	return &v
}

func ageSeconds(d time.Duration) *float64 {
	if d < 0 {
		return nil
	}
	v := math.Round(d.Seconds()*10) / 10
	return &v
}

// NewReport builds the report of one snapshot.
func NewReport(url string, s *Snapshot) Report {
	rows := buildRows(s, nil)
	t := sumRows(rows)
	rep := Report{URL: url, At: s.At.UTC(), Health: s.Health, Queues: []ReportQueue{}, Workers: []ReportWorker{},
		Totals: ReportTotals{Queues: t.Queues, PausedQueues: t.Paused, Pending: t.Pending, Active: t.Active,
			Scheduled: t.Scheduled, Retrying: t.Retrying, Held: t.Held, Dead: t.Dead,
			EnqueuedPerS: ptr(t.Rate.Known, t.Rate.Enqueued), CompletedPerS: ptr(t.Rate.Known, t.Rate.Completed),
			FailedPerS: ptr(t.Rate.Known, t.Rate.Failed), OldestPending: ageSeconds(t.Oldest), Workers: len(s.Workers)}}
	for _, r := range rows {
		rep.Queues = append(rep.Queues, ReportQueue{Name: r.Name, Pending: r.Pending, Active: r.Active, Scheduled: r.Scheduled,
			Retrying: r.Retrying, Held: r.Held, Completed: r.Completed, Dead: r.Dead, Paused: r.Paused,
			EnqueuedPerS: ptr(r.Rate.Known, r.Rate.Enqueued), CompletedPerS: ptr(r.Rate.Known, r.Rate.Completed),
			FailedPerS: ptr(r.Rate.Known, r.Rate.Failed), OldestPending: ageSeconds(r.Oldest), Latency: r.Latency})
	}
	for _, w := range sortedWorkers(s.Workers) {
		rep.Totals.WorkerJobs += w.ActiveJobs
		qs := w.Queues
		if qs == nil {
			qs = []string{}
		}
		rep.Workers = append(rep.Workers, ReportWorker{ID: w.ID, Hostname: w.Hostname, Queues: qs, ActiveJobs: w.ActiveJobs,
			LastSeen: w.LastSeen.UTC(), IdleS: *ageSeconds(max(s.At.Sub(w.LastSeen), 0))})
	}
	return rep
}

// WriteJSON prints the report as one JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// WriteTable prints the report as aligned tables: queues with a total
// line, then workers.
func (r Report) WriteTable(w io.Writer) error {
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *p)
	}
	age := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmtAge(time.Duration(*p * float64(time.Second)))
	}
	fmt.Fprintf(w, "corvo top  %s  %s  status %s, %d shards (this node leads %d)\n\n", r.URL, r.At.Format(time.RFC3339),
		r.Health.Status, r.Health.Shards, r.Health.ShardsLed)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tACTIVE\tSCHEDULED\tRETRYING\tHELD\tDEAD\tPAUSED\tENQ/S\tDONE/S\tFAIL/S\tOLDEST\tWAIT P95\tRUN P95")
	for _, q := range r.Queues {
		paused := ""
		if q.Paused {
			paused = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Name, q.Pending, q.Active, q.Scheduled, q.Retrying, q.Held, q.Dead,
			paused, f(q.EnqueuedPerS), f(q.CompletedPerS), f(q.FailedPerS), age(q.OldestPending), fmtP95(q.Latency, false), fmtP95(q.Latency, true))
	}
	t := r.Totals
	fmt.Fprintf(tw, "TOTAL (%d)\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\t\n", t.Queues, t.Pending, t.Active, t.Scheduled, t.Retrying, t.Held, t.Dead,
		t.PausedQueues, f(t.EnqueuedPerS), f(t.CompletedPerS), f(t.FailedPerS), age(t.OldestPending))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "WORKER\tHOST\tQUEUES\tACTIVE\tLAST SEEN\n")
	for _, x := range r.Workers {
		host := ""
		if x.Hostname != nil {
			host = *x.Hostname
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\n", x.ID, host, strings.Join(x.Queues, ","), x.ActiveJobs, age(&x.IdleS))
	}
	fmt.Fprintf(tw, "TOTAL (%d)\t\t\t%d\n", t.Workers, t.WorkerJobs)
	return tw.Flush()
}
