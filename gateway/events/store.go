package events

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/klauspost/compress/s2"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// chunkBytes is the size of one chunk of the ring's store: large enough
// that a chunk holds hundreds of events, small enough that what is kept
// beyond the byte cap stays small.
const chunkBytes = 64 << 10

// store keeps the ring's events encoded, in chunks of about chunkBytes
// that are allocated as events arrive and freed once every event in them
// has been dropped. An event takes 40–80 bytes this way against 184 as an
// Event (plus its strings), and what it holds is counted in bytes, so an
// event carrying a 1 KiB error or 4 KiB of progress counts as what it is.
//
// Only the newest chunk is written; once a chunk is full it is sealed:
// its records are packed with S2 (klauspost/compress: stateless, no
// encoder tables kept between chunks, ~30 µs to unpack a chunk) and its
// buffers freed. Enqueue events pack 3× (63 → 21 bytes: the queue, the
// ULIDs' shared prefixes and the field layout repeat), so a full ring of
// them holds about a third of the memory for the same number of events.
// The byte bound (Config.Bytes) still counts encoded bytes: how many
// events the ring retains does not change, only what it costs. A reader of
// sealed chunks unpacks one at a time into its own buffer (unpacked).
//
// Events have consecutive sequence numbers; the store holds [first, next).
type store struct {
	chunks []*chunk
	first  uint64    // sequence number of the oldest retained event
	next   uint64    // sequence number the next event gets
	bytes  int64     // encoded bytes of the retained events
	held   int64     // what the chunks take: buffers of the open one, packed bytes of sealed ones
	buf    []byte    // scratch for encoding
	packs  [2][]byte // scratch for sealing
	popped unpacked
}

// chunk is a run of consecutive events: open (offs and data) or sealed
// (packed).
type chunk struct {
	first  uint64   // sequence number of its first event
	n      int      // how many events
	offs   []uint32 // open: where each event starts in data
	data   []byte   // open: the records
	packed []byte   // sealed: S2 of the records, each preceded by its length
}

func (c *chunk) end() uint64 { return c.first + uint64(c.n) }

// held is the memory the chunk takes.
func (c *chunk) held() int64 {
	if c.packed != nil {
		return int64(cap(c.packed))
	}
	return int64(cap(c.data) + 4*cap(c.offs))
}

// rec is event seq's record in an open chunk (first <= seq < end).
func rec(offs []uint32, data []byte, i uint64) []byte {
	end := len(data)
	if i+1 < uint64(len(offs)) {
		end = int(offs[i+1])
	}
	return data[offs[i]:end]
}

// seal packs an open chunk's records and frees its buffers; scratch is
// reused from one seal to the next.
func (c *chunk) seal(scratch *[2][]byte) {
	raw := scratch[0][:0]
	for i := range c.offs {
		raw = binary.AppendUvarint(raw, uint64(len(rec(c.offs, c.data, uint64(i)))))
	}
	raw = append(raw, c.data...)
	enc := s2.Encode(scratch[1][:cap(scratch[1])], raw)
	c.packed = bytes.Clone(enc) // s2 sizes its output for the worst case
	c.offs, c.data = nil, nil
	scratch[0], scratch[1] = raw, enc
}

// unpacked is a sealed chunk unpacked for reading; its buffers are reused
// for the next one.
type unpacked struct {
	c    *chunk
	offs []uint32
	data []byte
	raw  []byte
}

// load unpacks c unless it holds it already.
func (u *unpacked) load(c *chunk) {
	if u.c == c {
		return
	}
	raw, err := s2.Decode(u.raw[:cap(u.raw)], c.packed)
	if err != nil {
		panic(fmt.Sprintf("events: a sealed chunk does not unpack: %v", err)) // only this package wrote it
	}
	u.raw = raw
	u.offs = u.offs[:0]
	off := uint32(0)
	for range c.n {
		l, k := binary.Uvarint(raw)
		raw = raw[k:]
		u.offs = append(u.offs, off)
		off += uint32(l)
	}
	u.data, u.c = raw, c
}

// release forgets the chunk and its buffers (a reader back at the open
// chunk keeps nothing).
func (u *unpacked) release() { *u = unpacked{} }

// push appends an event.
func (s *store) push(shard int, e *statemachine.JobEvent) {
	s.buf = encodeEvent(s.buf[:0], shard, e)
	var c *chunk
	if n := len(s.chunks); n > 0 {
		c = s.chunks[n-1]
	}
	if c == nil || len(c.data)+len(s.buf) > cap(c.data) {
		if c != nil {
			s.held -= c.held()
			c.seal(&s.packs)
			s.held += c.held()
		}
		c = &chunk{first: s.next, data: make([]byte, 0, max(chunkBytes, len(s.buf)))}
		s.chunks = append(s.chunks, c)
		s.held += c.held()
	}
	s.held -= int64(4 * cap(c.offs))
	c.offs = append(c.offs, uint32(len(c.data)))
	s.held += int64(4 * cap(c.offs))
	c.data = append(c.data, s.buf...)
	c.n++
	s.bytes += int64(len(s.buf))
	s.next++
}

// pop drops the oldest event and returns its shard and position.
func (s *store) pop() (int, Pos) {
	c := s.chunks[0]
	r := s.get(s.first, &s.popped)
	s.bytes -= int64(len(r))
	sh, p, _ := decodeHead(r)
	s.first++
	if s.first == c.end() {
		s.held -= c.held()
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		if s.popped.c == c {
			s.popped.c = nil // keeps its buffers for the next chunk
		}
	}
	return sh, p
}

// get is event seq's record (first <= seq < next), valid until u unpacks
// another chunk.
func (s *store) get(seq uint64, u *unpacked) []byte {
	cs := s.chunks
	c := cs[len(cs)-1]
	if seq < c.first { // a sealed chunk
		c = cs[sort.Search(len(cs), func(i int) bool { return cs[i].end() > seq })]
	}
	if c.packed == nil {
		if u.c != nil {
			u.release()
		}
		return rec(c.offs, c.data, seq-c.first)
	}
	u.load(c)
	return rec(u.offs, u.data, seq-c.first)
}

func encodeEvent(b []byte, shard int, e *statemachine.JobEvent) []byte {
	b = binary.AppendUvarint(b, uint64(shard))
	b = binary.AppendUvarint(b, e.Index)
	b = binary.AppendUvarint(b, uint64(e.Pos))
	b = append(b, byte(e.Type))
	b = appendStr(b, e.Queue)
	b = appendStr(b, e.FromQueue)
	b = appendStr(b, e.JobID)
	b = appendStr(b, e.MovedTo)
	b = append(b, byte(e.State))
	b = binary.AppendUvarint(b, uint64(e.Attempt))
	b = binary.AppendVarint(b, e.At)
	b = appendStr(b, e.WorkerID)
	b = appendStr(b, e.Error)
	b = appendStr(b, e.Reason)
	// Progress: nil and empty differ (0: nil, else length+1).
	if e.Progress == nil {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(e.Progress))+1)
		b = append(b, e.Progress...)
	}
	return binary.AppendVarint(b, e.DueAt)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes a record the store wrote (never malformed: no checks
// beyond what keeps it from running past the end). With whole set (the
// record as one string), str slices it instead of allocating.
type reader struct {
	b     []byte
	whole string
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	r.b = r.b[max(n, 0):]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	r.b = r.b[max(n, 0):]
	return v
}

func (r *reader) byte1() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) raw() []byte {
	n := min(r.uvarint(), uint64(len(r.b)))
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	v := r.raw()
	if r.whole == "" {
		return string(v)
	}
	end := len(r.whole) - len(r.b)
	return r.whole[end-len(v) : end]
}

// decodeHead reads a record's shard and position; the reader is left at
// its type.
func decodeHead(rec []byte) (int, Pos, reader) {
	r := reader{b: rec}
	sh := int(r.uvarint())
	idx := r.uvarint()
	return sh, Pos{Index: idx, N: uint32(r.uvarint())}, r
}

// match applies the filter to a record's type and queues, the reader
// being at its type, without decoding the rest.
func (f *Filter) matchRec(r reader) bool {
	t := statemachine.EventType(r.byte1())
	if f.Types != nil && !f.Types[t] {
		return false
	}
	q := r.raw()
	if f.Namespace != "" && !router.QueueInNamespace(string(q), f.Namespace) {
		return false
	}
	if f.Queues == nil || f.Queues[string(q)] {
		return true
	}
	from := r.raw()
	return len(from) > 0 && f.Queues[string(from)]
}

// decodeEvent reads a whole record: its strings share one allocation.
func decodeEvent(rec []byte) Event {
	sh, p, r := decodeHead(rec)
	r.whole = string(rec)
	e := Event{Shard: sh}
	e.Index, e.Pos = p.Index, p.N
	e.Type = statemachine.EventType(r.byte1())
	e.Queue = r.str()
	e.FromQueue = r.str()
	e.JobID = r.str()
	e.MovedTo = r.str()
	e.State = statemachine.State(r.byte1())
	e.Attempt = uint32(r.uvarint())
	e.At = r.varint()
	e.WorkerID = r.str()
	e.Error = r.str()
	e.Reason = r.str()
	if n := r.uvarint(); n > 0 {
		n = min(n-1, uint64(len(r.b)))
		e.Progress = append([]byte{}, r.b[:n]...)
		r.b = r.b[n:]
	}
	e.DueAt = r.varint()
	return e
}
