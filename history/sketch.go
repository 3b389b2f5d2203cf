package history

import (
	"math"
	"math/bits"
)

// sketch is a log-linear histogram of durations in microseconds, the
// HdrHistogram layout cut to what a dashboard needs: values below 64 µs
// exactly, above that 32 buckets per power of two, so a bucket is at most
// 1/32 (3.1%) of its values wide and a quantile read as its bucket's
// midpoint is within 1.6% of a value the sketch was given. It holds only
// the run of buckets between its smallest and largest value (a queue's
// waits usually span a few powers of two: a few hundred bytes), and
// remembers the exact minimum and maximum, so a quantile is never outside
// what was seen (a workload of equal durations reads back exactly).
//
// A library (DDSketch, HdrHistogram-go) would do the same in more code:
// the whole of what is needed is index, add, merge and quantile.
type sketch struct {
	base     int      // the bucket index of counts[0]
	counts   []uint32 // buckets base … base+len-1
	n        uint64
	min, max int64
}

const subBits = 5 // 32 buckets per power of two

// bucketOf is the bucket index of v (µs, v ≥ 0).
func bucketOf(v int64) int {
	if v < 2<<subBits {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1 // v>>shift in [32, 63]
	return (shift+1)<<subBits + int(v>>shift) - 1<<subBits
}

// bucketRange is the first value of bucket i and its width.
func bucketRange(i int) (lo, width int64) {
	if i < 2<<subBits {
		return int64(i), 1
	}
	shift := i>>subBits - 1
	m := int64(i&(1<<subBits-1)) + 1<<subBits
	return m << shift, 1 << shift
}

func (s *sketch) add(v int64) {
	if v < 0 {
		v = 0
	}
	if s.n == 0 || v < s.min {
		s.min = v
	}
	if s.n == 0 || v > s.max {
		s.max = v
	}
	s.n++
	s.bump(bucketOf(v), 1)
}

// bump adds c to bucket i, growing the held run of buckets to reach it.
func (s *sketch) bump(i int, c uint32) {
	switch {
	case len(s.counts) == 0:
		s.base = i
		s.counts = append(s.counts[:0], c)
		return
	case i < s.base:
		grown := make([]uint32, s.base-i+len(s.counts))
		copy(grown[s.base-i:], s.counts)
		s.counts, s.base = grown, i
	case i >= s.base+len(s.counts):
		s.counts = append(s.counts, make([]uint32, i-s.base-len(s.counts)+1)...)
	}
	s.counts[i-s.base] += c
}

func (s *sketch) merge(o *sketch) {
	if o.n == 0 {
		return
	}
	if s.n == 0 || o.min < s.min {
		s.min = o.min
	}
	if s.n == 0 || o.max > s.max {
		s.max = o.max
	}
	s.n += o.n
	for j, c := range o.counts {
		if c != 0 {
			s.bump(o.base+j, c)
		}
	}
}

func (s *sketch) reset() {
	s.counts, s.n, s.min, s.max = s.counts[:0], 0, 0, 0
}

// quantile is the value at quantile q (0 < q ≤ 1): the midpoint of the
// bucket holding the ⌈q·n⌉-th smallest value, kept within [min, max]
// (the smallest and the largest value are exact).
func (s *sketch) quantile(q float64) int64 {
	if s.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.n)))
	rank = max(1, min(rank, s.n))
	switch rank {
	case 1:
		return s.min
	case s.n:
		return s.max
	}
	var seen uint64
	for j, c := range s.counts {
		seen += uint64(c)
		if seen >= rank {
			lo, w := bucketRange(s.base + j)
			return min(max(lo+w/2, s.min), s.max)
		}
	}
	return s.max
}
