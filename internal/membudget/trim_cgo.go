//go:build linux && cgo

package membudget

/*
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

// corvo_limit_arenas caps glibc's malloc arenas at half the cores, at least
// 2 (glibc's default is 8 per core), unless MALLOC_ARENA_MAX is set. Each
// thread that allocates in C may get an arena of its own, and what SQLite
// frees in one stays there, out of reach of the others and of malloc_trim.
// It runs as the program loads, before any thread exists: glibc fixes its
// arena limit the first time a thread needs a second arena, so a mallopt
// made once Go's threads run comes too late (measured: idle RSS 168 MiB
// with it made at node start, 92 MiB with the limit from the start,
// docs/operating-under-load.md).
__attribute__((constructor)) static void corvo_limit_arenas(void) {
	if (getenv("MALLOC_ARENA_MAX") == NULL) {
		long n = sysconf(_SC_NPROCESSORS_ONLN) / 2;
		mallopt(M_ARENA_MAX, n < 2 ? 2 : (int)n);
	}
	// A fixed mmap threshold (unless MALLOC_MMAP_THRESHOLD_ is set): blocks
	// of 128 KiB or more (Pebble's memtables, SQLite's bulk page caches)
	// get a mapping of their own, whose untouched pages are never resident
	// and which goes back to the OS when freed. glibc's default raises the
	// threshold to the size of each mapped block freed (up to 32 MiB), after
	// which such blocks come from an arena, are zeroed there and stay as
	// its slack once freed (docs/operating-under-load.md).
	if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) mallopt(M_MMAP_THRESHOLD, 128 << 10);
}
*/
import "C"

import (
	"os"
	"syscall"
)

// trimC hands the C heap's free memory back to the OS (glibc's
// malloc_trim): SQLite's page cache is allocated there, and glibc keeps
// what it frees.
func trimC() { C.malloc_trim(0) }

// ReexecWithoutTcache runs the program again in place (execve, same PID)
// with glibc's per-thread cache turned off (tcache.go), unless
// GLIBC_TUNABLES already sets its size. It returns only when it did not
// run it again: the cache was already set, or the exec failed (the
// program then goes on with the cache).
func ReexecWithoutTcache() {
	cur, set := os.LookupEnv("GLIBC_TUNABLES")
	env, ok := withoutTcache(cur)
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	if os.Setenv("GLIBC_TUNABLES", env) != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, os.Environ())
	if set { // the exec failed: the environment as it was
		_ = os.Setenv("GLIBC_TUNABLES", cur)
	} else {
		_ = os.Unsetenv("GLIBC_TUNABLES")
	}
}
