package history

import (
	"testing"

	"github.com/corvohq/corvo/internal/leakcheck"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
