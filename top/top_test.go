package top

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// fakeSource records pause/resume calls.
type fakeSource struct {
	mu     sync.Mutex
	paused []string
	err    error
}

func (f *fakeSource) Snapshot(context.Context) (*Snapshot, error) { return nil, errors.New("unused") }

func (f *fakeSource) SetPaused(_ context.Context, q string, p bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	verb := "resume "
	if p {
		verb = "pause "
	}
	f.paused = append(f.paused, verb+q)
	return f.err
}

func queue(name string, pending, active, dead int64, enq, done int64) Queue {
	return Queue{Queue: corvo.Queue{Name: name, Pending: pending, Active: active, Dead: dead, Totals: Totals{Enqueued: enq, Completed: done}}}
}

func snap(at time.Time, qs ...Queue) *Snapshot {
	return &Snapshot{At: at, Health: Health{Status: "ok", Shards: 4, ShardsLed: 4}, Queues: qs}
}

// feed sends messages to a model in order and returns it.
func feed(t *testing.T, m tea.Model, msgs ...tea.Msg) Model {
	t.Helper()
	for _, msg := range msgs {
		m, _ = m.Update(msg)
	}
	return m.(Model)
}

// text is the view without styling.
func text(m Model) string { return ansi.Strip(m.View().Content) }

// queueOrder lists the queue names in table order.
func queueOrder(m Model, names ...string) []string {
	var order []string
	for _, l := range strings.Split(text(m), "\n") {
		f := strings.Fields(strings.TrimPrefix(l, ">"))
		for _, n := range names {
			if len(f) > 0 && f[0] == n {
				order = append(order, n)
			}
		}
	}
	return order
}

func press(s string) tea.KeyPressMsg {
	switch s {
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	r := []rune(s)[0]
	return tea.KeyPressMsg{Code: r, Text: s}
}

func TestLocalRates(t *testing.T) {
	t.Parallel()
	old := snap(t0, queue("a", 0, 0, 0, 100, 50), queue("gone", 0, 0, 0, 10, 10), queue("reset", 0, 0, 0, 500, 500))
	cur := snap(t0.Add(2*time.Second), queue("a", 0, 0, 0, 110, 54), queue("new", 0, 0, 0, 6, 0), queue("reset", 0, 0, 0, 3, 1))
	r := localRates(old, cur)
	require.Equal(t, Rate{Enqueued: 5, Completed: 2, Known: true, Local: true}, r["a"])
	require.Equal(t, Rate{Enqueued: 3, Known: true, Local: true}, r["new"], "a queue created in between started at zero")
	_, ok := r["reset"]
	require.False(t, ok, "totals that went backwards (queue re-created) give no rate")
	require.Empty(t, localRates(cur, cur), "no time elapsed, no rate")
}

// TestModelRates: the first snapshot shows the server's rates (or "-");
// from the second on, rates are measured between snapshots.
func TestModelRates(t *testing.T) {
	t.Parallel()
	m := NewModel(&fakeSource{}, "http://x", time.Second)
	first := snap(t0, queue("emails", 7, 2, 0, 1000, 900))
	first.Queues[0].Throughput = &Throughput{EnqueuedPerS: 42, CompletedPerS: 41}
	m = feed(t, m, snapshotMsg{snap: first})
	require.Regexp(t, `emails\s+7\s+2\s+0\s+0\s+0\s+0\s+42\.0\s+41\.0\s+0\.0`, text(m))

	second := snap(t0.Add(2*time.Second), queue("emails", 3, 2, 0, 1020, 926))
	second.Queues[0].Throughput = &Throughput{EnqueuedPerS: 42, CompletedPerS: 41}
	m = feed(t, m, snapshotMsg{snap: second})
	v := text(m)
	require.Regexp(t, `emails\s+3\s+2\s+0\s+0\s+0\s+0\s+10\.0\s+13\.0\s+0\.0`, v, "(1020-1000)/2s and (926-900)/2s")
	require.Contains(t, v, "enq 10.0/s  done 13.0/s")

	// Rates span at most rateSamples snapshots: after 6 more, the first
	// two are out of the window.
	for i := 2; i <= 7; i++ {
		m = feed(t, m, snapshotMsg{snap: snap(t0.Add(time.Duration(i)*time.Second), queue("emails", 0, 0, 0, 1020+int64(i-1)*4, 926))})
	}
	require.Regexp(t, `emails\s+0\s+0\s+0\s+0\s+0\s+0\s+4\.0\s+0\.0`, text(m))

	// A queue without any measurement shows "-".
	m = NewModel(&fakeSource{}, "http://x", time.Second)
	m = feed(t, m, snapshotMsg{snap: snap(t0, queue("quiet", 0, 0, 0, 0, 0))})
	require.Regexp(t, `quiet\s+0\s+0\s+0\s+0\s+0\s+0\s+-\s+-\s+-\s+-`, text(m))
}

func TestModelSortCycling(t *testing.T) {
	t.Parallel()
	s := snap(t0, queue("b-busy", 50, 1, 0, 0, 0), queue("a-dead", 1, 0, 9, 0, 0), queue("c-active", 5, 8, 0, 0, 0))
	s.Queues[0].OldestPendingAt = t0.Add(-time.Minute)
	s.Queues[1].OldestPendingAt = t0.Add(-time.Hour)
	s.Queues[2].OldestPendingAt = t0.Add(-time.Second)
	m := feed(t, NewModel(&fakeSource{}, "http://x", time.Second), snapshotMsg{snap: s})
	names := []string{"a-dead", "b-busy", "c-active"}
	require.Contains(t, text(m), "sort: pending")
	require.Equal(t, []string{"b-busy", "c-active", "a-dead"}, queueOrder(m, names...))
	require.Contains(t, text(m), "> b-busy", "the first row is selected")
	require.Contains(t, text(m), "1h00m", "oldest pending age of a-dead")

	m = feed(t, m, press("j")) // select c-active; it stays selected across sorts
	want := []struct {
		label string
		order []string
	}{
		{"active", []string{"c-active", "b-busy", "a-dead"}},
		{"dead", []string{"a-dead", "b-busy", "c-active"}},
		{"enqueued/s", []string{"a-dead", "b-busy", "c-active"}}, // all unknown: by name
		{"completed/s", []string{"a-dead", "b-busy", "c-active"}},
		{"oldest", []string{"a-dead", "b-busy", "c-active"}},
		{"name", []string{"a-dead", "b-busy", "c-active"}},
		{"pending", []string{"b-busy", "c-active", "a-dead"}},
	}
	for _, w := range want {
		m = feed(t, m, press("s"))
		require.Contains(t, text(m), "sort: "+w.label)
		require.Equal(t, w.order, queueOrder(m, names...), w.label)
		require.Contains(t, text(m), "> c-active", "selection follows the queue, not the row")
	}
	// A new snapshot keeps the order and the selection.
	m = feed(t, m, snapshotMsg{snap: s})
	require.Contains(t, text(m), "> c-active")
	// The cursor stops at the ends.
	m = feed(t, m, press("down"), press("down"), press("down"))
	require.Contains(t, text(m), "> a-dead")
	m = feed(t, m, press("up"), press("k"), press("k"))
	require.Contains(t, text(m), "> b-busy")
}

func TestModelDisconnected(t *testing.T) {
	t.Parallel()
	m := NewModel(&fakeSource{}, "http://x", 2*time.Second)
	m = feed(t, m, snapshotMsg{err: errors.New("connection refused")})
	v := text(m)
	require.Contains(t, v, "disconnected, retrying every 2s (1 failed): connection refused")

	var cmd tea.Cmd
	var tm tea.Model
	tm, cmd = m.Update(snapshotMsg{snap: snap(t0, queue("emails", 4, 1, 0, 0, 0))})
	m = tm.(Model)
	require.NotNil(t, cmd, "the next tick is scheduled")
	require.NotContains(t, text(m), "disconnected")

	tm, cmd = m.Update(snapshotMsg{err: errors.New("EOF")})
	m = tm.(Model)
	require.NotNil(t, cmd, "a failed poll schedules a retry too")
	m = feed(t, m, snapshotMsg{err: errors.New("connection refused\nagain")})
	v = text(m)
	require.Contains(t, v, "disconnected, retrying every 2s (2 failed): connection refused again — showing data from", "one line")
	require.Regexp(t, `emails\s+4\s+1`, v, "the last data stays on screen")

	m = feed(t, m, snapshotMsg{snap: snap(t0.Add(time.Second), queue("emails", 2, 1, 0, 0, 0))})
	require.NotContains(t, text(m), "disconnected")
	require.Regexp(t, `emails\s+2\s+1`, text(m))

	// A tick polls.
	_, cmd = m.Update(tickMsg{})
	require.NotNil(t, cmd)
}

func TestModelPauseResume(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	s := snap(t0, queue("a", 2, 0, 0, 0, 0), queue("b", 1, 0, 0, 0, 0))
	s.Queues[1].Paused = true
	m := feed(t, NewModel(src, "http://x", time.Second), snapshotMsg{snap: s})

	// Pausing asks first: any key but y lets the queue run.
	tm, cmd := m.Update(press("p")) // a is selected (most pending)
	m = tm.(Model)
	require.Nil(t, cmd)
	require.Contains(t, text(m), "pause a? ")
	tm, cmd = m.Update(press("n"))
	m = tm.(Model)
	require.Nil(t, cmd)
	require.Contains(t, text(m), "a not paused")
	tm, _ = m.Update(press("p"))
	tm, _ = tm.(Model).Update(press("j")) // moves on: not a y
	m = tm.(Model)
	require.Contains(t, text(m), "a not paused")
	require.Regexp(t, `> b`, text(m), "the other key did its own work")
	m = feed(t, m, press("k"))
	require.Empty(t, src.paused)

	tm, _ = m.Update(press("p"))
	tm, cmd = tm.(Model).Update(press("y"))
	m = tm.(Model)
	require.Contains(t, text(m), "pausing a…")
	require.NotNil(t, cmd)
	msg := cmd()
	require.Equal(t, pausedMsg{queue: "a", paused: true}, msg)
	m = feed(t, m, msg)
	require.Contains(t, text(m), "paused a")
	require.Regexp(t, `> a\s+2.*paused`, text(m), "shown before the next poll confirms it")

	tm, cmd = feed(t, m, press("j")).Update(press("p"))
	m = tm.(Model)
	require.Contains(t, text(m), "resuming b…")
	m = feed(t, m, cmd())
	require.Contains(t, text(m), "resumed b")
	require.Equal(t, []string{"pause a", "resume b"}, src.paused)

	src.err = errors.New("HTTP 500")
	tm, _ = m.Update(press("p"))
	_, cmd = tm.(Model).Update(press("y"))
	m = feed(t, m, cmd())
	require.Contains(t, text(m), "could not pause b: HTTP 500")

	// Nothing to pause without queues.
	_, cmd = NewModel(src, "http://x", time.Second).Update(press("p"))
	require.Nil(t, cmd)
}

func TestModelKeys(t *testing.T) {
	t.Parallel()
	m := feed(t, NewModel(&fakeSource{}, "http://x", time.Second), snapshotMsg{snap: snap(t0, queue("a", 1, 0, 0, 0, 0))})
	for _, k := range []string{"q", "ctrl+c"} {
		_, cmd := m.Update(press(k))
		require.NotNil(t, cmd, k)
		require.IsType(t, tea.QuitMsg{}, cmd(), k)
	}
	short := text(m)
	require.Contains(t, short, "? help")
	m = feed(t, m, press("?"))
	full := text(m)
	require.NotEqual(t, short, full)
	require.Contains(t, full, "pause (then y)/resume queue")
	require.Contains(t, full, "cycle sort")
	m = feed(t, m, press("?"))
	require.Equal(t, short, text(m))
	require.True(t, m.View().AltScreen)
}

func TestModelScrollsAndFits(t *testing.T) {
	t.Parallel()
	var qs []Queue
	for i := 0; i < 40; i++ {
		qs = append(qs, queue(string(rune('A'+i%26))+strings.Repeat("x", i/26)+"-q", int64(100-i), 0, 0, 0, 0))
	}
	s := snap(t0, qs...)
	for i := 0; i < 10; i++ {
		s.Workers = append(s.Workers, Worker{ID: "w" + string(rune('0'+i)), ActiveJobs: i, LastSeen: t0.Add(-time.Duration(i) * time.Second)})
	}
	m := feed(t, NewModel(&fakeSource{}, "http://x", time.Second), tea.WindowSizeMsg{Width: 100, Height: 24}, snapshotMsg{snap: s})
	lines := strings.Split(strings.TrimRight(text(m), "\n"), "\n")
	require.LessOrEqual(t, len(lines), 24, text(m))
	for _, l := range lines {
		require.LessOrEqual(t, ansi.StringWidth(l), 100, l)
	}
	require.Contains(t, text(m), "QUEUES 40 (1–")
	require.Contains(t, text(m), "w9", "the busiest worker is listed first")
	require.Contains(t, text(m), "more")
	for i := 0; i < 39; i++ {
		m = feed(t, m, press("j"))
		require.Contains(t, text(m), "> "+qs[i+1].Name, "the selected row stays visible")
	}
	require.Contains(t, text(m), "–40 shown)")
	m = feed(t, m, press("k"))
	require.Contains(t, text(m), "> "+qs[38].Name)
}

func TestFmtAge(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{-1: "-", 0: "0s", 42 * time.Second: "42s", 184 * time.Second: "3m04s",
		2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d04h"} {
		require.Equal(t, want, fmtAge(d), d)
	}
}

// TestClient polls a fake server: three reads, then one search per queue
// with pending jobs (busiest first, at most OldestLimit).
func TestClient(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var searched []string
	var noSearch atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			io.WriteString(w, `{"status":"ok","shards":4,"shards_led":2}`)
		case "/api/v1/queues":
			io.WriteString(w, `{"queues":[{"name":"a","pending":1,"active":2,"scheduled":3,"retrying":4,"completed":5,"dead":6,"cancelled":0,"held":7,"paused":true,
				"totals":{"enqueued":10,"completed":5,"failed":7,"dead":6},"throughput":{"enqueued_per_s":1.5,"completed_per_s":0.5,"failed_per_s":0}},
				{"name":"b","pending":9,"active":0,"scheduled":0,"retrying":0,"completed":0,"dead":0,"paused":false,"totals":{"enqueued":9},"throughput":null},
				{"name":"c","pending":0,"paused":false,"throughput":null}]}`)
		case "/api/v1/workers":
			io.WriteString(w, `{"workers":[{"id":"w1","hostname":null,"queues":["a"],"active_jobs":2,"jobs":[],"first_seen":"2026-11-22T09:00:00.000Z","last_seen":"2026-11-22T09:59:58.000Z"}]}`)
		case "/api/v1/jobs/search":
			if noSearch.Load() {
				w.WriteHeader(503)
				io.WriteString(w, `{"error":"search is off","code":"unavailable"}`)
				return
			}
			var body map[string]any
			require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
			require.Equal(t, []any{"pending"}, body["state"])
			require.Equal(t, "asc", body["order"])
			require.EqualValues(t, 1, body["limit"])
			mu.Lock()
			searched = append(searched, body["queue"].(string))
			mu.Unlock()
			io.WriteString(w, `{"jobs":[{"id":"job_1","created_at":"2026-11-22T09:58:00.000Z"}],"total":1}`)
		case "/api/v1/queues/a:b/pause", "/api/v1/queues/a:b/resume":
			if r.Header.Get("Content-Type") != "application/json" { // the server refuses a POST without it (415)
				w.WriteHeader(415)
				io.WriteString(w, `{"error":"no content type","code":"unsupported_media_type"}`)
				return
			}
			mu.Lock()
			searched = append(searched, r.Method+" "+r.URL.Path)
			mu.Unlock()
			io.WriteString(w, `{}`)
		default:
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"bad queue","code":"invalid_request"}`)
		}
	}))
	defer srv.Close()
	c := NewClient(srv.URL + "/")
	c.Now = func() time.Time { return t0 }
	c.OldestLimit = 1
	s, err := c.Snapshot(context.Background())
	require.NoError(t, err)
	mu.Lock()
	require.Equal(t, []string{"b"}, searched, "only the busiest queue, within the limit")
	mu.Unlock()
	require.Equal(t, Health{Status: "ok", Shards: 4, ShardsLed: 2}, s.Health)
	require.Len(t, s.Queues, 3)
	require.True(t, s.Queues[0].Paused)
	require.Equal(t, Totals{Enqueued: 10, Completed: 5, Failed: 7, Dead: 6}, s.Queues[0].Totals)
	require.Equal(t, &Throughput{EnqueuedPerS: 1.5, CompletedPerS: 0.5}, s.Queues[0].Throughput)
	require.True(t, s.Queues[0].OldestPendingAt.IsZero())
	require.Equal(t, t0.Add(-2*time.Minute), s.Queues[1].OldestPendingAt)
	require.Len(t, s.Workers, 1)
	require.Equal(t, 2, s.Workers[0].ActiveJobs)

	rep := NewReport(srv.URL, s)
	require.Equal(t, int64(10), rep.Totals.Pending)
	require.Equal(t, int64(7), rep.Totals.Held)
	require.Equal(t, 1, rep.Totals.PausedQueues)
	require.Equal(t, 2, rep.Totals.WorkerJobs)
	require.Equal(t, 120.0, *rep.Queues[1].OldestPending)
	require.Nil(t, rep.Queues[0].OldestPending, "not looked up")
	require.Equal(t, 1.5, *rep.Queues[0].EnqueuedPerS)
	require.Nil(t, rep.Queues[1].EnqueuedPerS, "the server has not measured yet")
	require.Equal(t, 1.5, *rep.Totals.EnqueuedPerS)
	require.Equal(t, 2.0, rep.Workers[0].IdleS)
	var tbl strings.Builder
	require.NoError(t, rep.WriteTable(&tbl))
	require.Equal(t, "1.5s", fmtP95(&corvo.QueueLatency{WaitMs: &corvo.Quantiles{P95: 1500}}, false))
	require.Equal(t, "250ms", fmtP95(&corvo.QueueLatency{RunMs: &corvo.Quantiles{P95: 250}}, true))
	require.Equal(t, "-", fmtP95(&corvo.QueueLatency{WaitMs: &corvo.Quantiles{P95: 250}}, true))
	require.Regexp(t, `\ba\s+1\s+2\s+3\s+4\s+7\s+6\s+paused\s+1\.5\s+0\.5\s+0\.0\s+-\s+-\s+-\n`, tbl.String(), "no latency yet: WAIT P95 and RUN P95 are -")
	require.Regexp(t, `\bb\s+9\s+0\s+0\s+0\s+0\s+0\s+-\s+-\s+-\s+2m00s\s+-\s+-\n`, tbl.String())
	require.Regexp(t, `TOTAL \(3\)\s+10\s+2\s+3\s+4\s+7\s+6\s+1\s+1\.5`, tbl.String())
	require.Regexp(t, `w1\s+a\s+2\s+2s ago`, tbl.String())

	require.NoError(t, c.SetPaused(context.Background(), "a:b", true))
	require.NoError(t, c.SetPaused(context.Background(), "a:b", false))
	err = c.SetPaused(context.Background(), "missing", true)
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 400, se.Status)
	require.Contains(t, err.Error(), "bad queue (invalid_request)")
	mu.Lock()
	require.Equal(t, []string{"b", "POST /api/v1/queues/a:b/pause", "POST /api/v1/queues/a:b/resume"}, searched)
	mu.Unlock()

	noSearch.Store(true)
	s, err = c.Snapshot(context.Background())
	require.NoError(t, err)
	require.True(t, s.NoSearch)
	require.True(t, s.Queues[1].OldestPendingAt.IsZero())

	srv.Close()
	_, err = c.Snapshot(context.Background())
	require.Error(t, err)
}

// TestClientAPIKey: every request carries the client's key; a server that
// wants one and gets none answers 401, which the dashboard explains.
func TestClientAPIKey(t *testing.T) {
	t.Parallel()
	const key = "corvo_0123456789abcdef_topkeytopkeytopkeytopkeytopkeytopkeytopke"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(401)
			io.WriteString(w, `{"error":"this server needs an API key","code":"unauthorized"}`)
			return
		}
		switch r.URL.Path {
		case "/healthz":
			io.WriteString(w, `{"status":"ok","shards":1,"shards_led":1}`)
		case "/api/v1/queues":
			io.WriteString(w, `{"queues":[{"name":"a","pending":1}]}`)
		case "/api/v1/workers":
			io.WriteString(w, `{"workers":[]}`)
		case "/api/v1/jobs/search":
			io.WriteString(w, `{"jobs":[],"total":0}`)
		default:
			io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()

	c := NewClient(srv.URL)
	_, err := c.Snapshot(context.Background())
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 401, se.Status)
	m := feed(t, NewModel(&fakeSource{}, srv.URL, time.Second), snapshotMsg{err: err})
	require.Contains(t, text(m), "the server wants an API key (this server needs an API key (unauthorized)); pass --api-key or set CORVO_API_KEY")

	c.APIKey = key
	mu.Lock()
	seen = nil
	mu.Unlock()
	s, err := c.Snapshot(context.Background())
	require.NoError(t, err)
	require.Len(t, s.Queues, 1)
	require.NoError(t, c.SetPaused(context.Background(), "a", true))
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(seen), 5, "health, queues, workers, a search, the pause")
	for _, r := range seen {
		require.True(t, strings.HasSuffix(r, " Bearer "+key), r)
	}
}
