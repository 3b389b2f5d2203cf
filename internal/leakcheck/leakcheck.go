// Package leakcheck is the goroutine-leak check every package that starts
// goroutines runs in its TestMain (goleak), with the one list of
// third-party background goroutines that are not leaks of ours.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Ignored are the goroutines a test binary may still run when its tests
// end, each by a function on its stack, with why it is not a leak. A
// fasthttp server or client we forget to stop is still caught: its accept
// loop or its connections' goroutines are not in this list.
var Ignored = []goleak.Option{
	// Process-wide: the first fasthttp.Server starts it (sync.Once) to
	// refresh the Date header; it never stops.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	// Process-wide: the default TCP dialer's DNS cache cleaner, started on
	// the first dial; it never stops.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	// One per host a fasthttp client dialed: it sleeps MaxIdleConnDuration
	// between passes and exits only after a pass finds no connection left;
	// fasthttp has no way to stop it sooner.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	// One per fasthttp.Client that dialed (the peer client's probe and
	// one-off calls): it sleeps 10 s between passes and exits only after a
	// pass finds no host client left; fasthttp has no way to stop it
	// sooner.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	// A fasthttp.Server's idle-worker cleaner: after Shutdown it exits at
	// its next pass, up to MaxIdleWorkerDuration (10 s) later, longer than
	// goleak waits.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
}

// Main runs the package's tests, then fails the run when a goroutine
// outlives them (goleak.VerifyTestMain with Ignored).
func Main(m *testing.M) {
	goleak.VerifyTestMain(m, Ignored...)
}

// Find reports the goroutines still running apart from Ignored (for a
// TestMain that has to close shared fixtures between the tests and the
// check).
func Find() error {
	return goleak.Find(Ignored...)
}
