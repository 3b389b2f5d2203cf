//go:build linux && cgo

package membudget

// #include <malloc.h>
import "C"

// trimC hands the C heap's free memory back to the OS (glibc's
// malloc_trim): Pebble's memtables and block cache and SQLite's page cache
// are allocated there, and glibc keeps what they free.
func trimC() { C.malloc_trim(0) }
