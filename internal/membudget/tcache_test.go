package membudget

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWithoutTcache: the per-thread cache is turned off by adding to the
// operator's tunables, never by overriding a size they set.
func TestWithoutTcache(t *testing.T) {
	for _, c := range []struct {
		cur, want string
		changed   bool
	}{
		{"", "glibc.malloc.tcache_count=0", true},
		{"glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0", true},
		{"glibc.malloc.tcache_count=7", "glibc.malloc.tcache_count=7", false},
		{"glibc.malloc.arena_max=2:glibc.malloc.tcache_count=3", "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=3", false},
		{"glibc.malloc.tcache_count_x=1", "glibc.malloc.tcache_count_x=1:glibc.malloc.tcache_count=0", true},
	} {
		got, changed := withoutTcache(c.cur)
		require.Equal(t, c.want, got, c.cur)
		require.Equal(t, c.changed, changed, c.cur)
	}
}
