//go:build !linux || !cgo

package membudget

// trimC: only glibc on Linux has malloc_trim.
func trimC() {}
