package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDiskFloor: --min-free-disk's grammar, the floor it gives on volumes
// of several sizes (the smaller of the two when both are set), and its
// round trip through String.
func TestDiskFloor(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]DiskFloor{
		"0":           {},
		"":            {},
		"5%":          {Percent: 5},
		"2GiB":        {Bytes: 2 << 30},
		"500MB":       {Bytes: 500e6},
		"1073741824":  {Bytes: 1 << 30},
		"5%,2GiB":     {Bytes: 2 << 30, Percent: 5},
		" 2GiB , 5% ": {Bytes: 2 << 30, Percent: 5},
		"0.5%":        {Percent: 0.5},
	} {
		got, err := ParseDiskFloor(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		again, err := ParseDiskFloor(got.String())
		require.NoError(t, err, got.String())
		require.Equal(t, got, again, "round trip of %q", in)
	}
	for _, bad := range []string{"x", "-1GiB", "0%", "100%", "5%,6%", "1GiB,2GiB", "3 parsecs", "2 GB B", "99999999999999TiB"} {
		_, err := ParseDiskFloor(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, MinFreeDiskDefault, mustFloor(t, "5%,2GiB"))
	require.Equal(t, "5%,2GiB", MinFreeDiskDefault.String())

	// The smaller of the two wins: 5 % of 20 GiB is 1 GiB; of 1 TiB, 51 GiB.
	require.Equal(t, uint64(1<<30), MinFreeDiskDefault.Of(20<<30))
	require.Equal(t, uint64(2<<30), MinFreeDiskDefault.Of(1<<40))
	require.Equal(t, uint64(50<<20), DiskFloor{Percent: 50}.Of(100<<20))
	require.Equal(t, uint64(7), DiskFloor{Bytes: 7}.Of(1<<40))
	require.Equal(t, uint64(0), DiskFloor{}.Of(1<<40))
}

func mustFloor(t *testing.T, s string) DiskFloor {
	t.Helper()
	f, err := ParseDiskFloor(s)
	require.NoError(t, err)
	return f
}

// TestHumanBytes: the sizes the 507 message names.
func TestHumanBytes(t *testing.T) {
	t.Parallel()
	require.Equal(t, "512 B", humanBytes(512))
	require.Equal(t, "1.0 GiB", humanBytes(1<<30))
	require.Equal(t, "1.5 MiB", humanBytes(3<<19))
}
