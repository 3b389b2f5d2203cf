package router

import (
	"fmt"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"
)

func TestJobIDRoundTrip(t *testing.T) {
	t.Parallel()
	u := ulid.Make()
	for _, shard := range []int{0, 1, 9, 10, 63, 999} {
		id := JobID(shard, u)
		got, err := ParseJobID(id)
		require.NoError(t, err, id)
		require.Equal(t, shard, got)
	}
}

func TestParseJobIDRejects(t *testing.T) {
	t.Parallel()
	u := ulid.Make().String()
	for _, id := range []string{
		"", "job_", "job__" + u, "job_01_" + u, "job_x_" + u, "job_1_" + u[:25],
		"job_1_" + u + "x", "jb_1_" + u, "job_-1_" + u, "job_1_ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "job_123456_" + u,
	} {
		_, err := ParseJobID(id)
		require.ErrorIs(t, err, ErrInvalidJobID, id)
	}
}

func TestShardForJobOutOfRange(t *testing.T) {
	t.Parallel()
	r := New(4)
	_, err := r.ShardForJob(JobID(4, ulid.Make()))
	require.ErrorIs(t, err, ErrInvalidJobID)
	s, err := r.ShardForJob(JobID(3, ulid.Make()))
	require.NoError(t, err)
	require.Equal(t, 3, s)
}

// TestShardForQueueGolden pins the queue→shard mapping: changing it would
// strand every existing queue on the wrong shard.
func TestShardForQueueGolden(t *testing.T) {
	t.Parallel()
	r := New(4)
	got := ""
	for _, q := range []string{"default", "emails.send", "emails.bulk", "reports", "a", "q0", "q1", "q2"} {
		got += fmt.Sprintf("%s=%d ", q, r.ShardForQueue(q))
	}
	require.Equal(t, "default=2 emails.send=0 emails.bulk=0 reports=2 a=3 q0=1 q1=0 q2=2 ", got)
}

func TestValidateQueueName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "emails.send", "A-b_c:d.9", string(make128('x'))} {
		require.NoError(t, ValidateQueueName(ok), ok)
	}
	for _, bad := range []string{"", "has space", "slash/x", "ü", string(make128('x')) + "y", "semi;colon"} {
		require.Error(t, ValidateQueueName(bad), bad)
	}
}

func make128(c byte) []byte {
	b := make([]byte, 128)
	for i := range b {
		b[i] = c
	}
	return b
}

func FuzzParseJobID(f *testing.F) {
	f.Add("job_0_" + ulid.Make().String())
	f.Add("job_12_01HX7Y2K3M0000000000000000")
	f.Add("job_")
	f.Fuzz(func(t *testing.T, id string) {
		s, err := ParseJobID(id)
		if err != nil {
			return
		}
		// Anything accepted must round-trip exactly.
		u, perr := ulid.ParseStrict(id[len(id)-ulid.EncodedSize:])
		require.NoError(t, perr)
		require.Equal(t, id, JobID(s, u))
	})
}

func TestTaggedShard(t *testing.T) {
	r := New(4)
	for _, c := range []struct {
		id   string
		want int
		ok   bool
	}{
		{"batch_3_01J0000000000000000000000", 3, true},
		{"batch_0_x", 0, true},
		{"batch_4_x", 0, false},  // out of range
		{"batch_03_x", 0, false}, // leading zero
		{"batch_-1_x", 0, false},
		{"batch_1_", 0, false},
		{"batch_1", 0, false},
		{"sched_1_x", 0, false}, // another prefix
		{"batch__x", 0, false},
		{"batch_999999_x", 0, false},
	} {
		got, ok := r.TaggedShard("batch_", c.id)
		if got != c.want || ok != c.ok {
			t.Errorf("TaggedShard(%q) = %d, %v; want %d, %v", c.id, got, ok, c.want, c.ok)
		}
	}
}
