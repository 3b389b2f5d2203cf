package bench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

const (
	// monitorTick is how often the monitor checks for stalls.
	monitorTick = 100 * time.Millisecond
	// progressEvery is the interval between progress lines.
	progressEvery = time.Second
)

// syncWriter serialises progress output from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}

// startMonitor starts the goroutine that prints progress and stops stalled
// workers. The returned function stops it and waits for it to exit.
func (r *runner) startMonitor(start time.Time) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		r.monitor(done, start)
	}()
	return func() {
		close(done)
		<-exited
	}
}

func (r *runner) monitor(done <-chan struct{}, start time.Time) {
	t := time.NewTicker(monitorTick)
	defer t.Stop()
	prog := progress{at: start}
	var stall stallDetector
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			if stall.stalled(now, r.producersDone.Load(), r.ctr.completed.Load()) {
				r.workCancel()
			}
			if r.out != nil && now.Sub(prog.at) >= progressEvery {
				r.out.printf("%s\n", prog.line(now, start, &r.ctr))
			}
		}
	}
}

// stallDetector notices when completions stop advancing once producers are
// done.
type stallDetector struct {
	last  int64
	since time.Time
}

// stalled reports whether completed has not changed for stallTimeout while
// active.
func (s *stallDetector) stalled(now time.Time, active bool, completed int64) bool {
	if !active {
		return false
	}
	if s.since.IsZero() || completed != s.last {
		s.last, s.since = completed, now
		return false
	}
	return now.Sub(s.since) >= stallTimeout
}

// progress formats periodic progress lines with rates over the last
// interval.
type progress struct {
	at                  time.Time
	enqueued, completed int64
}

func (p *progress) line(now, start time.Time, c *counters) string {
	enq, comp := c.enqueued.Load(), c.completed.Load()
	secs := now.Sub(p.at).Seconds()
	s := fmt.Sprintf("[%6.1fs] enqueued %s (%s/s)  completed %s (%s/s)  errors %s  throttled %s",
		now.Sub(start).Seconds(),
		commaInt(enq), commaInt(int64(float64(enq-p.enqueued)/secs)),
		commaInt(comp), commaInt(int64(float64(comp-p.completed)/secs)),
		commaInt(c.errors.Load()), commaInt(c.throttled.Load()))
	p.at, p.enqueued, p.completed = now, enq, comp
	return s
}
