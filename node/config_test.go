package node

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway"
)

// TestConfigValidateChecksGateway: a node refuses, as a usage error before
// opening anything, a gateway config that gateway.New would refuse.
func TestConfigValidateChecksGateway(t *testing.T) {
	t.Parallel()
	ok := Config{}.WithDefaults()
	require.NoError(t, ok.Validate())

	bad := Config{MaxPayloadBytes: 8 << 20, Gateway: gateway.Config{MaxBodyBytes: 1 << 20}}.WithDefaults()
	err := bad.Validate()
	require.ErrorContains(t, err, "gateway: max body bytes")

	// Open reports it as a ConfigError and leaves the data dir alone.
	bad.DataDir = t.TempDir() + "/data"
	_, err = Open(t.Context(), bad)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.NoDirExists(t, bad.DataDir)
}
