package events

import (
	"encoding/binary"
	"sort"

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
// Events have consecutive sequence numbers; the store holds [first, next).
type store struct {
	chunks []*chunk
	first  uint64 // sequence number of the oldest retained event
	next   uint64 // sequence number the next event gets
	bytes  int64  // encoded bytes of the retained events
	held   int64  // capacity of the chunks' buffers
	buf    []byte // scratch for encoding
}

// chunk is a run of consecutive events.
type chunk struct {
	first uint64   // sequence number of offs[0]
	offs  []uint32 // where each event starts in data
	data  []byte
}

func (c *chunk) end() uint64 { return c.first + uint64(len(c.offs)) }

// rec is event seq's record (first <= seq < next).
func (c *chunk) rec(seq uint64) []byte {
	i := seq - c.first
	end := len(c.data)
	if i+1 < uint64(len(c.offs)) {
		end = int(c.offs[i+1])
	}
	return c.data[c.offs[i]:end]
}

// push appends an event.
func (s *store) push(shard int, e *statemachine.JobEvent) {
	s.buf = encodeEvent(s.buf[:0], shard, e)
	var c *chunk
	if n := len(s.chunks); n > 0 {
		c = s.chunks[n-1]
	}
	if c == nil || len(c.data)+len(s.buf) > cap(c.data) {
		c = &chunk{first: s.next, data: make([]byte, 0, max(chunkBytes, len(s.buf)))}
		s.chunks = append(s.chunks, c)
		s.held += int64(cap(c.data))
	}
	c.offs = append(c.offs, uint32(len(c.data)))
	c.data = append(c.data, s.buf...)
	s.bytes += int64(len(s.buf))
	s.next++
}

// pop drops the oldest event and returns its shard and position.
func (s *store) pop() (int, Pos) {
	c := s.chunks[0]
	r := c.rec(s.first)
	s.bytes -= int64(len(r))
	sh, p, _ := decodeHead(r)
	s.first++
	if s.first == c.end() {
		s.held -= int64(cap(c.data))
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
	}
	return sh, p
}

// get is event seq's record (first <= seq < next).
func (s *store) get(seq uint64) []byte {
	cs := s.chunks
	if c := cs[len(cs)-1]; seq >= c.first { // the live end: most reads
		return c.rec(seq)
	}
	i := sort.Search(len(cs), func(i int) bool { return cs[i].end() > seq })
	return cs[i].rec(seq)
}

// An event's record: its shard, position and type first, then its queues
// (what filters read without decoding the rest), then the other fields.
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
