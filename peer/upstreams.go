package peer

import (
	"context"
	"net/url"
	"time"

	"github.com/corvohq/corvo/router"
)

// Upstream event streams: the cross-node half of a merged event stream
// (gateway/events_merge.go). A node serving GET /api/v1/events for shards
// it does not host follows them through streams opened to nodes that do
// (Events: ?shards=…, with the hop header, so those nodes answer from
// their rings only). Upstreams opens them (a greedy cover), reads each on
// its own goroutine, and opens again the shards of one that ended, after a
// bounded backoff, on the same node or another hosting them (a node that
// could not be opened is tried last for a while). The merged cursor is
// not its business: it asks its owner for it (UpstreamsConfig.Cursor)
// whenever it opens a stream, and hands every frame on (Take) for the
// owner to apply.

// Limits of upstream streams.
const (
	upstreamBackoffMin = 100 * time.Millisecond // first wait before opening a broken upstream again
	upstreamBackoffMax = 2 * time.Second        // longest wait
	upstreamFailedFor  = 5 * time.Second        // a node that could not be opened is tried last for this long
)

// UpstreamsConfig is what Upstreams needs from the merged stream it feeds.
type UpstreamsConfig struct {
	// Queue and Type are the stream's filter (the client's ?queue= and
	// ?type=, as given; "": none).
	Queue, Type string
	// Namespace is the namespace the stream is of (its queue names are
	// as that namespace sees them).
	Namespace string
	// Idle is how long a stream may stay silent before it is taken for
	// dead (its node sends a keepalive more often).
	Idle time.Duration
	// Known reports whether the merged cursor holds a real position for
	// shard sh: such shards resume from Cursor, the others are opened
	// live (and the stream's first frame tells where they start).
	Known func(sh int) bool
	// Cursor is the merged cursor, encoded.
	Cursor func() string
}

// Upstreams is the set of upstream streams of one merged stream. Every
// method is called from one goroutine, the merged stream's owner, which
// also calls Known and Cursor through them.
type Upstreams struct {
	c       *Client
	cfg     UpstreamsConfig
	query   string
	ctx     context.Context // ends every stream
	end     context.CancelFunc
	msgs    chan UpstreamMsg
	failed  map[string]time.Time // nodes that could not be opened, when
	early   bool                 // streams opened now count in waiting
	waiting int                  // streams opened early that have not answered yet
	pending []int                // shards with no stream, to open when retry fires
	retry   *time.Timer
	backoff time.Duration
}

// upstream is one stream opened to another node for some shards.
type upstream struct {
	addr   string
	shards []int
	live   bool // opened without a resume position: it tells its own
	start  time.Time
	cancel context.CancelFunc
	open   bool // it answered (the owner's view)
	dead   bool // dropped: what it still sends is ignored
	early  bool // opened while the owner waits for its first frame
}

// UpstreamMsg is one thing a stream's reader says, in order: hand it to
// Take.
type UpstreamMsg struct {
	up     *upstream
	closed bool // the stream ended or could not be opened
	frame  Frame
	err    error
}

// UpstreamFrame is a frame of an upstream stream, for the owner to apply.
type UpstreamFrame struct {
	Frame
	// Shards are the shards the stream carries: its frames' IDs move
	// only their positions.
	Shards []int
	// Opened: the stream's first message. Its ID is where it starts (a
	// ": connected {cursor}" comment, or a first event or reset frame).
	Opened bool
	// Live: the stream was opened without a resume position; its start
	// gives its shards their positions.
	Live bool
	up   *upstream
}

// Upstreams prepares the upstream streams of shards for one merged
// stream; Open opens them. Close ends them all.
func (c *Client) Upstreams(shards []int, cfg UpstreamsConfig) *Upstreams {
	ctx, cancel := context.WithCancel(context.Background())
	var q string
	if cfg.Queue != "" {
		q += "&queue=" + url.QueryEscape(cfg.Queue)
	}
	if cfg.Type != "" {
		q += "&type=" + url.QueryEscape(cfg.Type)
	}
	return &Upstreams{c: c, cfg: cfg, query: q, ctx: ctx, end: cancel, msgs: make(chan UpstreamMsg, 256),
		failed: map[string]time.Time{}, early: true, pending: shards, backoff: upstreamBackoffMin}
}

// Msgs delivers what the streams say, in order per stream.
func (u *Upstreams) Msgs() <-chan UpstreamMsg { return u.msgs }

// Waiting reports whether, while starting, a stream has not answered yet
// or some shards wait to be opened again.
func (u *Upstreams) Waiting() bool { return u.waiting > 0 || u.retry != nil }

// Started says the owner sent its first frame: streams opened from now on
// are not waited for.
func (u *Upstreams) Started() { u.early = false }

// RetryC fires when shards are due to be opened again (Retry); nil when
// none are.
func (u *Upstreams) RetryC() <-chan time.Time {
	if u.retry == nil {
		return nil
	}
	return u.retry.C
}

// Retry opens the shards due again, after RetryC fired.
func (u *Upstreams) Retry() {
	u.retry = nil
	u.Open()
}

// Close ends every stream.
func (u *Upstreams) Close() {
	if u.retry != nil {
		u.retry.Stop()
	}
	u.end()
}

// Take applies the bookkeeping of one message and returns the frame, if
// any, the owner must apply: a stream that ended is opened again after the
// backoff; a dropped stream's frames, and a connected comment after the
// first message, are left out. A frame marked Opened is the stream's
// first: the owner answers it with Opened or Drop.
func (u *Upstreams) Take(msg UpstreamMsg) (UpstreamFrame, bool) {
	up := msg.up
	if msg.closed {
		u.closed(up, msg.err)
		return UpstreamFrame{}, false
	}
	if up.dead || (msg.frame.Connected && up.open) {
		return UpstreamFrame{}, false
	}
	return UpstreamFrame{Frame: msg.frame, Shards: up.shards, Opened: !up.open, Live: up.live, up: up}, true
}

// Opened records that the stream that sent f (its first message, Opened)
// answered with a position the owner could read; else the owner drops it
// (Drop), and its node counts as one that could not be opened.
func (u *Upstreams) Opened(f UpstreamFrame) {
	up := f.up
	up.open = true
	if up.early {
		up.early = false
		u.waiting--
	}
}

// Drop abandons the stream that sent f (it sent what it should not
// have): it ends, its later frames are left out, and its shards are
// opened again.
func (u *Upstreams) Drop(f UpstreamFrame) {
	f.up.dead = true
	f.up.cancel()
}

// Dropped reports whether the stream that sent f was dropped since.
func (f *UpstreamFrame) Dropped() bool { return f.up.dead }

// closed takes an ended stream: its shards are opened again, from the
// merged cursor, after the backoff.
func (u *Upstreams) closed(up *upstream, err error) {
	if up.early {
		up.early = false
		u.waiting--
	}
	if !up.open {
		u.failed[up.addr] = time.Now()
	} else if time.Since(up.start) > upstreamBackoffMax {
		u.backoff = upstreamBackoffMin // it ran a while: no storm to hold back
	}
	u.c.log.Debug().Err(err).Str("node", up.addr).Ints("shards", up.shards).Msg("event upstream ended")
	u.pending = append(u.pending, up.shards...)
	u.schedule()
}

func (u *Upstreams) schedule() {
	if u.retry != nil || len(u.pending) == 0 {
		return
	}
	u.retry = time.NewTimer(u.backoff)
	u.backoff = min(2*u.backoff, upstreamBackoffMax)
}

// Open opens streams for the pending shards: a greedy cover (the node
// hosting the most of them first), a stream for the shards of known
// position (resumed from the merged cursor) and one for the others
// (live). Shards no node is known to host stay pending.
func (u *Upstreams) Open() {
	shards := u.pending
	u.pending = nil
	groups, rest := u.cover(shards)
	for _, g := range groups {
		var known, unknown []int
		for _, sh := range g.Shards {
			if u.cfg.Known(sh) {
				known = append(known, sh)
			} else {
				unknown = append(unknown, sh)
			}
		}
		if len(known) > 0 {
			u.open(g.Addr, known, false)
		}
		if len(unknown) > 0 {
			u.open(g.Addr, unknown, true)
		}
	}
	u.pending = rest
	u.schedule()
}

func (u *Upstreams) open(addr string, shards []int, live bool) {
	ctx, cancel := context.WithCancel(u.ctx)
	up := &upstream{addr: addr, shards: shards, live: live, start: time.Now(), cancel: cancel, early: u.early}
	if u.early {
		u.waiting++
	}
	var from string
	if !live {
		from = u.cfg.Cursor()
	}
	go func() {
		err := u.c.Events(ctx, addr, u.cfg.Namespace, shards, from, u.query, u.cfg.Idle, func(f Frame) bool {
			select {
			case u.msgs <- UpstreamMsg{up: up, frame: f}:
				return true
			case <-ctx.Done():
				return false
			}
		})
		cancel()
		select {
		case u.msgs <- UpstreamMsg{up: up, closed: true, err: err}:
		case <-u.ctx.Done():
		}
	}()
}

// cover groups shards by the node to stream them from (router.Cover over
// Targets). Nodes that failed lately are used only for shards no other
// node hosts. rest: the shards no node is known to host.
func (u *Upstreams) cover(shards []int) (groups []router.Group, rest []int) {
	lists := make(map[int][]string, len(shards))
	for _, sh := range shards {
		all := u.c.Targets(sh)
		var good []string
		for _, a := range all {
			if at, ok := u.failed[a]; !ok || time.Since(at) > upstreamFailedFor {
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
