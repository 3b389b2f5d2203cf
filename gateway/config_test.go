package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConfigDefaultsString pins what an empty Config becomes: the limits
// docs/api.md states (1 MiB payload, 10,000 jobs per batch, 64 MiB body,
// a keepalive every 15 s, search waits up to 2 s) and the 15 s request
// timeout. A change here is a change of the docs and of --max-payload's
// default, made on purpose.
func TestConfigDefaultsString(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	got := fmt.Sprintf(`MaxPayloadBytes=%d
MaxBatchJobs=%d
MaxBodyBytes=%d
RequestTimeout=%s
EventsKeepalive=%s
SearchWait=%s
ReadTimeout=%s
ReadConcurrency=%d
ReadQueue=%d
DiskCheckInterval=%s MinFreeDisk=%s
BudgetRefresh=%s
`, c.MaxPayloadBytes, c.MaxBatchJobs, c.MaxBodyBytes, c.RequestTimeout, c.EventsKeepalive, c.SearchWait,
		c.ReadTimeout, c.ReadConcurrency, c.ReadQueue, c.DiskCheckInterval, c.MinFreeDisk, c.BudgetRefresh)
	require.Equal(t, `MaxPayloadBytes=1048576
MaxBatchJobs=10000
MaxBodyBytes=67108864
RequestTimeout=15s
EventsKeepalive=15s
SearchWait=2s
ReadTimeout=1s
ReadConcurrency=8
ReadQueue=256
DiskCheckInterval=250ms MinFreeDisk=0
BudgetRefresh=1s
`, got)
	require.NoError(t, c.Validate())

	// A payload limit near the body limit raises the body limit, so the
	// largest payload still fits with the job's other fields.
	big := Config{MaxPayloadBytes: 100 << 20}.WithDefaults()
	require.Equal(t, 100<<20+BodyOverheadBytes, big.MaxBodyBytes)
	require.NoError(t, big.Validate())

	// Set fields are kept; a negative SearchWait (never wait) too.
	set := Config{MaxBodyBytes: 2 << 20, RequestTimeout: time.Second, SearchWait: -1}.WithDefaults()
	require.Equal(t, 2<<20, set.MaxBodyBytes)
	require.Equal(t, time.Second, set.RequestTimeout)
	require.Equal(t, time.Duration(-1), set.SearchWait)
	require.NoError(t, set.Validate())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxPayloadBytes: -1}, "max payload bytes"},
		{Config{MaxBatchJobs: -5}, "max batch jobs"},
		{Config{MaxBodyBytes: -1}, "max body bytes"},
		// The cross-field rule: a body limit below the payload limit would
		// refuse payloads the payload limit allows.
		{Config{MaxPayloadBytes: 2 << 20, MaxBodyBytes: 1 << 20}, "at least max payload bytes"},
		{Config{RequestTimeout: -time.Second}, "request timeout"},
		{Config{EventsKeepalive: -time.Second}, "events keepalive"},
		{Config{ReadTimeout: -time.Second}, "read timeout"},
		{Config{ReadConcurrency: -1}, "read concurrency"},
		{Config{ReadQueue: -1}, "read queue"},
		{Config{CORSOrigins: []string{"example.com"}}, "cors origins"},
		{Config{MinFreeDisk: DiskFloor{Percent: 100}}, "min free disk percentage"},
	} {
		err := c.cfg.WithDefaults().Validate()
		require.Error(t, err, "%+v", c.cfg)
		require.Contains(t, err.Error(), c.want)
	}
	require.NoError(t, Config{MaxPayloadBytes: 1 << 20, MaxBodyBytes: 1 << 20, CORSOrigins: []string{"*"}}.WithDefaults().Validate())
}

// TestNewRefusesInvalidConfig: New does not build a server whose limits
// contradict each other.
func TestNewRefusesInvalidConfig(t *testing.T) {
	t.Parallel()
	defer func() {
		r := recover()
		require.NotNil(t, r)
		require.Contains(t, fmt.Sprint(r), "max body bytes")
	}()
	New(Config{MaxPayloadBytes: 2 << 20, MaxBodyBytes: 1 << 20}, busyEngine{})
	t.Fatal("New accepted an invalid config")
}
