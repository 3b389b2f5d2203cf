package intern

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestSharedStaysBounded: a Shared table keeps at most Max names, none
// longer than MaxLen, gives back its own copy of a name it keeps, and
// reads every name right past its bounds; concurrent use is safe (-race).
func TestSharedStaysBounded(t *testing.T) {
	t.Parallel()
	var s Shared
	long := strings.Repeat("x", MaxLen+1)
	require.Equal(t, long, s.Get([]byte(long)))
	a, b := s.Get([]byte("emails")), s.Get([]byte("emails"))
	require.Equal(t, unsafe.StringData(a), unsafe.StringData(b))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range Max/2 + 100 {
				name := fmt.Sprintf("bound-%d-%d", g, i)
				require.Equal(t, name, s.Get([]byte(name)))
			}
		})
	}
	wg.Wait()
	require.Equal(t, Max, s.Len())
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.t.m[long]
	require.False(t, ok)
}
