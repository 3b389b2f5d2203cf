//go:build !linux || !cgo

package membudget

// trimC: only glibc on Linux has malloc_trim.
func trimC() {}

// limitArenas: only glibc has malloc arenas.
func limitArenas(int) {}
