// Package events keeps a bounded, in-memory ring of this node's job
// lifecycle events (fed by the state machines' AppliedInfo.Events after
// each commit) for GET /api/v1/events. Subscribers pull from the ring at
// their own pace, so a slow one never holds up a Raft apply: when it falls
// behind what the ring retains it is told to reset.
//
// Every event has a position in its shard's history, (Raft index, order in
// the entry), the same on every replica and replay. A cursor is one
// position per shard: "everything up to here has been seen". A subscriber
// resuming from a cursor gets exactly the events after it, as long as the
// ring still holds them.
package events

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/corvohq/corvo/statemachine"
)

// CapacityDefault is how many events the ring keeps at most by default;
// BytesDefault how many bytes of them (encoded: 40–80 bytes for most
// events, more for a failure's error or a progress report).
const (
	CapacityDefault = 65536
	BytesDefault    = 4 << 20
)

// Config configures a Hub.
type Config struct {
	Shards   int   // the node's shard count
	Capacity int   // how many events the ring keeps at most; default CapacityDefault
	Bytes    int64 // how many bytes of encoded events it keeps at most; default BytesDefault
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Capacity == 0 {
		c.Capacity = CapacityDefault
	}
	if c.Bytes == 0 {
		c.Bytes = BytesDefault
	}
	return c
}

// Validate checks a defaulted config.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1:
		return fmt.Errorf("events: shards must be positive, got %d", c.Shards)
	case c.Capacity < 1:
		return fmt.Errorf("events: capacity must be positive, got %d", c.Capacity)
	case c.Bytes < 1:
		return fmt.Errorf("events: bytes must be positive, got %d", c.Bytes)
	}
	return nil
}

// Pos is a place in one shard's event history: after the event at
// (Index, N). N = math.MaxUint32 means after every event of entry Index.
type Pos struct {
	Index uint64
	N     uint32
}

// Less orders positions.
func (p Pos) Less(q Pos) bool { return p.Index < q.Index || (p.Index == q.Index && p.N < q.N) }

// Cursor is one position per shard.
type Cursor []Pos

// ErrBadCursor is returned for a cursor that is not one of this node's.
var ErrBadCursor = errors.New("events: malformed cursor")

const cursorVersion = 1

// Encode renders the cursor as an opaque URL-safe string.
func (c Cursor) Encode() string {
	b := make([]byte, 0, 2+len(c)*8)
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(c)))
	for _, p := range c {
		b = binary.AppendUvarint(b, p.Index)
		b = binary.AppendUvarint(b, uint64(p.N))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor parses a cursor made by Encode for a node with the given
// shard count.
func DecodeCursor(s string, shards int) (Cursor, error) {
	if len(s) == 0 || len(s) > 64+shards*30 {
		return nil, ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != cursorVersion {
		return nil, ErrBadCursor
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	n, ok := next()
	if !ok || n != uint64(shards) {
		return nil, ErrBadCursor
	}
	c := make(Cursor, shards)
	for i := range c {
		idx, ok1 := next()
		pos, ok2 := next()
		if !ok1 || !ok2 || pos > math.MaxUint32 {
			return nil, ErrBadCursor
		}
		c[i] = Pos{Index: idx, N: uint32(pos)}
	}
	if len(b) != 0 {
		return nil, ErrBadCursor
	}
	return c, nil
}

// Event is one lifecycle event with the shard it happened on.
type Event struct {
	Shard int
	statemachine.JobEvent
}

func (e *Event) pos() Pos { return Pos{Index: e.Index, N: e.Pos} }

// Hub is the ring. Applied feeds it; Subscribe reads it.
type Hub struct {
	mu     sync.RWMutex
	ring   store // events first..next-1, encoded
	max    uint64
	bytes  int64
	floor  Cursor   // per shard: every event after this is retained (or still to come)
	head   Cursor   // per shard: the last event appended (at least floor)
	last   []uint64 // per shard: the last Raft index applied (0: unknown)
	gen    uint64   // bumped when a shard skipped entries (snapshot install)
	skip   []uint64 // per shard: the gen its last skip made (0: none)
	ready  bool     // Start has run: floor is known
	notify chan struct{}
}

// New makes a hub for a node of cfg.Shards shards.
func New(cfg Config) (*Hub, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.Shards
	return &Hub{max: uint64(cfg.Capacity), bytes: cfg.Bytes, floor: make(Cursor, n), head: make(Cursor, n), last: make([]uint64, n),
		skip: make([]uint64, n), notify: make(chan struct{})}, nil
}

// Held is the memory the ring's events take.
func (h *Hub) Held() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.ring.held
}

// Shards is the node's shard count.
func (h *Hub) Shards() int { return len(h.floor) }

// Source reads the shards' state machines (shard.Host).
type Source interface {
	Shards() int
	Read(shard int, query interface{}) (interface{}, error)
}

// StartFrom is Start with the opened-at index of each shard read from src.
func (h *Hub) StartFrom(src Source) error {
	opened := make([]uint64, src.Shards())
	hs, _ := src.(interface{ Hosts(int) bool })
	for i := range opened {
		if hs != nil && !hs.Hosts(i) {
			continue // not hosted here (yet): its events start with its first entry
		}
		v, err := src.Read(i, statemachine.OpenedAtQuery{})
		if err != nil {
			return fmt.Errorf("events: shard %d: %w", i, err)
		}
		opened[i] = v.(uint64)
	}
	h.Start(opened)
	return nil
}

// Start tells the hub where each shard's history began for this process
// (the applied index each state machine opened at): nothing before it can
// be replayed, so a cursor older than that gets a reset.
func (h *Hub) Start(openedAt []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s, idx := range openedAt {
		if s >= len(h.floor) {
			break
		}
		if p := (Pos{Index: idx, N: math.MaxUint32}); h.floor[s].Less(p) {
			h.floor[s] = p
		}
		if h.head[s].Less(h.floor[s]) {
			h.head[s] = h.floor[s]
		}
		if h.last[s] < idx {
			h.last[s] = idx
		}
	}
	h.ready = true
}

// Applied takes a committed Update's events (shard.Config.OnApplied). It
// never blocks beyond a short lock.
func (h *Hub) Applied(info *statemachine.AppliedInfo) {
	sh := int(info.ShardID) - 1
	if sh < 0 || sh >= len(h.floor) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if info.Reset || (h.last[sh] != 0 && info.From > h.last[sh]+1) {
		// The replica skipped entries (it installed a snapshot: Reset
		// says so at once; a jump in indexes says so later): their events
		// never came. Nothing before them can be replayed, and every
		// subscriber is told to reset.
		skipped := info.From - 1
		if info.Reset {
			skipped = info.Index
		}
		if p := (Pos{Index: skipped, N: math.MaxUint32}); h.floor[sh].Less(p) {
			h.floor[sh] = p
		}
		if h.head[sh].Less(h.floor[sh]) {
			h.head[sh] = h.floor[sh]
		}
		h.gen++
		h.skip[sh] = h.gen
	}
	if info.Index > h.last[sh] {
		h.last[sh] = info.Index
	}
	// Events at or before the shard's head were appended already: a
	// replica replaying entries this node applied before (the shard moved
	// away and back while the log still held them). Positions are
	// deterministic, so they are the same events: skip them, so the ring
	// holds each once and the head never moves back.
	evs := info.Events
	for len(evs) > 0 && !h.head[sh].Less(Pos{Index: evs[0].Index, N: evs[0].Pos}) {
		evs = evs[1:]
	}
	if len(evs) == 0 {
		return
	}
	r := &h.ring
	for i := range evs {
		r.push(sh, &evs[i])
		// The oldest events fall out past either bound (never the newest).
		for r.next-r.first > h.max || (r.bytes > h.bytes && r.next-r.first > 1) {
			osh, p := r.pop()
			h.floor[osh] = p
		}
	}
	h.head[sh] = Pos{Index: evs[len(evs)-1].Index, N: evs[len(evs)-1].Pos}
	close(h.notify)
	h.notify = make(chan struct{})
}

// Filter selects events; nil fields match everything.
type Filter struct {
	// Namespace, when set, keeps the events of that namespace's queues
	// only (router.QueueInNamespace); Queues are then stored names of it.
	Namespace string
	Queues    map[string]bool
	Types     map[statemachine.EventType]bool
	// Shards restricts the subscription to some shards (indexed by shard;
	// nil: every shard). Only their positions are checked against what the
	// ring retains, only their events are read, only their skips reset the
	// subscription, and only their positions move: the others stay as the
	// resume cursor gave them.
	Shards []bool
}

func (f *Filter) shard(sh int) bool { return f.Shards == nil || (sh < len(f.Shards) && f.Shards[sh]) }

// Sub is one subscriber's place in the ring.
type Sub struct {
	h   *Hub
	f   Filter
	seq uint64 // the next ring sequence number to read
	cur Cursor // the position reached in every shard
	gen uint64 // the hub's gen when the subscription (re)started
	u   unpacked
}

// Subscribe starts a subscription: live from now when from is nil, or
// after the cursor from. reset is true when from is older than what the
// ring retains (or from another run of this node that the ring never
// saw): the subscription then starts live, and the client should refetch.
func (h *Hub) Subscribe(from Cursor, f Filter) (sub *Sub, reset bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	s := &Sub{h: h, f: f, gen: h.gen}
	if from != nil && len(from) == len(h.floor) {
		s.cur = append(Cursor(nil), from...)
		if h.ready {
			ok := true
			for i := range from {
				if f.shard(i) && from[i].Less(h.floor[i]) {
					ok = false
					break
				}
			}
			if ok {
				s.seq = h.ring.first
				return s, false
			}
		}
	}
	s.seq = h.ring.next
	s.live()
	return s, from != nil
}

// live moves the subscription's shards to the ring's head (h.mu held).
func (s *Sub) live() {
	h := s.h
	if s.cur == nil || s.f.Shards == nil {
		s.cur = append(s.cur[:0], h.head...)
		return
	}
	for i := range s.cur {
		if s.f.shard(i) {
			s.cur[i] = h.head[i]
		}
	}
}

// skipped reports whether one of the subscription's shards skipped
// entries since it (re)started (h.mu held).
func (s *Sub) skipped() bool {
	h := s.h
	if s.gen == h.gen {
		return false
	}
	if s.f.Shards != nil {
		hit := false
		for i, g := range h.skip {
			if g > s.gen && s.f.shard(i) {
				hit = true
				break
			}
		}
		if !hit {
			s.gen = h.gen // another shard's skip: nothing missed here
			return false
		}
	}
	return true
}

// Cursor is the subscription's current cursor.
func (s *Sub) Cursor() Cursor { return append(Cursor(nil), s.cur...) }

// Item is an event to send, with the cursor that resumes after it.
type Item struct {
	Event  Event
	Cursor string
}

// Next returns up to max matching events after the subscription's place.
// When it has none it returns a channel closed when more arrive. reset is
// true when the subscriber fell behind what the ring retains: it then
// continues live from now.
func (s *Sub) Next(max int) (items []Item, wait <-chan struct{}, reset bool) {
	h := s.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	r := &h.ring
	if s.seq < r.first || s.skipped() {
		s.seq, s.gen = r.next, h.gen
		s.live()
		return nil, nil, true
	}
	for scanned := 0; s.seq < r.next && len(items) < max && scanned < 16*max; scanned++ {
		rec := r.get(s.seq, &s.u)
		s.seq++
		sh, p, rd := decodeHead(rec)
		if s.f.Shards != nil && !s.f.shard(sh) {
			continue
		}
		if !s.cur[sh].Less(p) {
			continue // at or before the cursor it resumed from
		}
		s.cur[sh] = p
		if s.f.matchRec(rd) {
			items = append(items, Item{Event: decodeEvent(rec), Cursor: s.cur.Encode()})
		}
	}
	if len(items) == 0 && s.seq == r.next {
		return nil, h.notify, false
	}
	return items, nil, false
}
