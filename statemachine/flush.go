package statemachine

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"
)

// A flush that cannot write (the disk full or failing, the data dir gone)
// never finishes: Pebble retries a failed flush at once, for ever (its own
// TODO: "count consecutive flush errors and backoff"), and DB.Flush waits
// for it. So every flush here waits a bounded time, and the retries'
// errors are logged at most once per backgroundErrorEvery.

// flushWait bounds a flush this package waits for; closeFlushWait the one
// Close makes (only to spare a restart the replay of the memtable from the
// Raft log, so it gives up sooner); releaseFlushWait the idle release's
// (ReleaseMemory), which holds the lock every Update takes. Variables:
// tests shorten them.
var (
	flushWait        = time.Minute
	closeFlushWait   = 10 * time.Second
	releaseFlushWait = 10 * time.Second
)

// flushWithin flushes db's memtables and waits for it at most d.
func flushWithin(db *pebble.DB, d time.Duration) error { return FlushWithin(db.AsyncFlush, d) }

// FlushWithin starts a flush (a Pebble DB's AsyncFlush, of either Pebble
// version: the shard package flushes the Raft log's with it) and waits
// for it at most d.
func FlushWithin(asyncFlush func() (<-chan struct{}, error), d time.Duration) error {
	done, err := asyncFlush()
	if err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("the flush did not finish within %v (does the disk fail? the log has Pebble's errors)", d)
	}
}

// backgroundErrorEvery: Pebble's background errors (a failed flush or
// compaction, retried at once) are logged at most this often, with how
// many were left out.
const backgroundErrorEvery = 10 * time.Second

// errorLimiter logs a repeated error at most once per every.
type errorLimiter struct {
	log   zerolog.Logger
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *errorLimiter) backgroundError(err error) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	l.log.Error().Str("component", "pebble").Int("same_errors_not_logged", dropped).Msgf("background error: %v", err)
}
