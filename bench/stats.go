package bench

import (
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histograms record microseconds between 1µs and histMax with 3
// significant figures.
const (
	histMin     = 1
	histMax     = int64(10 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

// latencyKind identifies one of the measured latencies.
type latencyKind int

const (
	kindEnqueueReq latencyKind = iota
	kindFetchReq
	kindAckReq
	kindToStart
	kindToAck
	kindSendLag // fixed-rate: actual send time minus the scheduled one
	numKinds
)

// counters are shared by all goroutines of a run and updated atomically.
type counters struct {
	enqueued  atomic.Int64 // jobs accepted by the server
	completed atomic.Int64 // jobs of this run acked successfully
	fetched   atomic.Int64 // jobs of this run fetched
	errors    atomic.Int64 // failed requests (non-2xx other than 429, transport)
	throttled atomic.Int64 // 429 answers
	stale     atomic.Int64 // fetched jobs that were not enqueued by this run
	dupes     atomic.Int64 // deliveries of a job of this run already delivered
	consec    atomic.Int64 // consecutive failed requests across all goroutines
}

// stats is owned by a single goroutine and merged once it has finished, so
// recording needs no synchronisation.
type stats struct {
	hist    [numKinds]*hdrhistogram.Histogram
	lastErr error
	lastAck time.Time // when the last ack of this run's jobs succeeded
}

// record adds one latency observation of kind k.
func (s *stats) record(k latencyKind, d time.Duration) {
	h := s.hist[k]
	if h == nil {
		h = hdrhistogram.New(histMin, histMax, histSigFigs)
		s.hist[k] = h
	}
	us := min(max(d.Microseconds(), histMin), histMax)
	_ = h.RecordValue(us) // cannot fail: us is within the trackable range
}

// merge folds o into s.
func (s *stats) merge(o *stats) {
	for k, h := range o.hist {
		if h == nil {
			continue
		}
		if s.hist[k] == nil {
			s.hist[k] = hdrhistogram.New(histMin, histMax, histSigFigs)
		}
		s.hist[k].Merge(h)
	}
	if o.lastErr != nil {
		s.lastErr = o.lastErr
	}
	if o.lastAck.After(s.lastAck) {
		s.lastAck = o.lastAck
	}
}

// summary converts the histogram of kind k into milliseconds, or nil when
// nothing was recorded.
func (s *stats) summary(k latencyKind) *LatencySummary {
	h := s.hist[k]
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return &LatencySummary{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		Max:   ms(h.Max()),
	}
}
