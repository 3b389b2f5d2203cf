package bench

import (
	"context"
	"time"
)

// pacer hands out request tokens at a steady rate shared by all producers.
// A ticker periodically tops up a buffered channel with the tokens due since
// the start; when producers fall behind and the buffer is full, surplus
// tokens are dropped instead of being released later as a burst.
type pacer struct {
	tokens chan struct{}
}

// minPacerTick bounds the ticker frequency for high rates.
const minPacerTick = time.Millisecond

// startPacer starts a pacer issuing perSecond tokens per second until ctx is
// done. burst is the number of tokens that may be buffered. The returned
// channel is closed once the pacer goroutine has exited.
func startPacer(ctx context.Context, perSecond float64, burst int) (*pacer, <-chan struct{}) {
	p := &pacer{tokens: make(chan struct{}, max(burst, 1))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx, perSecond)
	}()
	return p, done
}

func (p *pacer) run(ctx context.Context, perSecond float64) {
	tick := max(time.Duration(float64(time.Second)/perSecond), minPacerTick)
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var issued int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int64(now.Sub(start).Seconds() * perSecond)
			issued = p.fill(issued, due)
		}
	}
}

// fill issues tokens until issued reaches due or the buffer is full, and
// returns due: tokens that did not fit are dropped.
func (p *pacer) fill(issued, due int64) int64 {
	for ; issued < due; issued++ {
		select {
		case p.tokens <- struct{}{}:
		default:
			return due
		}
	}
	return due
}

// take waits for one token. It returns false if ctx ends first.
func (p *pacer) take(ctx context.Context) bool {
	select {
	case <-p.tokens:
		return true
	case <-ctx.Done():
		return false
	}
}
