package membudget

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Defaults of WatchConfig.
const (
	WatchIntervalDefault = 250 * time.Millisecond
	// ReleaseEveryDefault: free memory is handed back to the OS at most
	// this often (each time costs a full garbage collection).
	ReleaseEveryDefault = 10 * time.Second
	// ReleaseFloor: less reclaimable heap than this is not worth a
	// collection.
	ReleaseFloor = 16 << 20
	// QuietReleaseFloor replaces ReleaseFloor while the node is quiet
	// (after its quiet release, until it is busy again). An idle node
	// still allocates (maintenance ticks, its own Raft entries, Pebble's
	// compactions after a burst: ~150 KB/s), and at the default GOGC its
	// heap would grow to twice the live objects between collections,
	// keeping up to that much resident and the C heap untrimmed: its RSS
	// wandered by ±8 MB a minute after a burst. At 4 MiB of garbage an
	// idle node measured a minute after a burst held 3.6 MB more Go heap
	// than before it (its pre-burst figure taken just after a release);
	// at 1 MiB it releases about every 15 s (ReleaseEvery at the most
	// often), two collections of a ~13 MB live heap each time.
	QuietReleaseFloor = 1 << 20
	// QuietAfterDefault, QuietBytesDefault: a node whose clients sent
	// less than QuietBytes of request bodies over QuietAfter, and whose
	// accounts hold less than that, is quiet and gives back its caches
	// (WatchConfig.QuietRelease): idle long-polls stay under it, a few
	// jobs a second do not.
	QuietAfterDefault = 30 * time.Second
	QuietBytesDefault = 64 << 10
)

// WatchConfig configures Watch; tests inject the measures and the clock.
type WatchConfig struct {
	Interval     time.Duration
	ReleaseEvery time.Duration
	// Resident is the process's resident anonymous memory (default
	// /proc/self/statm, else what the Go runtime maps).
	Resident func() int64
	// Reclaimable is heap memory the Go runtime holds beyond the live
	// heap and has not handed back to the OS: free spans, and garbage no
	// collection has swept yet (default runtime/metrics).
	Reclaimable func() int64
	// Release hands free memory back (default: debug.FreeOSMemory, then
	// glibc's malloc_trim for the C heap).
	Release func()
	// Trim hands the C heap's free memory back (default: glibc's
	// malloc_trim): while the node is quiet, every ReleaseEvery.
	Trim func()
	// QuietRelease, when set, empties what the node caches for speed
	// (block cache, memtables, job caches, SQLite's page caches): called
	// once the node has been quiet for QuietAfter (its accounts took
	// less than QuietBytes since the last time it was busy), and again
	// only after it was busy once more; Release follows it.
	QuietRelease func()
	// Busy, when set, says the node still has work in hand although its
	// accounts take nothing new (the mirror catching up): not quiet yet.
	Busy       func() bool
	QuietAfter time.Duration
	QuietBytes int64
	Now        func() time.Time
}

func (c WatchConfig) withDefaults() WatchConfig {
	setDefault(&c.Interval, WatchIntervalDefault)
	setDefault(&c.ReleaseEvery, ReleaseEveryDefault)
	setDefault(&c.QuietAfter, QuietAfterDefault)
	setDefault(&c.QuietBytes, QuietBytesDefault)
	if c.Resident == nil {
		c.Resident = residentBytes
	}
	if c.Reclaimable == nil {
		c.Reclaimable = reclaimableBytes
	}
	if c.Release == nil {
		c.Release = release
	}
	if c.Trim == nil {
		c.Trim = trimC
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// watcher is Watch's state between measures.
type watcher struct {
	b           *Budget
	cfg         WatchConfig
	lastRelease time.Time
	lastTrim    time.Time
	// busyAt is when the accounts had last taken QuietBytes since
	// busyTaken, the count then; quietDone: released since.
	busyAt    time.Time
	busyTaken int64
	quietDone bool
}

// Watch sets the Go runtime's memory limit to the plan's GoLimit (unless
// the GOMEMLIMIT environment variable sets one), then
// measures the process every cfg.Interval until stop is closed: the
// budget is Over while resident memory is above Total (writes are
// refused), and memory is handed back to the OS (at most every
// ReleaseEvery) while the process is over or the Go heap holds more than
// ReleaseFloor (QuietReleaseFloor while quiet) beyond its live objects —
// so a burst's memory does not stay with the process once the burst has
// passed. The memory limit is the
// process's: Watch puts back the one it found when it returns.
func (b *Budget) Watch(cfg WatchConfig, stop <-chan struct{}) {
	cfg = cfg.withDefaults()
	if os.Getenv("GOMEMLIMIT") == "" { // the operator's own wins
		prev := debug.SetMemoryLimit(b.plan.GoLimit)
		defer debug.SetMemoryLimit(prev)
	}
	w := &watcher{b: b, cfg: cfg, busyAt: cfg.Now()}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	w.step()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.step()
		}
	}
}

// step is one measure: it updates Over and releases memory when due.
func (w *watcher) step() {
	res := w.cfg.Resident()
	w.b.resident.Store(res)
	total := w.b.plan.Total
	// Over above the budget, not over again until 5% below it: writes do
	// not flap at the edge.
	if res > total {
		w.b.over.Store(true)
	} else if res < total-total/20 {
		w.b.over.Store(false)
	}
	now := w.cfg.Now()
	// Busy: clients sent QuietBytes since the last busy step, or the
	// accounts hold that much now (work in hand: the mirror catching up).
	if taken := w.b.taken.Load(); taken-w.busyTaken >= w.cfg.QuietBytes || w.b.used.Load() >= w.cfg.QuietBytes {
		w.busyAt, w.busyTaken, w.quietDone = now, taken, false
	}
	quiet := w.cfg.QuietRelease != nil && !w.quietDone && now.Sub(w.busyAt) >= w.cfg.QuietAfter
	if quiet {
		w.quietDone = true
		w.cfg.QuietRelease()
		quietReleasedTotal.Inc()
	}
	floor := int64(ReleaseFloor)
	if w.quietDone {
		floor = QuietReleaseFloor
	}
	spare := w.cfg.Reclaimable()
	if (w.b.over.Load() || spare > floor) && now.Sub(w.lastRelease) >= w.cfg.ReleaseEvery || quiet {
		w.lastRelease, w.lastTrim = now, now
		w.cfg.Release()
		releasedTotal.Inc()
		return
	}
	// While quiet, the C heap is trimmed every ReleaseEvery even when the
	// Go heap has nothing to give: it keeps what it frees until trimmed,
	// and an idle node still frees there after its quiet release (the
	// compactions of the memtables that release flushed). A node held
	// 40 MiB more a minute after a burst, given back by one malloc_trim.
	if w.quietDone && now.Sub(w.lastTrim) >= w.cfg.ReleaseEvery {
		w.lastTrim = now
		w.cfg.Trim()
	}
}

// residentBytes reads the process's resident anonymous memory from
// /proc/self/statm (resident less shared pages); elsewhere what the Go
// runtime maps.
func residentBytes() int64 {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if n, err := parseStatm(b, os.Getpagesize()); err == nil {
			return n
		}
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// parseStatm reads resident less shared pages from /proc/self/statm.
func parseStatm(b []byte, page int) (int64, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("statm: %q", b)
	}
	res, err1 := strconv.ParseInt(f[1], 10, 64)
	shared, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("statm: %q", b)
	}
	return (res - shared) * int64(page), nil
}

// reclaimableBytes is the heap the Go runtime holds beyond the objects the
// last collection found live: free spans not yet handed back, and garbage
// made since.
func reclaimableBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()+s[1].Value.Uint64()) - int64(s[2].Value.Uint64())
}

// release collects the Go heap and hands its free memory back to the OS,
// then the C heap's. Two collections: the first only moves what sync.Pools
// hold to their victim caches (fasthttp's request bodies, Pebble's
// batches: tens of MB after a burst of large payloads), the second frees
// it.
func release() {
	runtime.GC()
	debug.FreeOSMemory()
	trimC()
}
