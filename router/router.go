// Package router is Corvo's pure routing layer: which shard owns a queue,
// how job IDs carry their shard, and which names are valid. It does no I/O.
package router

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/oklog/ulid/v2"
)

// MaxQueueNameLen is the longest queue name accepted (DECISIONS.md: 1–128).
const MaxQueueNameLen = 128

// JobIDPrefix starts every job ID: job_<shard>_<ULID>.
const JobIDPrefix = "job_"

// ErrInvalidJobID is returned by ParseJobID for IDs that Corvo never issued.
var ErrInvalidJobID = errors.New("invalid job id")

// Router maps queues to shards. The shard count is fixed for the life of a
// cluster, so the mapping never changes.
type Router struct {
	shards int
}

// New returns a router over n shards (n ≥ 1).
func New(n int) *Router {
	if n < 1 {
		panic("router: shard count must be at least 1")
	}
	return &Router{shards: n}
}

// Shards is the number of shards.
func (r *Router) Shards() int { return r.shards }

// ShardForQueue returns the shard (0-based) that owns queue.
func (r *Router) ShardForQueue(queue string) int {
	return int(xxhash.Sum64String(queue) % uint64(r.shards))
}

// ShardForJob returns the shard encoded in a job ID, checked against the
// shard count.
func (r *Router) ShardForJob(id string) (int, error) {
	s, err := ParseJobID(id)
	if err != nil {
		return 0, err
	}
	if s >= r.shards {
		return 0, fmt.Errorf("%w: shard %d out of range", ErrInvalidJobID, s)
	}
	return s, nil
}

// JobID formats the ID of a job owned by shard.
func JobID(shard int, id ulid.ULID) string {
	var b strings.Builder
	b.Grow(len(JobIDPrefix) + 4 + ulid.EncodedSize)
	b.WriteString(JobIDPrefix)
	b.WriteString(strconv.Itoa(shard))
	b.WriteByte('_')
	b.WriteString(id.String())
	return b.String()
}

// ParseJobID returns the shard a job ID carries. It checks the whole shape:
// prefix, a decimal shard and a valid ULID.
func ParseJobID(id string) (int, error) {
	rest, ok := strings.CutPrefix(id, JobIDPrefix)
	if !ok {
		return 0, ErrInvalidJobID
	}
	num, u, ok := strings.Cut(rest, "_")
	if !ok || num == "" || len(num) > 5 || len(u) != ulid.EncodedSize {
		return 0, ErrInvalidJobID
	}
	shard := 0
	for i := 0; i < len(num); i++ {
		c := num[i]
		if c < '0' || c > '9' || (i == 0 && c == '0' && len(num) > 1) {
			return 0, ErrInvalidJobID
		}
		shard = shard*10 + int(c-'0')
	}
	// ParseStrict also takes lower case; Corvo issues the canonical
	// (upper-case) form only, and job keys are byte-exact.
	if parsed, err := ulid.ParseStrict(u); err != nil || parsed.String() != u {
		return 0, ErrInvalidJobID
	}
	return shard, nil
}

// ValidateQueueName enforces the queue-name rules: 1–128 characters of
// letters, digits, '.', '_', '-' and ':'.
func ValidateQueueName(q string) error {
	if q == "" {
		return errors.New("queue name is empty")
	}
	if len(q) > MaxQueueNameLen {
		return fmt.Errorf("queue name is longer than %d characters", MaxQueueNameLen)
	}
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-', c == ':':
		default:
			return fmt.Errorf("queue name %q has an invalid character %q (allowed: letters, digits, . _ - :)", q, c)
		}
	}
	return nil
}

// TaggedShard returns the shard an ID of the form <prefix><shard>_<rest>
// carries (batch_3_…, sched_0_…), checked against the shard count.
func (r *Router) TaggedShard(prefix, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return 0, false
	}
	num, tail, ok := strings.Cut(rest, "_")
	if !ok || tail == "" || num == "" || len(num) > 5 || (num[0] == '0' && len(num) > 1) {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= r.shards {
		return 0, false
	}
	return n, true
}
