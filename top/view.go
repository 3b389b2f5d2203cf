package top

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	corvo "github.com/corvohq/corvo/sdk/go"
)

var (
	styleTitle    = lipgloss.NewStyle().Bold(true)
	styleHeader   = lipgloss.NewStyle().Bold(true).Underline(true)
	styleSelected = lipgloss.NewStyle().Reverse(true)
	stylePaused   = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	styleBad      = lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	styleDim      = lipgloss.NewStyle().Faint(true)
)

// fixedLines is how many lines the view uses besides table rows: title,
// status, totals, blank, queues title, queue header, blank, workers title,
// workers header, blank, help.
const fixedLines = 11

// View renders the dashboard on the alternate screen.
func (m Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	return v
}

// render draws the dashboard.
func (m Model) render() string {
	var b strings.Builder
	line := func(s string) {
		if m.width > 0 {
			s = ansi.Truncate(s, m.width, "…")
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	title := styleTitle.Render("corvo top") + "  " + m.url
	if m.snap != nil {
		h := m.snap.Health
		title += fmt.Sprintf("  %s, %d shards (this node leads %d)  updated %s", h.Status, h.Shards, h.ShardsLed, m.snap.At.Format("15:04:05"))
	}
	line(title + "  sort: " + m.sortBy.String())
	switch {
	case m.err != nil:
		msg := fmt.Sprintf("disconnected, retrying every %v (%d failed): %s", m.interval, m.fails, strings.ReplaceAll(m.err.Error(), "\n", " "))
		var se *StatusError
		if errors.As(m.err, &se) && se.Status == http.StatusUnauthorized {
			msg = fmt.Sprintf("the server wants an API key (%s); pass --api-key or set CORVO_API_KEY", se.Msg)
		}
		if m.snap != nil {
			msg += " — showing data from " + m.snap.At.Format("15:04:05")
		}
		line(styleBad.Render(msg))
	case m.snap == nil:
		line("connecting…")
	default:
		line(m.status)
	}
	if m.snap == nil {
		line("")
		line(m.help.View(m.keys))
		return b.String()
	}

	t := sumRows(m.rows)
	jobs := 0
	for _, w := range m.snap.Workers {
		jobs += w.ActiveJobs
	}
	line(fmt.Sprintf("TOTAL  queues %d (%d paused)  pending %d  active %d  scheduled %d  retrying %d  held %d  dead %d  oldest %s  │  enq %s/s  done %s/s  fail %s/s  │  workers %d (%d jobs)",
		t.Queues, t.Paused, t.Pending, t.Active, t.Scheduled, t.Retrying, t.Held, t.Dead, fmtAge(t.Oldest),
		fmtRate(t.Rate.Known, t.Rate.Enqueued), fmtRate(t.Rate.Known, t.Rate.Completed), fmtRate(t.Rate.Known, t.Rate.Failed),
		len(m.snap.Workers), jobs))
	line("")

	qRows, wRows := m.budget()
	nameW := 5
	for _, r := range m.rows {
		nameW = max(nameW, lipgloss.Width(r.Name))
	}
	nameW = min(nameW, 40)
	cols := func(name, a, b, c, d, held, e, f, g, h, i, wait, run, state string) string {
		return fmt.Sprintf("  %s %8s %8s %8s %8s %8s %8s %9s %9s %9s %8s %8s %8s  %s", pad(name, nameW), a, b, c, d, held, e, f, g, h, i, wait, run, state)
	}
	start, end := window(len(m.rows), m.offset, qRows)
	qtitle := fmt.Sprintf("QUEUES %d", len(m.rows))
	if end-start < len(m.rows) {
		qtitle += fmt.Sprintf(" (%d–%d shown)", start+1, end)
	}
	line(styleTitle.Render(qtitle))
	line(styleHeader.Render(cols("QUEUE", "PENDING", "ACTIVE", "SCHED", "RETRY", "HELD", "DEAD", "ENQ/S", "DONE/S", "FAIL/S", "OLDEST", "WAIT95", "RUN95", "")))
	if len(m.rows) == 0 {
		line(styleDim.Render("  no queues yet"))
	}
	for i := start; i < end; i++ {
		r := &m.rows[i]
		state := ""
		if r.Paused {
			state = "paused"
		}
		s := cols(r.Name, fmt.Sprint(r.Pending), fmt.Sprint(r.Active), fmt.Sprint(r.Scheduled), fmt.Sprint(r.Retrying), fmt.Sprint(r.Held), fmt.Sprint(r.Dead),
			fmtRate(r.Rate.Known, r.Rate.Enqueued), fmtRate(r.Rate.Known, r.Rate.Completed), fmtRate(r.Rate.Known, r.Rate.Failed), fmtAge(r.Oldest),
			fmtP95(r.Latency, false), fmtP95(r.Latency, true), state)
		switch {
		case i == m.cursor:
			s = ">" + s[1:]
			s = styleSelected.Render(s)
		case r.Paused:
			s = stylePaused.Render(s)
		case r.Dead > 0:
			s = styleBad.Render(s)
		}
		line(s)
	}
	line("")

	ws := sortedWorkers(m.snap.Workers)
	line(styleTitle.Render(fmt.Sprintf("WORKERS %d", len(ws))))
	idW := 6
	for _, w := range ws {
		idW = max(idW, lipgloss.Width(w.ID))
	}
	idW = min(idW, 32)
	wcols := func(id, host, active, seen, queues string) string {
		return fmt.Sprintf("  %s %-20s %6s %10s  %s", pad(id, idW), ansi.Truncate(host, 20, "…"), active, seen, queues)
	}
	line(styleHeader.Render(wcols("ID", "HOST", "ACTIVE", "LAST SEEN", "QUEUES")))
	for i, w := range ws {
		if i == wRows {
			line(styleDim.Render(fmt.Sprintf("  … %d more", len(ws)-wRows)))
			break
		}
		host := ""
		if w.Hostname != nil {
			host = *w.Hostname
		}
		line(wcols(w.ID, host, fmt.Sprint(w.ActiveJobs), fmtAge(max(m.snap.At.Sub(w.LastSeen), 0))+" ago", strings.Join(w.Queues, ",")))
	}
	line("")
	b.WriteString(m.help.View(m.keys))
	return b.String()
}

// budget splits the window's height between the queue and worker tables
// (everything fits when the height is unknown).
func (m Model) budget() (queues, workers int) {
	nq, nw := len(m.rows), len(m.snap.Workers)
	if m.height <= 0 {
		return nq, nw
	}
	avail := max(m.height-fixedLines, 2)
	if m.help.ShowAll {
		avail = max(avail-2, 2)
	}
	workers = min(nw, max(avail/3, 1))
	queues = max(avail-workers, 1)
	if nq < queues { // give the rest to the workers
		workers = min(nw, avail-nq)
	}
	if workers < nw { // one line says how many more
		workers = max(workers-1, 0)
	}
	return queues, workers
}

// window returns the visible range [start, end) of n rows, size rows tall,
// from offset.
func window(n, offset, size int) (int, int) {
	if n <= size {
		return 0, n
	}
	start := min(max(offset, 0), n-size)
	return start, start + size
}

// pad truncates or right-pads s to exactly w cells.
func pad(s string, w int) string {
	s = ansi.Truncate(s, w, "…")
	return s + strings.Repeat(" ", w-lipgloss.Width(s))
}

// fmtP95 is a queue's p95 wait (or run) time over the server's window, "-"
// when it has none.
func fmtP95(l *corvo.QueueLatency, run bool) string {
	if l == nil {
		return "-"
	}
	q := l.WaitMs
	if run {
		q = l.RunMs
	}
	if q == nil {
		return "-"
	}
	d := time.Duration(q.P95 * float64(time.Millisecond))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmtAge(d)
}
