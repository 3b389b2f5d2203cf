//go:build linux && cgo

package membudget

// #include <malloc.h>
import "C"

// trimC hands the C heap's free memory back to the OS (glibc's
// malloc_trim): Pebble's memtables and block cache and SQLite's page cache
// are allocated there, and glibc keeps what they free.
func trimC() { C.malloc_trim(0) }

// limitArenas caps glibc's malloc arenas at n (its default is 8 per core):
// each thread that allocates in C may get its own arena, and what Pebble
// and SQLite free in one stays there, unusable by the others.
func limitArenas(n int) { C.mallopt(C.M_ARENA_MAX, C.int(n)) }
