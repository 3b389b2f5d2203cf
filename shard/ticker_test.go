package shard

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestMaintenanceBusyIsCounted: a maintenance proposal refused because the
// shard is saturated (ErrBusy) is counted in corvo_maintenance_busy_total
// and logged at debug level only; any other failure is a warning.
func TestMaintenanceBusyIsCounted(t *testing.T) {
	var logs bytes.Buffer
	h := &Host{log: zerolog.New(&logs).Level(zerolog.InfoLevel)}
	const i = 6 // a shard no other test proposes to
	busy := metrics.GetOrCreateCounter(fmt.Sprintf(`corvo_maintenance_busy_total{shard="%d"}`, ShardID(i)))
	before := busy.Get()
	h.maintenanceFailed(i, fmt.Errorf("propose: %w", ErrBusy))
	require.Equal(t, before+1, busy.Get())
	require.Empty(t, logs.String(), "a busy shard's skipped maintenance was logged above debug")

	h.maintenanceFailed(i, errors.New("disk on fire"))
	require.Equal(t, before+1, busy.Get())
	require.Contains(t, logs.String(), `"level":"warn"`)
	require.Contains(t, logs.String(), "disk on fire")
}
