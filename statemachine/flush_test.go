package statemachine

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A flush that cannot write never finishes (Pebble retries it at once, for
// ever): Sync says so after flushWait, and Close gives up on it after
// closeFlushWait and closes, instead of waiting for ever (a node whose
// disk failed could not stop).
func TestFlushGivesUpWhenTheDiskFails(t *testing.T) {
	defer func(f, c time.Duration) { flushWait, closeFlushWait = f, c }(flushWait, closeFlushWait)
	flushWait, closeFlushWait = 100*time.Millisecond, 100*time.Millisecond
	fail := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	})}
	tb := &testBundle{t: t, dir: t.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2)),
		fs: errorfs.Wrap(vfs.Default, fail)}
	tb.open()
	tb.enqueue("q", PriorityNormal)
	fail.On()
	require.ErrorContains(t, tb.sm.Sync(), "did not finish")
	closed := make(chan error, 1)
	go func() { closed <- tb.sm.Close() }()
	select {
	case err := <-closed:
		require.ErrorContains(t, err, "did not finish")
	case <-time.After(time.Minute):
		t.Fatal("Close still waits for a flush that cannot finish")
	}
}

// Pebble's background errors, retried at once, are logged once per
// interval with how many were left out.
func TestBackgroundErrorsAreLoggedOncePerInterval(t *testing.T) {
	var lines []string
	now := time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC)
	l := &errorLimiter{log: zerolog.New(writerFunc(func(p []byte) { lines = append(lines, string(p)) })), every: 10 * time.Second,
		now: func() time.Time { return now }}
	err := errors.New("disk full")
	for range 5 {
		l.backgroundError(err)
	}
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], `"same_errors_not_logged":0`)
	now = now.Add(10 * time.Second)
	l.backgroundError(err)
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], `"same_errors_not_logged":4`)
	require.Contains(t, lines[1], "disk full")
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
