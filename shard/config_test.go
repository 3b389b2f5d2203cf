package shard

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShardConfigDefaultsString pins what a Config with only its required
// fields becomes: the numbers ARCHITECTURE.md and the server's flags
// (--shards, --replicas, --snapshot-entries, --cache-mb, --retention)
// state. A change here is a change of those, made on purpose.
func TestShardConfigDefaultsString(t *testing.T) {
	t.Parallel()
	c := Config{DataDir: "d", RaftAddress: "x"}.WithDefaults()
	got := fmt.Sprintf(`Shards=%d
NodeID=%d
Replicas=%d
SnapshotEntries=%d
SnapshotBytes=%d
RTTMillisecond=%d
ElectionRTT=%d
MaxOpsPerEntry=%d
MaxEntryBytes=%d
MaxQueuedRequests=%d
ProposalTimeout=%s
ProposalDeadline=%s
TickInterval=%s
DedupRetention=%s
CacheBytes=%d
InMemLogBytes=%d
Retention=%s
SweepInterval=%s
AuditRetention=%s
`, c.Shards, c.NodeID, c.Replicas, c.SnapshotEntries, c.SnapshotBytes, c.RTTMillisecond, c.ElectionRTT, c.MaxOpsPerEntry, c.MaxEntryBytes,
		c.MaxQueuedRequests, c.ProposalTimeout, c.ProposalDeadline, c.TickInterval, c.DedupRetention, c.CacheBytes, c.InMemLogBytes, c.Retention,
		c.SweepInterval, c.AuditRetention)
	require.Equal(t, `Shards=4
NodeID=1
Replicas=3
SnapshotEntries=100000
SnapshotBytes=33554432
RTTMillisecond=50
ElectionRTT=20
MaxOpsPerEntry=4096
MaxEntryBytes=786432
MaxQueuedRequests=16384
ProposalTimeout=3s
ProposalDeadline=10s
TickInterval=250ms
DedupRetention=5m0s
CacheBytes=268435456
InMemLogBytes=268435456
Retention=168h0m0s
SweepInterval=1s
AuditRetention=2160h0m0s
`, got)
	require.NoError(t, c.Validate())
}

// TestEntryCapUnderLogDBLargeBatch: the largest entry the proposer builds
// from several requests (twice MaxEntryBytes) plus the Raft state written
// beside it stays under the size at which the log's Pebble turns a write
// into a memtable of its own (half its memtable), see MaxEntryBytesDefault.
func TestEntryCapUnderLogDBLargeBatch(t *testing.T) {
	t.Parallel()
	require.Less(t, 2*MaxEntryBytesDefault+64<<10, logDBMemTableBytes/2)
}
