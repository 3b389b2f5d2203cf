package membudget

import "strings"

// glibc keeps a small cache of freed blocks per thread (the tcache: up to
// 7 blocks of each size up to 1 KiB). Blocks in it count as in use, no
// malloc_trim reaches them, and no call empties another thread's: after a
// burst, a node's dozen threads (Go's, running SQLite's and Pebble's C
// code) held 2.3 MB of them for good — a quarter of what its idle RSS had
// grown (BENCHMARKS.md, session 26). Its size is a tunable read once, as
// the program starts (GLIBC_TUNABLES), so `corvo server` runs itself again
// with the cache off (ReexecWithoutTcache); BenchmarkMirrorWrite, the C
// code's busiest path, measured the same with it off (7.7–8.2 µs against
// 8.0–8.7 µs).

// tcacheTunable turns the per-thread cache off.
const tcacheTunable = "glibc.malloc.tcache_count=0"

// withoutTcache returns the GLIBC_TUNABLES value that adds tcacheTunable
// to cur, and false when cur already sets the cache's size (the
// operator's choice stands).
func withoutTcache(cur string) (string, bool) {
	for _, t := range strings.Split(cur, ":") {
		if strings.HasPrefix(t, "glibc.malloc.tcache_count=") {
			return cur, false
		}
	}
	if cur == "" {
		return tcacheTunable, true
	}
	return cur + ":" + tcacheTunable, true
}
