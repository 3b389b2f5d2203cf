package top

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
)

// Source is what the dashboard polls; *Client is the real one.
type Source interface {
	Snapshot(ctx context.Context) (*Snapshot, error)
	SetPaused(ctx context.Context, queue string, paused bool) error
}

// rateSamples is how many snapshots the live rates span: with a 1 s
// interval, rates are averaged over the last 5 s (steady enough to read,
// quick to follow a change).
const rateSamples = 5

// requestTimeout bounds one poll or one pause/resume.
const requestTimeout = 10 * time.Second

// Model is the bubbletea model of `corvo top`. It is pure: every input is a
// message (snapshots, ticks, keys, window sizes) and time comes from the
// snapshots, so tests drive Update and read View.
type Model struct {
	src      Source
	url      string
	interval time.Duration

	snap    *Snapshot   // the latest good snapshot (kept while disconnected)
	history []*Snapshot // the last rateSamples good snapshots, oldest first
	rows    []row       // snap's queues, rated and sorted
	err     error       // the last poll's error; nil when connected
	fails   int         // consecutive failed polls

	sortBy   sortKey
	selected string // the selected queue's name, so a re-sort keeps it
	cursor   int    // its index in rows
	offset   int    // the first queue row shown (the table scrolls to keep the cursor in view)
	status   string // the outcome of the last pause/resume
	// confirm is the queue a first p asked to pause: a y pauses it, any
	// other key lets it run (pausing stops production work; resuming
	// needs no second key).
	confirm string

	width, height int
	keys          keyMap
	help          help.Model
}

type keyMap struct {
	Up, Down, Sort, Pause, Help, Quit key.Binding
}

func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.Sort, k.Pause, k.Help, k.Quit}
}

func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Up, k.Down}, {k.Sort, k.Pause}, {k.Help, k.Quit}}
}

func defaultKeys() keyMap {
	return keyMap{
		Up:    key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "select up")),
		Down:  key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "select down")),
		Sort:  key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "cycle sort")),
		Pause: key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause (then y)/resume queue")),
		Help:  key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:  key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
	}
}

// NewModel returns a dashboard polling src every interval; url is shown in
// the title.
func NewModel(src Source, url string, interval time.Duration) Model {
	h := help.New()
	// Bold and faint read on dark and light terminals alike.
	key, desc := lipgloss.NewStyle().Bold(true), lipgloss.NewStyle().Faint(true)
	h.Styles = help.Styles{Ellipsis: desc, ShortKey: key, ShortDesc: desc, ShortSeparator: desc, FullKey: key, FullDesc: desc, FullSeparator: desc}
	return Model{src: src, url: url, interval: interval, keys: defaultKeys(), help: h, sortBy: sortPending}
}

// Messages.
type (
	snapshotMsg struct {
		snap *Snapshot
		err  error
	}
	tickMsg   struct{}
	pausedMsg struct {
		queue  string
		paused bool
		err    error
	}
)

// Init starts the first poll.
func (m Model) Init() tea.Cmd { return m.poll() }

func (m Model) poll() tea.Cmd {
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		s, err := src.Snapshot(ctx)
		return snapshotMsg{snap: s, err: err}
	}
}

func (m Model) tick() tea.Cmd {
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
}

// Update handles one message. There is at most one poll in flight: each
// answer (good or not) schedules the next tick, and each tick one poll.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.SetWidth(msg.Width)
		m.scroll()
		return m, nil
	case tickMsg:
		return m, m.poll()
	case snapshotMsg:
		if msg.err != nil {
			m.err = msg.err
			m.fails++
			return m, m.tick()
		}
		m.err, m.fails = nil, 0
		m.observe(msg.snap)
		return m, m.tick()
	case pausedMsg:
		verb := "resumed"
		if msg.paused {
			verb = "paused"
		}
		if msg.err != nil {
			m.status = fmt.Sprintf("could not %s %s: %v", verb[:len(verb)-1], msg.queue, msg.err)
			return m, nil
		}
		m.status = verb + " " + msg.queue
		// Show it now; the next poll confirms it.
		m.rows = slices.Clone(m.rows)
		for i := range m.rows {
			if m.rows[i].Name == msg.queue {
				m.rows[i].Paused = msg.paused
			}
		}
		return m, nil
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

func (m Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	if q := m.confirm; q != "" {
		m.confirm = ""
		if msg.String() == "y" && m.cursor < len(m.rows) && m.rows[m.cursor].Name == q {
			return m.setPaused(q, true)
		}
		m.status = q + " not paused"
		if !key.Matches(msg, m.keys.Pause) {
			return m.key(msg) // the key does what it does
		}
		return m, nil
	}
	switch {
	case key.Matches(msg, m.keys.Quit):
		return m, tea.Quit
	case key.Matches(msg, m.keys.Help):
		m.help.ShowAll = !m.help.ShowAll
		m.scroll()
	case key.Matches(msg, m.keys.Sort):
		m.sortBy = (m.sortBy + 1) % numSortKeys
		m.resort()
	case key.Matches(msg, m.keys.Up):
		m.move(-1)
	case key.Matches(msg, m.keys.Down):
		m.move(+1)
	case key.Matches(msg, m.keys.Pause):
		if m.cursor >= len(m.rows) {
			return m, nil
		}
		q := m.rows[m.cursor].Name
		if !m.rows[m.cursor].Paused {
			m.confirm = q
			m.status = "pause " + q + "? workers get none of its jobs until it is resumed: y to pause, any other key cancels"
			return m, nil
		}
		return m.setPaused(q, false)
	}
	return m, nil
}

func (m Model) setPaused(q string, pause bool) (tea.Model, tea.Cmd) {
	if pause {
		m.status = "pausing " + q + "…"
	} else {
		m.status = "resuming " + q + "…"
	}
	src := m.src
	return m, func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		return pausedMsg{queue: q, paused: pause, err: src.SetPaused(ctx, q, pause)}
	}
}

// observe takes a good snapshot: rates from the oldest kept one, rows
// re-sorted, the selection kept on the same queue.
func (m *Model) observe(s *Snapshot) {
	m.history = append(m.history, s)
	if len(m.history) > rateSamples {
		m.history = m.history[len(m.history)-rateSamples:]
	}
	var local map[string]Rate
	if len(m.history) > 1 {
		local = localRates(m.history[0], s)
	}
	m.snap = s
	m.rows = buildRows(s, local)
	m.resort()
}

func (m *Model) resort() {
	m.rows = slices.Clone(m.rows) // rows may be shared with an earlier Model value
	sortRows(m.rows, m.sortBy)
	m.cursor = 0
	for i := range m.rows {
		if m.rows[i].Name == m.selected {
			m.cursor = i
		}
	}
	if len(m.rows) > 0 {
		m.selected = m.rows[m.cursor].Name
	}
	m.scroll()
}

func (m *Model) move(d int) {
	if len(m.rows) == 0 {
		return
	}
	m.cursor = min(max(m.cursor+d, 0), len(m.rows)-1)
	m.selected = m.rows[m.cursor].Name
	m.scroll()
}

// scroll moves the queue table's offset just enough to show the cursor.
func (m *Model) scroll() {
	if m.snap == nil {
		return
	}
	size, _ := m.budget()
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+size {
		m.offset = m.cursor - size + 1
	}
	m.offset = max(min(m.offset, len(m.rows)-size), 0)
}

// sortedWorkers orders workers busiest first, then most recently seen.
func sortedWorkers(ws []Worker) []Worker {
	out := append([]Worker(nil), ws...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].ActiveJobs != out[j].ActiveJobs {
			return out[i].ActiveJobs > out[j].ActiveJobs
		}
		if !out[i].LastSeen.Equal(out[j].LastSeen) {
			return out[i].LastSeen.After(out[j].LastSeen)
		}
		return out[i].ID < out[j].ID
	})
	return out
}
