package bench

import "time"

// ackLinger is how long an acker waits for more jobs before sending a
// partial ack batch.
const ackLinger = 5 * time.Millisecond

// acker acknowledges the jobs fetched by one worker in batches of
// cfg.AckBatch on its own connection. A partial batch is sent once no new
// job arrived for ackLinger, so acks are not held back while the worker
// waits in a long-poll fetch.
type acker struct {
	r    *runner
	c    *caller
	st   stats
	in   chan []fetchedJob
	done chan struct{}
}

// startAcker starts an acker goroutine; stop it with stop.
func (r *runner) startAcker(client *httpClient) *acker {
	a := &acker{
		r:    r,
		c:    newCaller(client, &r.ctr),
		in:   make(chan []fetchedJob, r.cfg.AckBatch/r.cfg.FetchBatch+1),
		done: make(chan struct{}),
	}
	go a.run()
	return a
}

// stop flushes the remaining jobs, waits for the goroutine to exit and
// returns its stats.
func (a *acker) stop() *stats {
	close(a.in)
	<-a.done
	a.c.release()
	return &a.st
}

func (a *acker) run() {
	defer close(a.done)
	linger := time.NewTimer(ackLinger)
	linger.Stop()
	var pending []fetchedJob
	for {
		select {
		case jobs, ok := <-a.in:
			if !ok {
				if a.r.ctx.Err() == nil {
					a.flush(pending, true)
				}
				return
			}
			wasEmpty := len(pending) == 0
			pending = a.flush(append(pending, jobs...), false)
			switch {
			case len(pending) == 0:
				linger.Stop()
			case wasEmpty:
				linger.Reset(ackLinger)
			}
		case <-linger.C:
			pending = a.flush(pending, true)
		}
	}
}

// flush acks pending jobs in groups of cfg.AckBatch. Unless all is set, a
// trailing partial group is kept. It returns the jobs still pending.
func (a *acker) flush(pending []fetchedJob, all bool) []fetchedJob {
	n := a.r.cfg.AckBatch
	rest := pending
	for len(rest) >= n || (all && len(rest) > 0) {
		k := min(n, len(rest))
		a.r.ackBatch(a.c, &a.st, rest[:k])
		rest = rest[k:]
	}
	return append(pending[:0], rest...)
}
