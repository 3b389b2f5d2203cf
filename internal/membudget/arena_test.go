//go:build linux && cgo

package membudget

import (
	"os"
	"testing"
)

// TestOneMallocArena: threads started after the program loaded malloc from
// glibc's main arena, the only one corvo_limit_arenas leaves (the top of
// any other arena stays resident after malloc_trim).
func TestOneMallocArena(t *testing.T) {
	if !arenaProbe {
		t.Skip("not glibc, or 32-bit")
	}
	if v := os.Getenv("MALLOC_ARENA_MAX"); v != "" {
		t.Skipf("MALLOC_ARENA_MAX=%s sets the limit", v)
	}
	switch otherArenas() {
	case -1:
		t.Fatal("a probe thread or its malloc failed")
	case 1:
		t.Fatal("a new thread malloc'd from an arena other than the main one")
	}
}
