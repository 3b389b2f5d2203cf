package top

import (
	"fmt"
	"sort"
	"time"
)

// Rate is a queue's jobs per second, and where the figure comes from.
type Rate struct {
	Enqueued, Completed, Failed float64
	Known                       bool
	Local                       bool // measured by this client between snapshots (else the server's figure)
}

// localRates computes each queue's rates from the change of its running
// totals between two snapshots. A queue missing from old started at zero
// (it was created in between); a queue whose totals went backwards (it was
// deleted and re-created) has no local rate.
func localRates(old, cur *Snapshot) map[string]Rate {
	out := make(map[string]Rate, len(cur.Queues))
	secs := cur.At.Sub(old.At).Seconds()
	if secs <= 0 {
		return out
	}
	before := make(map[string]Totals, len(old.Queues))
	for _, q := range old.Queues {
		before[q.Name] = q.Totals
	}
	for _, q := range cur.Queues {
		b := before[q.Name]
		d := [3]int64{q.Totals.Enqueued - b.Enqueued, q.Totals.Completed - b.Completed, q.Totals.Failed - b.Failed}
		if d[0] < 0 || d[1] < 0 || d[2] < 0 {
			continue
		}
		out[q.Name] = Rate{Enqueued: float64(d[0]) / secs, Completed: float64(d[1]) / secs, Failed: float64(d[2]) / secs, Known: true, Local: true}
	}
	return out
}

// serverRate is the server's own measurement, when it has one.
func serverRate(q *Queue) Rate {
	if q.Throughput == nil {
		return Rate{}
	}
	return Rate{Enqueued: q.Throughput.EnqueuedPerS, Completed: q.Throughput.CompletedPerS, Failed: q.Throughput.FailedPerS, Known: true}
}

// row is one queue as displayed.
type row struct {
	Queue
	Rate   Rate
	Oldest time.Duration // age of the oldest pending job; -1: unknown or none
}

// buildRows joins a snapshot with its rates (local where measured, else
// the server's).
func buildRows(s *Snapshot, local map[string]Rate) []row {
	rows := make([]row, len(s.Queues))
	for i, q := range s.Queues {
		r := row{Queue: q, Oldest: -1}
		if lr, ok := local[q.Name]; ok {
			r.Rate = lr
		} else {
			r.Rate = serverRate(&s.Queues[i])
		}
		if q.Pending > 0 && !q.OldestPendingAt.IsZero() {
			r.Oldest = max(s.At.Sub(q.OldestPendingAt), 0)
		}
		rows[i] = r
	}
	return rows
}

// totals sums the rows.
type totals struct {
	Queues, Paused                                   int
	Pending, Active, Scheduled, Retrying, Held, Dead int64
	Rate                                             Rate
	Oldest                                           time.Duration
}

func sumRows(rows []row) totals {
	t := totals{Queues: len(rows), Oldest: -1}
	for _, r := range rows {
		if r.Paused {
			t.Paused++
		}
		t.Pending += r.Pending
		t.Active += r.Active
		t.Scheduled += r.Scheduled
		t.Retrying += r.Retrying
		t.Held += r.Held
		t.Dead += r.Dead
		if r.Rate.Known {
			t.Rate.Known = true
			t.Rate.Enqueued += r.Rate.Enqueued
			t.Rate.Completed += r.Rate.Completed
			t.Rate.Failed += r.Rate.Failed
		}
		t.Oldest = max(t.Oldest, r.Oldest)
	}
	return t
}

// sortKey orders the queue table.
type sortKey int

const (
	sortName sortKey = iota
	sortPending
	sortActive
	sortDead
	sortEnqueued
	sortCompleted
	sortOldest
	numSortKeys
)

func (k sortKey) String() string {
	return [...]string{"name", "pending", "active", "dead", "enqueued/s", "completed/s", "oldest"}[k]
}

// sortRows orders rows by k: name ascending, everything else largest
// first, ties by name.
func sortRows(rows []row, k sortKey) {
	val := func(r *row) float64 {
		switch k {
		case sortPending:
			return float64(r.Pending)
		case sortActive:
			return float64(r.Active)
		case sortDead:
			return float64(r.Dead)
		case sortEnqueued:
			return r.Rate.Enqueued
		case sortCompleted:
			return r.Rate.Completed
		case sortOldest:
			return float64(r.Oldest)
		}
		return 0
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if k != sortName {
			if a, b := val(&rows[i]), val(&rows[j]); a != b {
				return a > b
			}
		}
		return rows[i].Name < rows[j].Name
	})
}

// fmtAge renders a duration compactly: 0s, 42s, 3m04s, 2h05m, 3d04h.
func fmtAge(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// fmtRate renders jobs per second with one decimal, or "-" when unknown.
func fmtRate(known bool, v float64) string {
	if !known {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}
