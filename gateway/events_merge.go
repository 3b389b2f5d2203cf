package gateway

import (
	"bufio"
	"time"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/peer"
)

// The merged event stream: on a node that does not host every shard a
// stream needs, GET /api/v1/events serves the hosted shards from the local
// ring and the others through SSE streams opened to nodes that host them.
// The client sees one stream whose event IDs are ordinary cursors: one
// position per shard, each moved only by what was delivered from that
// shard, so an ID resumes exactly there through any node.
//
// One goroutine (the response's stream writer) owns the merged cursor.
// The upstream streams are peer.Upstreams': it opens them (router.Cover),
// reads each on its own goroutine, and opens one that breaks again (on the
// same node or another hosting its shards) after a bounded backoff, from
// the merged cursor it asks this side for. Their frames come back here
// in order (handle), and this side moves the cursor; an upstream that says
// its resume position is too old (reset) passes the reset on.

// upstreamStartWait is how long a merged stream waits for its upstreams
// before its first frame.
const upstreamStartWait = 3 * time.Second

// merger is the state of one merged stream (owned by its stream writer).
type merger struct {
	s     *Server
	ups   *peer.Upstreams
	n     int
	cur   events.Cursor // the merged cursor: what the client has been given
	known []bool        // shards whose position in cur is real
	local []bool        // shards read from the local ring
	buf   []byte

	started  bool                 // the client got its first frame
	deferred []peer.UpstreamFrame // frames that came before the first frame
	resetDue bool                 // an upstream reset while starting: the first frame is a reset
}

// newMerger prepares a merged stream for the needed shards (nil: all),
// the remote ones of which come from other nodes (the stream's filter:
// queue and typ, as the client gave them). from is the client's resume
// cursor (nil: live).
func (s *Server) newMerger(n int, from events.Cursor, need []bool, remote []int, queue, typ, ns string) *merger {
	m := &merger{s: s, n: n, known: make([]bool, n)}
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
	m.ups = s.peer.Upstreams(remote, peer.UpstreamsConfig{Queue: queue, Type: typ, Namespace: ns, Idle: s.upstreamIdle(),
		Known: func(sh int) bool { return m.known[sh] }, Cursor: func() string { return m.cur.Encode() }})
	return m
}

// stream serves the merged stream: sub (nil when this node hosts none of
// the needed shards) reads the local ones; reset says sub's resume point
// was too old.
func (m *merger) stream(w *bufio.Writer, sub *events.Sub, reset bool) {
	defer m.ups.Close()
	s := m.s
	if sub != nil {
		m.takeLocal(sub)
	}
	// Open the upstreams and wait (a little) for them, and for the retries
	// of those that fail, before the first frame (which sends the
	// headers): a client that has them is subscribed to every shard it can
	// be.
	m.ups.Open()
	startWait := time.NewTimer(upstreamStartWait)
start:
	for m.ups.Waiting() {
		select {
		case msg := <-m.ups.Msgs():
			m.handle(msg)
		case <-m.ups.RetryC():
			m.ups.Retry()
		case <-startWait.C:
			break start
		case <-s.closed:
			startWait.Stop()
			return
		}
	}
	startWait.Stop()
	m.started = true
	m.ups.Started()
	if reset || m.resetDue {
		m.buf = appendReset(m.buf, m.cur.Encode(), "the resume point is older than the events this server keeps; refetch and continue")
	} else {
		m.buf = append(m.buf, ": connected\n\n"...)
	}
	for _, f := range m.deferred {
		if !f.Dropped() {
			m.frame(f)
		}
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
			case msg := <-m.ups.Msgs():
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
		case msg := <-m.ups.Msgs():
			m.handle(msg)
		case <-m.ups.RetryC():
			m.ups.Retry()
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

// handle applies one upstream message (peer.Upstreams.Take keeps the
// streams; the merged cursor is this side's).
func (m *merger) handle(msg peer.UpstreamMsg) {
	f, ok := m.ups.Take(msg)
	if !ok {
		return
	}
	if f.Opened {
		// A stream's first message: the ": connected {cursor}" comment,
		// or a first frame, a reset when the resume point was too old
		// there.
		reset := !f.Connected && f.Event == "reset"
		if !m.opened(f, reset) || f.Connected {
			return
		}
		if reset && !m.started {
			m.resetDue = true
			return
		}
	}
	if !m.started {
		m.deferred = append(m.deferred, f)
		return
	}
	m.frame(f)
}

// frame passes an upstream frame on (a job event, or a reset), under the
// merged cursor, its stream's shards moved to the frame's positions.
func (m *merger) frame(f peer.UpstreamFrame) {
	c, err := events.DecodeCursor(f.ID, m.n)
	if err != nil {
		m.ups.Drop(f)
		return
	}
	for _, sh := range f.Shards {
		m.cur[sh] = c[sh]
	}
	m.buf = append(m.buf, "id: "...)
	m.buf = append(m.buf, m.cur.Encode()...)
	if f.Event != "" {
		m.buf = append(m.buf, "\nevent: "...)
		m.buf = append(m.buf, f.Event...)
	}
	m.buf = append(m.buf, "\ndata: "...)
	m.buf = append(m.buf, f.Data...)
	m.buf = append(m.buf, "\n\n"...)
}

// opened takes a stream's first message, starting at cursor f.ID. A
// stream opened live, or one that reset, gives its shards their
// positions; a live one after the client's first frame means the client
// may have missed events of those shards meanwhile, and is told to reset.
// A position that cannot be read drops the stream (false).
func (m *merger) opened(f peer.UpstreamFrame, reset bool) bool {
	c, err := events.DecodeCursor(f.ID, m.n)
	if err != nil {
		m.ups.Drop(f)
		return false
	}
	m.ups.Opened(f)
	if f.Live || reset {
		for _, sh := range f.Shards {
			m.cur[sh] = c[sh]
			m.known[sh] = true
		}
		if f.Live && !reset && m.started {
			m.buf = appendReset(m.buf, m.cur.Encode(), "the events of some shards could not be followed for a while; refetch and continue")
		}
	}
	return true
}

// upstreamIdle is how long an upstream stream may stay silent (its node
// sends a keepalive comment at least every EventsKeepalive) before it is
// taken for dead.
func (s *Server) upstreamIdle() time.Duration {
	return 3*max(s.cfg.EventsKeepalive, EventsKeepaliveDefault) + 5*time.Second
}
