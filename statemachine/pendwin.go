package statemachine

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// A queue's pending window: its first pending keys and their jobs, held in
// memory so a fetch claims from them without a Pebble iterator. A seek
// into the shard's memtable (a skiplist of tens of MB) cost ~15 µs, about
// a twentieth of the server's CPU in an end-to-end run: one per queue a
// fetch took from, and one per fetched job when jobs are fetched one at a
// time. With a window a queue seeks once per winKeys jobs.
//
// The window is exact: keys[i] is the queue's i-th pending key (all: and
// there are no more), kept so by addPending and delPending, the only
// writers of pending keys, and dropped with the other caches when the
// state is reloaded. A fetch reads it as a seek would have read Pebble
// (pendSource): the same keys, in the same order, so the state machine
// claims the same jobs with or without it.
//
// A fetch copies a window's slice headers (its snapshot, as an iterator
// sees the batch as of its creation); the window then changes only by
// popping its front, appending past every snapshot's end, or a copy:
// never by writing into an element a snapshot can see.
type pendWin struct {
	keys [][]byte
	ids  []string
	all  bool
}

const (
	// winKeys is how many keys a window is filled with; it holds up to
	// twice that (enqueues append while it holds the whole queue), and is
	// cut back to winKeys past that.
	winKeys = 32
	// winQueues bounds the windows a shard holds (~9 KB each at most, ~4
	// KB filled): past it they are all dropped, to be filled again as
	// queues are fetched from.
	winQueues = 256
)

// usable reports whether the window says where the queue's pending keys
// start: it has keys, or knows there are none.
func (w *pendWin) usable() bool { return w != nil && (len(w.keys) > 0 || w.all) }

// winAdd records pending key k (job id) of queue q. wasEmpty: the queue
// had no pending job before.
func (s *StateMachine) winAdd(q string, k []byte, id string, wasEmpty bool) {
	w := s.wins[q]
	if w == nil {
		if wasEmpty {
			s.putWin(q, &pendWin{keys: [][]byte{k}, ids: []string{id}, all: true})
		}
		return
	}
	n := len(w.keys)
	switch {
	case n == 0 && !w.all:
		delete(s.wins, q) // where k goes among the unknown keys is unknown
		return
	case n == 0 || bytes.Compare(k, w.keys[n-1]) > 0:
		if !w.all {
			return // past the window: a refill finds it
		}
		// Appending writes past the end of every snapshot (cuts limit
		// the capacity), so none sees it.
		w.keys, w.ids = append(w.keys, k), append(w.ids, id)
	default:
		i, _ := slices.BinarySearchFunc(w.keys, k, bytes.Compare)
		w.keys = slices.Insert(slices.Clip(w.keys), i, k) // a copy
		w.ids = slices.Insert(slices.Clip(w.ids), i, id)
	}
	if k := s.winSize(); len(w.keys) > 2*k {
		w.keys, w.ids, w.all = w.keys[:k:k], w.ids[:k:k], false
	}
}

// winDel records that pending key k of queue q is gone.
func (s *StateMachine) winDel(q string, k []byte) {
	w := s.wins[q]
	if w == nil || len(w.keys) == 0 {
		return
	}
	if bytes.Equal(w.keys[0], k) {
		w.keys, w.ids = w.keys[1:], w.ids[1:]
		return
	}
	i, found := slices.BinarySearchFunc(w.keys, k, bytes.Compare)
	if found {
		w.keys = slices.Delete(slices.Clone(w.keys), i, i+1)
		w.ids = slices.Delete(slices.Clone(w.ids), i, i+1)
	}
}

// winSize is how many keys a window is filled with (tests set smaller).
func (s *StateMachine) winSize() int { return cmp.Or(s.winKeys, winKeys) }

func (s *StateMachine) putWin(q string, w *pendWin) {
	if s.noWins {
		return
	}
	if _, ok := s.wins[q]; !ok && len(s.wins) >= winQueues {
		clear(s.wins)
	}
	s.wins[q] = w
}

// fillWin makes queue q's window from it, positioned on the queue's first
// pending key: the keys from there, up to winKeys, copied into one buffer
// (never written again: the keys are only read and popped).
func (s *StateMachine) fillWin(q string, it *pebble.Iterator) {
	k := s.winSize()
	w := &pendWin{keys: make([][]byte, 0, k), ids: make([]string, 0, k)}
	var buf []byte
	for ok := it.Valid(); ; ok = it.Next() {
		if !ok {
			w.all = true
			break
		}
		if len(w.keys) == k {
			break
		}
		key := it.Key()
		if cap(buf)-len(buf) < len(key) {
			// A queue's pending keys have one length: one buffer holds
			// them all (a key keeps its buffer if another is needed).
			buf = make([]byte, 0, k*len(key))
		}
		buf = append(buf, key...)
		w.keys = append(w.keys, buf[len(buf)-len(key):len(buf):len(buf)])
		w.ids = append(w.ids, string(it.Value()))
	}
	s.putWin(q, w)
}

// pendSource is where a fetch reads one queue's pending keys: a window's
// snapshot, then (when the window does not hold them all) a Pebble
// iterator from past its last key; or an iterator alone.
type pendSource struct {
	keys [][]byte
	ids  []string
	all  bool
	pos  int
	it   *pebble.Iterator
	open bool
	// since is how many keys the fetch had added (a.fetchAdds) when the
	// source's view was taken: the iterator skips those added after.
	since int
}

func (p *pendSource) key() []byte {
	if p.it != nil {
		return p.it.Key()
	}
	return p.keys[p.pos]
}

func (p *pendSource) id() string {
	if p.it != nil {
		return string(p.it.Value())
	}
	return p.ids[p.pos]
}

func (p *pendSource) close() {
	if p.it != nil {
		p.it.Close()
		p.it = nil
	}
	p.keys, p.ids, p.open = nil, nil, false
}
