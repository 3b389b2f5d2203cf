package statemachine

import "sync"

// Handoff carries an entry's results from the state machine to the
// proposer waiting for them on the same node, in memory: the proposer
// registers the entry's ID before proposing it (Expect) and takes the
// results once dragonboat reports the entry applied (Take). Without it the
// results travel as bytes in dragonboat's result, encoded by the state
// machine and decoded by the proposer: every fetched job's full record,
// twice copied, on every entry.
//
// With a Handoff (Config.Handoff) the state machine encodes no results for
// dragonboat at all: only the proposer that made an entry reads them (on
// the node that made it; dragonboat answers no one else), and that
// proposer expects them here. A replica applying an entry proposed on
// another node, or after a restart, or whose proposer gave up, skips the
// work.
//
// The results handed over are the proposer's to read, never to modify:
// fetched jobs share their records with the job cache.
type Handoff struct {
	mu    sync.Mutex
	slots map[EntryID]handoffSlot
}

type handoffSlot struct {
	results []Result
	filled  bool
}

// NewHandoff returns an empty Handoff.
func NewHandoff() *Handoff { return &Handoff{slots: map[EntryID]handoffSlot{}} }

// Expect registers a wait for entry id's results. Take or Forget ends it.
func (h *Handoff) Expect(id EntryID) {
	h.mu.Lock()
	h.slots[id] = handoffSlot{}
	h.mu.Unlock()
}

// Take ends the wait for entry id and returns its results; false when the
// entry has not been applied on this node.
func (h *Handoff) Take(id EntryID) ([]Result, bool) {
	h.mu.Lock()
	s, ok := h.slots[id]
	delete(h.slots, id)
	h.mu.Unlock()
	return s.results, ok && s.filled
}

// Forget ends the wait for entry id without its results (the proposer gave
// up); it does nothing once Take has ended it.
func (h *Handoff) Forget(id EntryID) {
	h.mu.Lock()
	delete(h.slots, id)
	h.mu.Unlock()
}

// deliver hands rs to the wait for entry id. False when there is none, or
// it has its results already: the first attempt of a retried proposal was
// applied, and this is the retry, applied as a duplicate.
func (h *Handoff) deliver(id EntryID, rs []Result) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.slots[id]
	if !ok || s.filled {
		return false
	}
	h.slots[id] = handoffSlot{results: rs, filled: true}
	return true
}

// waiting reports whether a proposal waits for entry id's results.
func (h *Handoff) waiting(id EntryID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.slots[id]
	return ok && !s.filled
}
