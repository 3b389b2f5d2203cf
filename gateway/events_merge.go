package gateway

import (
	"bufio"
	"context"
	"net/url"
	"time"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
)

// The merged event stream: on a node that does not host every shard a
// stream needs, GET /api/v1/events serves the hosted shards from the local
// ring and the others through SSE streams opened to nodes that host them
// (peer.Client.Events: ?shards=…, with the hop header, so those nodes
// answer from their rings only). The client sees one stream whose event IDs are ordinary cursors:
// one position per shard, each moved only by what was delivered from that
// shard, so an ID resumes exactly there through any node.
//
// One goroutine (the response's stream writer) owns the merged cursor; each
// upstream stream has a reader goroutine that hands it frames in order
// over one channel. An upstream that breaks is opened again (to the same
// node or another that hosts its shards) from the merged cursor, after a
// bounded backoff; one that says its resume position is too old (reset)
// passes the reset on.

// Limits of upstream streams.
const (
	upstreamStartWait  = 3 * time.Second        // how long a merged stream waits for its upstreams before its first frame
	upstreamBackoffMin = 100 * time.Millisecond // first wait before opening a broken upstream again
	upstreamBackoffMax = 2 * time.Second        // longest wait
	upstreamFailedFor  = 5 * time.Second        // a node that could not be opened is tried last for this long
)

// upstreamQuery is the filter part of an upstream request's query.
func upstreamQuery(queue, typ string) string {
	var q string
	if queue != "" {
		q += "&queue=" + url.QueryEscape(queue)
	}
	if typ != "" {
		q += "&type=" + url.QueryEscape(typ)
	}
	return q
}

// upstream is one stream opened to another node for some shards.
type upstream struct {
	addr   string
	shards []int
	live   bool // opened without a resume position: it tells its own
	start  time.Time
	cancel context.CancelFunc
	open   bool // it answered (the merger's view)
	dead   bool // the merger dropped it: ignore what it still sends
	early  bool // opened while the merger waits for its first frame
}

const (
	upOpen   = iota // ": connected {cursor}"
	upFrame         // an event or reset frame
	upClosed        // the stream ended or could not be opened
)

type upMsg struct {
	up    *upstream
	kind  int
	id    string // the frame's id or the connected cursor
	event string
	data  []byte
	err   error
}

// merger is the state of one merged stream (owned by its stream writer).
type merger struct {
	s      *Server
	ctx    context.Context // ends the upstreams
	end    context.CancelFunc
	msgs   chan upMsg
	n      int
	cur    events.Cursor // the merged cursor: what the client has been given
	known  []bool        // shards whose position in cur is real
	local  []bool        // shards read from the local ring
	query  string
	buf    []byte
	failed map[string]time.Time

	started  bool    // the client got its first frame
	waiting  int     // upstreams opened early that have not answered yet
	deferred []upMsg // frames that came before the first frame
	resetDue bool    // an upstream reset while starting: the first frame is a reset
	pending  []int   // shards with no upstream, to open after retry fires
	retry    *time.Timer
	backoff  time.Duration
}

// newMerger prepares a merged stream for the needed shards (nil: all),
// the remote ones of which come from other nodes. from is the client's
// resume cursor (nil: live).
func (s *Server) newMerger(n int, from events.Cursor, need []bool, remote []int, query string) *merger {
	ctx, cancel := context.WithCancel(context.Background())
	m := &merger{s: s, ctx: ctx, end: cancel, msgs: make(chan upMsg, 256), n: n, known: make([]bool, n),
		query: query, failed: map[string]time.Time{}, backoff: upstreamBackoffMin}
	if from != nil {
		m.cur = append(events.Cursor(nil), from...)
		for i := range m.known {
			m.known[i] = true
		}
	} else {
		m.cur = make(events.Cursor, n)
		for i := range m.known {
			m.known[i] = !wanted(need, i) // a shard the stream never reads: its position does not matter
		}
	}
	m.local = s.localShards(need, n)
	m.pending = remote
	return m
}

// stream serves the merged stream: sub (nil when this node hosts none of
// the needed shards) reads the local ones; reset says sub's resume point
// was too old.
func (m *merger) stream(w *bufio.Writer, sub *events.Sub, reset bool) {
	defer m.end()
	defer func() {
		if m.retry != nil {
			m.retry.Stop()
		}
	}()
	s := m.s
	if sub != nil {
		m.takeLocal(sub)
	}
	// Open the upstreams and wait (a little) for them, and for the retries
	// of those that fail, before the first frame (which sends the
	// headers): a client that has them is subscribed to every shard it can
	// be.
	m.openPending(true)
	startWait := time.NewTimer(upstreamStartWait)
start:
	for m.waiting > 0 || m.retry != nil {
		select {
		case msg := <-m.msgs:
			m.handle(msg)
		case <-m.retryC():
			m.retry = nil
			m.openPending(true)
		case <-startWait.C:
			break start
		case <-s.closed:
			startWait.Stop()
			return
		}
	}
	startWait.Stop()
	m.started = true
	if reset || m.resetDue {
		m.buf = appendReset(m.buf, m.cur.Encode(), "the resume point is older than the events this server keeps; refetch and continue")
	} else {
		m.buf = append(m.buf, ": connected\n\n"...)
	}
	for _, msg := range m.deferred {
		m.handle(msg)
	}
	m.deferred = nil
	if !writeFlush(w, m.buf) {
		return
	}
	m.buf = m.buf[:0]

	keepalive := time.NewTicker(s.cfg.EventsKeepalive)
	defer keepalive.Stop()
	var wait <-chan struct{} // nil: read the ring
	for {
		if sub != nil && wait == nil {
			items, more, lagged := sub.Next(eventsBatch)
			if lagged {
				m.takeLocal(sub)
				m.buf = appendReset(m.buf, m.cur.Encode(), "this stream fell behind the events this server keeps; refetch and continue")
			}
			for i := range items {
				e := &items[i].Event
				m.cur[e.Shard] = events.Pos{Index: e.Index, N: e.Pos}
				m.buf = appendJobFrame(m.buf, m.cur.Encode(), e)
			}
			if len(items) > 0 {
				m.takeLocal(sub) // also past the events the filter left out
			}
			wait = more
		}
	drain:
		for k := 0; k < eventsBatch; k++ {
			select {
			case msg := <-m.msgs:
				m.handle(msg)
			default:
				break drain
			}
		}
		if len(m.buf) > 0 {
			if !writeFlush(w, m.buf) {
				return
			}
			m.buf = m.buf[:0]
		}
		if sub != nil && wait == nil {
			continue
		}
		select {
		case <-wait: // nil when there is no local part: never ready
			wait = nil
		case msg := <-m.msgs:
			m.handle(msg)
		case <-m.retryC():
			m.retry = nil
			m.openPending(false)
		case <-keepalive.C:
			// A shard read from the ring that this node stopped hosting:
			// end, and the client resumes through a new plan.
			if (m.local != nil && !s.hostsAll(m.local)) || !writeFlush(w, []byte(": keepalive\n\n")) {
				return
			}
		case <-s.closed:
			return
		}
	}
}

// takeLocal copies the local shards' positions from sub.
func (m *merger) takeLocal(sub *events.Sub) {
	c := sub.Cursor()
	for i := range c {
		if m.local != nil && m.local[i] {
			m.cur[i] = c[i]
			m.known[i] = true
		}
	}
}

func (m *merger) retryC() <-chan time.Time {
	if m.retry == nil {
		return nil
	}
	return m.retry.C
}

// handle applies one upstream message.
func (m *merger) handle(msg upMsg) {
	up := msg.up
	switch msg.kind {
	case upClosed:
		m.closed(up, msg.err)
		return
	case upOpen:
		if !up.dead && !up.open {
			m.opened(up, msg.id, false)
		}
		return
	}
	if up.dead {
		return
	}
	if !up.open {
		// A stream whose first frame is a reset: the resume point was
		// too old there.
		if !m.opened(up, msg.id, msg.event == "reset") {
			return
		}
		if msg.event == "reset" && !m.started {
			m.resetDue = true
			return
		}
	}
	if !m.started {
		m.deferred = append(m.deferred, msg)
		return
	}
	c, err := events.DecodeCursor(msg.id, m.n)
	if err != nil {
		m.drop(up)
		return
	}
	for _, sh := range up.shards {
		m.cur[sh] = c[sh]
	}
	// The frame as it came (a job event, or a reset passed on), under the
	// merged cursor.
	m.buf = append(m.buf, "id: "...)
	m.buf = append(m.buf, m.cur.Encode()...)
	if msg.event != "" {
		m.buf = append(m.buf, "\nevent: "...)
		m.buf = append(m.buf, msg.event...)
	}
	m.buf = append(m.buf, "\ndata: "...)
	m.buf = append(m.buf, msg.data...)
	m.buf = append(m.buf, "\n\n"...)
}

// opened records that up answered, starting at cursor id. A stream opened
// live, or one that reset, gives its shards their positions; a live one
// after the client's first frame means the client may have missed events
// of those shards meanwhile, and is told to reset.
func (m *merger) opened(up *upstream, id string, reset bool) bool {
	c, err := events.DecodeCursor(id, m.n)
	if err != nil {
		m.drop(up)
		return false
	}
	up.open = true
	if up.early {
		up.early = false
		m.waiting--
	}
	if up.live || reset {
		for _, sh := range up.shards {
			m.cur[sh] = c[sh]
			m.known[sh] = true
		}
		if up.live && !reset && m.started {
			m.buf = appendReset(m.buf, m.cur.Encode(), "the events of some shards could not be followed for a while; refetch and continue")
		}
	}
	return true
}

// drop abandons an upstream that sent what it should not have: it ends,
// and its shards are opened again.
func (m *merger) drop(up *upstream) {
	up.dead = true
	up.cancel()
}

// closed takes an ended upstream: its shards are opened again, from the
// merged cursor, after the backoff.
func (m *merger) closed(up *upstream, err error) {
	if up.early {
		up.early = false
		m.waiting--
	}
	if !up.open {
		m.failed[up.addr] = time.Now()
	} else if time.Since(up.start) > upstreamBackoffMax {
		m.backoff = upstreamBackoffMin // it ran a while: no storm to hold back
	}
	m.s.log.Debug().Err(err).Str("node", up.addr).Ints("shards", up.shards).Msg("event upstream ended")
	m.pending = append(m.pending, up.shards...)
	m.schedule()
}

func (m *merger) schedule() {
	if m.retry != nil || len(m.pending) == 0 {
		return
	}
	m.retry = time.NewTimer(m.backoff)
	m.backoff = min(2*m.backoff, upstreamBackoffMax)
}

// openPending opens upstreams for the pending shards: a greedy cover (the
// node hosting the most of them first), a stream for the shards of known
// position (resumed from the merged cursor) and one for the others (live).
// Shards no node is known to host stay pending.
func (m *merger) openPending(early bool) {
	shards := m.pending
	m.pending = nil
	groups, rest := m.s.coverShards(shards, m.failed)
	for _, g := range groups {
		var known, unknown []int
		for _, sh := range g.Shards {
			if m.known[sh] {
				known = append(known, sh)
			} else {
				unknown = append(unknown, sh)
			}
		}
		if len(known) > 0 {
			m.open(g.Addr, known, false, early)
		}
		if len(unknown) > 0 {
			m.open(g.Addr, unknown, true, early)
		}
	}
	m.pending = rest
	m.schedule()
}

func (m *merger) open(addr string, shards []int, live, early bool) {
	ctx, cancel := context.WithCancel(m.ctx)
	up := &upstream{addr: addr, shards: shards, live: live, start: time.Now(), cancel: cancel, early: early}
	if early {
		m.waiting++
	}
	var from string
	if !live {
		from = m.cur.Encode()
	}
	go func() {
		err := m.s.readUpstream(ctx, m.msgs, up, from, m.query)
		cancel()
		select {
		case m.msgs <- upMsg{up: up, kind: upClosed, err: err}:
		case <-m.ctx.Done():
		}
	}()
}

// coverShards groups shards by the node to stream them from
// (router.Cover). Nodes that failed lately are used only for shards no
// other node hosts. rest: the shards no node is known to host.
func (s *Server) coverShards(shards []int, failed map[string]time.Time) (groups []router.Group, rest []int) {
	lists := make(map[int][]string, len(shards))
	for _, sh := range shards {
		all := s.peer.Targets(sh)
		var good []string
		for _, a := range all {
			if at, ok := failed[a]; !ok || time.Since(at) > upstreamFailedFor {
				good = append(good, a)
			}
		}
		if len(good) == 0 {
			good = all
		}
		lists[sh] = good
	}
	return router.Cover(shards, lists)
}

// upstreamIdle is how long an upstream stream may stay silent (its node
// sends a keepalive comment at least every EventsKeepalive) before it is
// taken for dead.
func (s *Server) upstreamIdle() time.Duration {
	return 3*max(s.cfg.EventsKeepalive, EventsKeepaliveDefault) + 5*time.Second
}

// readUpstream reads one upstream stream (peer.Client.Events), handing
// its frames to msgs in order, until it ends or ctx does. from is the
// resume cursor ("": live).
func (s *Server) readUpstream(ctx context.Context, msgs chan<- upMsg, up *upstream, from, query string) error {
	return s.peer.Events(ctx, up.addr, up.shards, from, query, s.upstreamIdle(), func(f peer.Frame) bool {
		m := upMsg{up: up, kind: upFrame, id: f.ID, event: f.Event, data: f.Data}
		if f.Connected {
			m.kind = upOpen
		}
		select {
		case msgs <- m:
			return true
		case <-ctx.Done():
			return false
		}
	})
}
