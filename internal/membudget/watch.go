package membudget

import (
	"fmt"
	"os"
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
	// ReleaseFloor: less idle heap than this (or than a sixteenth of the
	// budget, whichever is larger) is not worth a collection.
	ReleaseFloor = 32 << 20
)

// WatchConfig configures Watch; tests inject the measures and the clock.
type WatchConfig struct {
	Interval     time.Duration
	ReleaseEvery time.Duration
	// Resident is the process's resident anonymous memory (default
	// /proc/self/statm, else what the Go runtime maps).
	Resident func() int64
	// HeapIdle is heap memory the Go runtime holds free and has not
	// handed back to the OS (default runtime/metrics).
	HeapIdle func() int64
	// Release hands free memory back (default debug.FreeOSMemory).
	Release func()
	Now     func() time.Time
}

func (c WatchConfig) withDefaults() WatchConfig {
	setDefault(&c.Interval, WatchIntervalDefault)
	setDefault(&c.ReleaseEvery, ReleaseEveryDefault)
	if c.Resident == nil {
		c.Resident = residentBytes
	}
	if c.HeapIdle == nil {
		c.HeapIdle = heapIdleBytes
	}
	if c.Release == nil {
		c.Release = debug.FreeOSMemory
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
}

// Watch sets the Go runtime's memory limit to the plan's GoLimit, then
// measures the process every cfg.Interval until stop is closed: the
// budget is Over while resident memory is above Total (writes are
// refused), and memory is handed back to the OS (at most every
// ReleaseEvery) while the process is over or the Go heap keeps more than
// max(ReleaseFloor, Total/16) idle — so a burst's memory does not stay
// with the process once the burst has passed. The memory limit is the
// process's: Watch puts back the one it found when it returns.
func (b *Budget) Watch(cfg WatchConfig, stop <-chan struct{}) {
	cfg = cfg.withDefaults()
	prev := debug.SetMemoryLimit(b.plan.GoLimit)
	defer debug.SetMemoryLimit(prev)
	w := &watcher{b: b, cfg: cfg}
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
	idle := w.cfg.HeapIdle()
	now := w.cfg.Now()
	if (w.b.over.Load() || idle > max(ReleaseFloor, total/16)) && now.Sub(w.lastRelease) >= w.cfg.ReleaseEvery {
		w.lastRelease = now
		w.cfg.Release()
		releasedTotal.Inc()
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

// heapIdleBytes is the free heap memory the Go runtime still holds.
func heapIdleBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}
