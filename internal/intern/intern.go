// Package intern keeps one copy of each name a process sees over and over
// (queues, workers, hosts), so decoding a name it has already seen makes
// no string. Both tables are bounded: past Max names, or for a name
// longer than MaxLen, a name is a plain copy.
package intern

import "sync"

const (
	// Max is how many names a table keeps.
	Max = 4096
	// MaxLen is the longest name a Shared table keeps (its names come
	// from requests, not yet validated).
	MaxLen = 128
)

// Table is a table for one goroutine (the state machine's apply loop).
type Table struct{ m map[string]string }

// Get is b as a string: the table's copy when it has one.
func (t *Table) Get(b []byte) string {
	if s, ok := t.m[string(b)]; ok { // no allocation: the compiler's map lookup by []byte
		return s
	}
	s := string(b)
	if t.m == nil {
		t.m = make(map[string]string)
	}
	if len(t.m) < Max {
		t.m[s] = s
	}
	return s
}

// Len is how many names t keeps.
func (t *Table) Len() int { return len(t.m) }

// Shared is a Table for concurrent use (request handlers).
type Shared struct {
	mu sync.RWMutex
	t  Table
}

// Get is b as a string: the table's copy when it has one. Names longer
// than MaxLen are not kept.
func (s *Shared) Get(b []byte) string {
	if len(b) > MaxLen {
		return string(b)
	}
	s.mu.RLock()
	v, ok := s.t.m[string(b)]
	s.mu.RUnlock()
	if ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Get(b)
}

// Len is how many names s keeps.
func (s *Shared) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.Len()
}
