package membudget

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The split of a budget (Plan). Each cache gets a fraction of the budget,
// never more than the size it had before there was a budget (the ...Cap
// constants), so a large budget does not make the caches grow; what grows
// with load shares Pool.
const (
	// DefaultFraction: without --max-memory the budget is this fraction
	// of the container's cgroup memory limit, or of the RAM when there is
	// none.
	DefaultFraction = 0.5
	// MinTotal is the smallest budget a node runs with.
	MinTotal = 256 << 20

	BlockCacheCap = 256 << 20 // Pebble block cache, all shards
	MemTableCap   = 32 << 20  // one shard's Pebble memtable
	MemTableMin   = 1 << 20
	JobCacheCap   = 64 << 20  // one shard's cache of live jobs
	RaftLogCap    = 256 << 20 // one shard's in-memory Raft log
	RaftLogMin    = 16 << 20  // two of the largest entries
	SQLiteCap     = 64 << 20  // the mirror writer's SQLite page cache
)

// Plan is how a budget of Total bytes is split between the node's
// consumers.
type Plan struct {
	Total  int64
	Shards int
	// Caches, fixed at start.
	BlockCache int64 // Pebble's block cache, shared by every shard: Total/8
	MemTable   int64 // each shard's Pebble memtable size; Pebble holds up to 2 per shard: Total/8 over all
	JobCache   int64 // each shard's cache of live jobs: Total/16 over all
	RaftLog    int64 // each shard's in-memory Raft log (dragonboat's MaxInMemLogSize): Total/8 over all
	// SQLite is the mirror writer's page cache: Total/32; its other
	// connections (at most 5) get an eighth of it each.
	SQLite int64
	// Pool is what grows with load may hold at once (request bodies,
	// proposal queues, the mirror's buffer): Total/4. Bodies and
	// Proposals may each take all of it, the mirror's buffer half.
	Pool      int64
	Bodies    int64
	Proposals int64
	Mirror    int64
	// GoLimit is the Go runtime's soft memory limit
	// (debug.SetMemoryLimit): the budget less what Pebble and SQLite
	// allocate outside the Go heap (the block cache and the memtables).
	GoLimit int64
}

// NewPlan splits total bytes for a node of the given shard count.
func NewPlan(total int64, shards int) Plan {
	total = max(total, MinTotal)
	n := int64(max(shards, 1))
	p := Plan{Total: total, Shards: int(n)}
	p.BlockCache = min(BlockCacheCap, total/8)
	p.MemTable = clamp(total/8/(2*n), MemTableMin, MemTableCap)
	p.JobCache = min(JobCacheCap, total/16/n)
	p.RaftLog = clamp(total/8/n, RaftLogMin, RaftLogCap)
	p.SQLite = min(SQLiteCap, total/32)
	p.Pool = total / 4
	p.Bodies, p.Proposals, p.Mirror = p.Pool, p.Pool, p.Pool/2
	// What lives outside the Go heap: Pebble's block cache and memtables
	// (manually allocated), SQLite's page caches, and the Raft LogDB's
	// buffers and C heap slack, put at a sixteenth.
	p.GoLimit = max(total-p.BlockCache-2*n*p.MemTable-p.sqliteAll()-total/16, total/4)
	return p
}

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// sqliteAll is the most the mirror's page caches hold: the writer's and
// five eighths.
func (p Plan) sqliteAll() int64 { return p.SQLite + 5*p.SQLite/8 }

// caches is what the plan sets aside for each cache over every shard, by
// gauge name.
func (p Plan) caches() map[string]int64 {
	n := int64(p.Shards)
	return map[string]int64{"block_cache": p.BlockCache, "memtables": 2 * n * p.MemTable, "job_cache": n * p.JobCache,
		"raft_log": n * p.RaftLog, "sqlite_cache": p.sqliteAll()}
}

// String lists the split, for the start-up log.
func (p Plan) String() string {
	return fmt.Sprintf("total=%s block_cache=%s memtable=%s/shard job_cache=%s/shard raft_log=%s/shard sqlite_cache=%s pool=%s go_limit=%s",
		FormatBytes(p.Total), FormatBytes(p.BlockCache), FormatBytes(p.MemTable), FormatBytes(p.JobCache),
		FormatBytes(p.RaftLog), FormatBytes(p.SQLite), FormatBytes(p.Pool), FormatBytes(p.GoLimit))
}

// System reads what bounds this process's memory. Tests inject ReadFile.
type System struct {
	// ReadFile reads a file (os.ReadFile when nil).
	ReadFile func(name string) ([]byte, error)
}

// noLimit: cgroup v1 writes a number this large (rounded down to a page)
// for "no limit".
const noLimit = 1 << 62

// Limit is the memory this process may use: the smallest of its cgroup's
// limit (v2 memory.max, v1 memory.limit_in_bytes) and the machine's RAM
// (/proc/meminfo MemTotal), with where it was read. An error when none
// could be read.
func (s System) Limit() (int64, string, error) {
	read := s.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	best, from := int64(0), ""
	consider := func(v int64, src string) {
		if v > 0 && v < noLimit && (best == 0 || v < best) {
			best, from = v, src
		}
	}
	for _, path := range cgroupFiles(read) {
		b, err := read(path)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			consider(n, path)
		}
	}
	if b, err := read("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					consider(kb<<10, "/proc/meminfo")
				}
			}
		}
	}
	if best == 0 {
		return 0, "", errors.New("neither a cgroup memory limit nor /proc/meminfo could be read")
	}
	return best, from, nil
}

// cgroupFiles lists the files that may hold this process's cgroup memory
// limit: its own cgroup's (from /proc/self/cgroup) and the mount root's (a
// container with its own cgroup namespace sees its cgroup there).
func cgroupFiles(read func(string) ([]byte, error)) []string {
	var own []string
	if b, err := read("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			// hierarchy-ID:controllers:path
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || parts[2] == "/" || parts[2] == "" {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				own = append(own, "/sys/fs/cgroup"+parts[2]+"/memory.max")
			case hasController(parts[1], "memory"):
				own = append(own, "/sys/fs/cgroup/memory"+parts[2]+"/memory.limit_in_bytes")
			}
		}
	}
	return append(own, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// Default is the budget without --max-memory: DefaultFraction of
// s.Limit(), never below MinTotal.
func (s System) Default() (int64, string, error) {
	limit, from, err := s.Limit()
	if err != nil {
		return 0, "", err
	}
	return max(int64(float64(limit)*DefaultFraction), MinTotal), from, nil
}

// ParseBytes reads a size: a number with an optional unit, B, KiB, MiB,
// GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of 1000), or K, M, G,
// T (powers of 1024), e.g. "1GiB", "512MiB", "2G", "1073741824".
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q is not a size (e.g. 1GiB, 512MiB)", s)
	}
	mult := map[string]float64{"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s, t[i:])
	}
	n := v * mult
	if n >= 1<<62 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// FormatBytes writes n in the largest binary unit that keeps it whole to
// a tenth, e.g. "1GiB", "1.5GiB", "300MiB".
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + units[u]
}
