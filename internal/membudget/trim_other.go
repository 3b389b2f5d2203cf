//go:build !linux || !cgo

package membudget

// trimC: only glibc on Linux has malloc_trim.
func trimC() {}

// ReexecWithoutTcache: only glibc has the per-thread cache it turns off.
func ReexecWithoutTcache() {}
