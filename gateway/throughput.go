package gateway

import (
	"math"
	"sync"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// throughput samples every queue's running totals so GET /queues can say
// how fast each queue moves (jobs per second over about the last minute).
type throughput struct {
	mu      sync.Mutex
	samples []totalsSample // oldest first, ≤ sampleKeep
}

type totalsSample struct {
	at     time.Time
	totals map[string][3]int64 // enqueued, completed, failed
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
	smp := totalsSample{at: time.Now(), totals: map[string][3]int64{}}
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if !s.hosted(sh) {
			continue // sampled by the nodes that host it
		}
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

// rate returns a queue's enqueued, completed and failed jobs per second
// over the sampled window; ok is false until two samples exist.
func (tp *throughput) rate(queue string, now [3]int64) (r [3]float64, ok bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.samples) == 0 {
		return r, false
	}
	first := tp.samples[0]
	secs := time.Since(first.at).Seconds()
	if secs < 1 {
		return r, false
	}
	then := first.totals[queue]
	for i := range r {
		r[i] = math.Round(float64(now[i]-then[i])/secs*10) / 10
	}
	return r, true
}
