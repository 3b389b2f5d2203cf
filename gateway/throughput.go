package gateway

import (
	"math"
	"sync"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// throughput samples every queue's running totals so GET /queues can say
// how fast each queue moves (jobs per second over about the last minute).
// The background sampler reads the shards this node hosts; the queues of
// other shards are timed from the totals GET /queues itself read from
// the nodes hosting them (seen), so a node hosting some shards never takes
// a queue's whole history for its last minute.
type throughput struct {
	mu      sync.Mutex
	samples []totalsSample // oldest first, ≤ sampleKeep
	seen    map[string][]point
}

type totalsSample struct {
	at      time.Time
	totals  map[string][3]int64 // enqueued, completed, failed
	sampled []bool              // the shards read (hosted here then)
}

// point is one queue's totals at a time.
type point struct {
	at     time.Time
	totals [3]int64
}

const (
	sampleEvery = 5 * time.Second
	sampleKeep  = 13 // one minute of history
)

func (s *Server) sampleLoop() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		s.takeSample()
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
	}
}

func (s *Server) takeSample() {
	smp := totalsSample{at: time.Now(), totals: map[string][3]int64{}, sampled: make([]bool, s.eng.Shards())}
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if !s.hosted(sh) {
			continue // timed from what GET /queues reads (throughput.seen)
		}
		smp.sampled[sh] = true
		v, err := s.eng.Read(sh, statemachine.ListQueuesQuery{})
		infos, ok := v.([]statemachine.QueueInfo)
		if err != nil || !ok {
			return
		}
		for _, q := range infos {
			smp.totals[q.Name] = [3]int64{q.Stats.Enqueued, q.Stats.Completed, q.Stats.Failed}
		}
	}
	s.rates.mu.Lock()
	s.rates.samples = append(s.rates.samples, smp)
	if len(s.rates.samples) > sampleKeep {
		s.rates.samples = s.rates.samples[1:]
	}
	s.rates.mu.Unlock()
}

// rate returns the enqueued, completed and failed jobs per second of a
// queue of shard sh whose totals are now, over the sampled window; ok is
// false until there is a window of at least a second. A queue the oldest
// sample does not list was born since and counts from zero, unless its
// shard was not sampled: then its own recent totals time it.
func (tp *throughput) rate(queue string, sh int, now [3]int64) (r [3]float64, ok bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	t := time.Now()
	var then point
	if len(tp.samples) > 0 && sh < len(tp.samples[0].sampled) && tp.samples[0].sampled[sh] {
		then = point{at: tp.samples[0].at, totals: tp.samples[0].totals[queue]}
	} else {
		then = tp.observe(queue, point{at: t, totals: now})
	}
	secs := t.Sub(then.at).Seconds()
	if secs < 1 {
		return r, false
	}
	for i := range r {
		r[i] = math.Round(float64(now[i]-then.totals[i])/secs*10) / 10
	}
	return r, true
}

// observe records a queue's totals read from another node (at most one
// point per sampleEvery, for a minute) and returns the oldest one kept
// (tp.mu held).
func (tp *throughput) observe(queue string, p point) point {
	if tp.seen == nil {
		tp.seen = map[string][]point{}
	}
	h := tp.seen[queue]
	for len(h) > 0 && p.at.Sub(h[0].at) > sampleEvery*sampleKeep {
		h = h[1:]
	}
	if len(h) == 0 || p.at.Sub(h[len(h)-1].at) >= sampleEvery {
		h = append(h, p)
	}
	tp.seen[queue] = h
	if len(tp.seen) > 4*maxSeenQueues {
		// Forget queues not read for a minute (deleted, or hosted here now).
		for q, qh := range tp.seen {
			if p.at.Sub(qh[len(qh)-1].at) > sampleEvery*sampleKeep {
				delete(tp.seen, q)
			}
		}
	}
	return h[0]
}

// maxSeenQueues is a soft bound on the queues timed from reads (the map is
// swept when it holds four times as many).
const maxSeenQueues = 10000
