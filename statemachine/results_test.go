package statemachine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// resultsSample covers every Result field, fetched jobs included.
func resultsSample() []Result {
	return []Result{
		{Status: StatusOK, State: StateActive, NextAttemptAt: 5, AttemptsRemaining: 2, Count: 3, Message: "m", Queue: "q",
			Existing: true, JobID: "job_1_x", Cursor: []byte{1, 2},
			Jobs: []JobView{{
				Job: Job{ID: "job_1_x", Queue: "q", Payload: []byte(`{"a":1}`),
					JobOptions: JobOptions{Priority: PriorityHigh, MaxRetries: 4, Backoff: BackoffLinear, BaseDelayMs: 10, MaxDelayMs: 100,
						BaseDelay: "10ms", LeaseSeconds: 30, Tags: []byte(`{"t":"x"}`)},
					CreatedAt: 7, Seq: 8, BatchID: "batch_1_y", BatchShard: 1,
					DependsOn: []Dep{{ID: "job_2_z", Shard: 2}}},
				State: JobState{State: StateActive, Attempt: 2, WorkerID: "w", Hostname: "h", LeaseExpiresAt: 9, StartedAt: 8,
					Checkpoint: []byte(`{"c":2}`), Errors: 1, LastError: "boom"},
				Errors: []JobError{{Attempt: 1, Error: "boom", Backtrace: "bt", At: 3, StartedAt: 2, WorkerID: "w", RetryAt: 4}},
			}},
			Heartbeats: []HeartbeatStatus{HeartbeatOK, HeartbeatLost, HeartbeatCancel}},
		{Status: StatusConflict, State: StateCompleted, Message: "not held"},
	}
}

// TestAppendResultsRoundTrip: what AppendResults writes, DecodeResults
// reads back unchanged, fetched jobs whole.
func TestAppendResultsRoundTrip(t *testing.T) {
	t.Parallel()
	rs := resultsSample()
	got, err := DecodeResults(AppendResults(nil, rs))
	require.NoError(t, err)
	require.Equal(t, rs, got)
	got, err = DecodeResults(AppendResults([]byte("prefix")[6:], nil))
	require.NoError(t, err)
	require.Empty(t, got)
}

func FuzzDecodeResults(f *testing.F) {
	f.Add(AppendResults(nil, resultsSample()))
	f.Add(AppendResults(nil, nil))
	f.Add([]byte{})
	f.Add([]byte{0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := DecodeResults(b)
		if err != nil {
			return
		}
		if b[0] != 0 {
			return // compact (dedup records): jobs by ID only
		}
		// Decodable full results survive a re-encode unchanged.
		again, err := DecodeResults(AppendResults(nil, rs))
		require.NoError(t, err)
		require.Equal(t, rs, again)
	})
}
