package node

import (
	"fmt"
	"syscall"

	"github.com/corvohq/corvo/gateway"
)

// volumeSpace is the free-disk guard's probe of the volume holding dir:
// the bytes an unprivileged writer may still use, and the volume's size.
func volumeSpace(dir string) gateway.DiskProbe {
	return func() (free, total uint64, err error) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		bs := uint64(st.Bsize)
		return st.Bavail * bs, st.Blocks * bs, nil
	}
}
