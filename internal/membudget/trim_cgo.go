//go:build linux && cgo

package membudget

/*
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

// corvo_limit_arenas gives glibc's malloc one arena, unless
// MALLOC_ARENA_MAX is set (glibc's default is 8 per core). Each thread that
// allocates in C may get an arena of its own, and what SQLite and Pebble
// free in one stays there, out of reach of the others; malloc_trim gives
// back the free chunks inside every arena but shrinks only the main one
// from its top, so the slack a burst leaves at the top of another arena
// stays resident: with two arenas a node held 3.2 MiB more a minute after
// the overload than with one (BENCHMARKS.md, session 29), and one arena
// measured no slower (the C allocations are Pebble's block-cache fills and
// memtables and SQLite's, none on a per-job path that contends).
// It runs as the program loads, before any thread exists: glibc fixes its
// arena limit the first time a thread needs a second arena, so a mallopt
// made once Go's threads run comes too late (measured: idle RSS 168 MiB
// with it made at node start, 92 MiB with the limit from the start,
// docs/operating-under-load.md).
__attribute__((constructor)) static void corvo_limit_arenas(void) {
	if (getenv("MALLOC_ARENA_MAX") == NULL) mallopt(M_ARENA_MAX, 1);
	// A fixed mmap threshold (unless MALLOC_MMAP_THRESHOLD_ is set): blocks
	// of 128 KiB or more (Pebble's memtables, SQLite's bulk page caches)
	// get a mapping of their own, whose untouched pages are never resident
	// and which goes back to the OS when freed. glibc's default raises the
	// threshold to the size of each mapped block freed (up to 32 MiB), after
	// which such blocks come from an arena, are zeroed there and stay as
	// its slack once freed (docs/operating-under-load.md).
	if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) mallopt(M_MMAP_THRESHOLD, 128 << 10);
}

#if defined(__GLIBC__) && defined(__LP64__)
#define CORVO_ARENA_PROBE 1
// corvo_arena_probe mallocs a block on its own thread and says whether it
// came from another arena than the main one: bit 2 (NON_MAIN_ARENA) of
// the size word glibc keeps before the block.
static void *corvo_arena_probe(void *arg) {
	void *p = malloc(64);
	*(int *)arg = p == NULL ? -1 : (((size_t *)p)[-1] & 4) != 0;
	free(p);
	return NULL;
}

// corvo_other_arenas starts 8 threads, one after the other, each of which
// mallocs a block: 1 when any came from another arena than the main one,
// 0 when none did, -1 when a thread or a malloc failed. glibc gives a new
// thread an arena of its own while the limit allows one more.
static int corvo_other_arenas(void) {
	int other = 0;
	for (int i = 0; i < 8; i++) {
		pthread_t t;
		int r = -1;
		if (pthread_create(&t, NULL, corvo_arena_probe, &r) != 0) return -1;
		pthread_join(t, NULL);
		if (r < 0) return -1;
		other |= r;
	}
	return other;
}
#else
#define CORVO_ARENA_PROBE 0
static int corvo_other_arenas(void) { return -1; }
#endif
*/
import "C"

import (
	"os"
	"syscall"
)

// arenaProbe says whether otherArenas can tell arenas apart here (glibc,
// 64-bit).
const arenaProbe = C.CORVO_ARENA_PROBE == 1

// otherArenas reports whether new threads malloc from an arena other than
// the main one (1), only from the main one (0), or the probe failed (-1).
func otherArenas() int { return int(C.corvo_other_arenas()) }

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
