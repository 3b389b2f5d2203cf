package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// The free-disk guard. Below the free-space floor (Config.MinFreeDisk) the
// routes that add data — enqueue, batch enqueue, schedules, moves and
// restores (the table below) — answer 507 insufficient_storage and change
// nothing, while everything that frees space or finishes work (acks,
// fails, fetches, heartbeats, deletes, cancels, queue clears, bulk
// actions, purges by the retention sweep) and every read go on, so an
// operator or the workers can bring the node back above the floor.
// The floor is checked before anything is proposed: a refused write was
// never in the Raft log, and nothing answered 2xx is touched.

// DiskProbe reports the bytes free to the server on the volume holding
// its data, and the volume's size.
type DiskProbe func() (free, total uint64, err error)

// DiskFloor is the free space below which writes that add data are
// refused: the smallest of Bytes and Percent of the volume's size, each
// counted only when set (both zero: no floor).
type DiskFloor struct {
	Bytes   uint64
	Percent float64 // 0–100
}

// MinFreeDiskDefault is the floor `corvo server` runs with: 5 % of the
// volume, at most 2 GiB. 5 % leaves a small volume room for what keeps
// running below the floor (Pebble compactions, which briefly need the
// size of their inputs, the Raft log until its next compaction, acks and
// deletes themselves); on a large volume 2 GiB is that room many times
// over, and a higher floor would only waste the disk.
var MinFreeDiskDefault = DiskFloor{Bytes: 2 << 30, Percent: 5}

// DiskCheckIntervalDefault is how often the guard asks the probe at most
// (a statfs): at 200 MB/s of writes it overshoots the floor by 50 MB.
const DiskCheckIntervalDefault = 250 * time.Millisecond

// Of is the floor, in bytes, on a volume of total bytes.
func (f DiskFloor) Of(total uint64) uint64 {
	var floor uint64
	set := false
	if f.Bytes > 0 {
		floor, set = f.Bytes, true
	}
	if f.Percent > 0 {
		p := uint64(float64(total) * f.Percent / 100)
		if !set || p < floor {
			floor = p
		}
	}
	return floor
}

// String is the floor as ParseDiskFloor reads it.
func (f DiskFloor) String() string {
	var parts []string
	if f.Percent > 0 {
		parts = append(parts, strconv.FormatFloat(f.Percent, 'f', -1, 64)+"%")
	}
	if f.Bytes > 0 {
		parts = append(parts, formatBytes(f.Bytes))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ",")
}

// ParseDiskFloor reads "5%", "2GiB", "500MB", "1073741824", "0" (no floor)
// or a comma-separated pair of a percentage and a size ("5%,2GiB": the
// smaller of the two).
func ParseDiskFloor(s string) (DiskFloor, error) {
	var f DiskFloor
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return f, nil
	}
	pct, size := false, false
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if p, ok := strings.CutSuffix(part, "%"); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || v <= 0 || v >= 100 || pct {
				return DiskFloor{}, fmt.Errorf("%q: a percentage must be above 0 and below 100, given once", part)
			}
			f.Percent, pct = v, true
			continue
		}
		v, err := ParseBytes(part)
		if err != nil || v == 0 || size {
			return DiskFloor{}, fmt.Errorf("%q: want a positive size (e.g. 2GiB, 500MB) or a percentage (5%%), at most one of each", part)
		}
		f.Bytes, size = v, true
	}
	return f, nil
}

// ParseBytes reads a byte count: a number with an optional unit (B, KB,
// MB, GB, TB powers of 1000; KiB, MiB, GiB, TiB powers of 1024).
func ParseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult := map[string]uint64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q in %q", unit, s)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	if v > ^uint64(0)/mult {
		return 0, fmt.Errorf("too large: %q", s)
	}
	return v * mult, nil
}

// formatBytes writes n in the largest binary unit it is a whole multiple
// of, else in bytes.
func formatBytes(n uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatUint(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}

// humanBytes writes n with one decimal in the largest binary unit below it.
func humanBytes(n uint64) string {
	v, units := float64(n), []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatUint(n, 10) + " B"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

// growsData lists the routes the guard refuses below the floor: those that
// add jobs or records (a move copies the job to its new queue; a restore
// writes a whole backup). Every other route keeps working: a retry makes a
// finished job pending again without a new record, and a bulk action must
// stay possible because it is how an operator deletes by filter.
var growsData = map[string]bool{
	"POST /api/v1/enqueue":        true,
	"POST /api/v1/enqueue/batch":  true,
	"POST /api/v1/schedules":      true,
	"PUT /api/v1/schedules/{id}":  true,
	"POST /api/v1/jobs/{id}/move": true,
	"POST /api/v1/restore":        true,
}

// The guard's metrics: the free bytes and the floor as last probed, and
// the writes refused.
var (
	diskFreeBytes     = metrics.NewGauge(`corvo_disk_free_bytes`, nil)
	diskMinFreeBytes  = metrics.NewGauge(`corvo_disk_min_free_bytes`, nil)
	diskWritesRefused = metrics.NewCounter(`corvo_disk_writes_refused_total`)
)

// diskGuard checks the probe at most once per interval and keeps the
// answer for the requests in between.
type diskGuard struct {
	probe    DiskProbe
	floor    DiskFloor
	interval time.Duration // negative: ask the probe on every check

	next  atomic.Int64 // Unix ns of the next probe
	low   atomic.Bool
	free  atomic.Uint64
	min   atomic.Uint64
	mu    sync.Mutex // one probe at a time
	state string     // the last logged state, under mu
}

// newDiskGuard is the guard of cfg; without a floor it only keeps the
// gauges; nil without a probe.
func newDiskGuard(cfg Config) *diskGuard {
	if cfg.FreeDisk == nil {
		return nil
	}
	return &diskGuard{probe: cfg.FreeDisk, floor: cfg.MinFreeDisk, interval: cfg.DiskCheckInterval}
}

// refresh asks the probe when the last answer is older than the interval
// (or always, when force), and records the answer.
func (s *Server) refreshDisk(force bool) {
	g := s.disk
	now := time.Now().UnixNano()
	if !force && g.interval >= 0 && now < g.next.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !force && g.interval >= 0 && now < g.next.Load() {
		return // another request probed meanwhile
	}
	g.next.Store(now + int64(g.interval))
	free, total, err := g.probe()
	if err != nil {
		// A probe that fails never stops writes: the floor protects the
		// data, an unknown free space is no reason to refuse it.
		if g.state != "error" {
			s.log.Warn().Err(err).Msg("cannot read the data volume's free space: writes are not checked against --min-free-disk")
			g.state = "error"
		}
		g.low.Store(false)
		return
	}
	floor := g.floor.Of(total)
	low := floor > 0 && free < floor
	g.free.Store(free)
	g.min.Store(floor)
	g.low.Store(low)
	diskFreeBytes.Set(float64(free))
	diskMinFreeBytes.Set(float64(floor))
	switch {
	case low && g.state != "low":
		s.log.Error().Uint64("free_bytes", free).Uint64("min_free_bytes", floor).
			Msg("the data volume is below --min-free-disk: refusing writes that add data (507) until space is freed")
		g.state = "low"
	case !low && g.state == "low":
		s.log.Info().Uint64("free_bytes", free).Uint64("min_free_bytes", floor).
			Msg("the data volume is above --min-free-disk again: accepting writes")
		g.state = "ok"
	case !low:
		g.state = "ok"
	}
}

// diskRoom reports whether a write that adds data may go on; if not it
// answers 507.
func (s *Server) diskRoom(ctx *fasthttp.RequestCtx) bool {
	if s.disk == nil {
		return true
	}
	s.refreshDisk(false)
	if !s.disk.low.Load() {
		return true
	}
	diskWritesRefused.Inc()
	ctx.Response.Header.Set("Retry-After", "30")
	writeError(ctx, codeInsufficientStorage.errf(
		"this node's data volume has %s free, below its --min-free-disk floor of %s: writes that add data are refused until space is freed (acks, fails, deletes, cancels and reads still work)",
		humanBytes(s.disk.free.Load()), humanBytes(s.disk.min.Load())))
	return false
}
