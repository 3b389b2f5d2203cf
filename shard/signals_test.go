package shard

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Claims in flight reserve pending jobs: a queue stops looking fetchable
// once they cover what is pending, a released reservation makes the jobs
// fetchable again, and a claim that failed or got jobs wakes the
// long-polls if jobs are left unreserved (one that got nothing does not).
func TestSignalsReserveClaims(t *testing.T) {
	s := newSignals(1)
	s.applied(&statemachine.AppliedInfo{ShardID: 1, Queues: []statemachine.QueueSignal{
		{Queue: "a", Pending: 3, Ready: true}, {Queue: "b", Pending: 1, Ready: true},
		{Queue: "paused", Pending: 5, Paused: true}, {Queue: "capped", Pending: 5, BlockedUntil: math.MaxInt64}}})

	r1 := s.reserve([]string{"a"}, 2, 0)
	require.Equal(t, 2, r1.N)
	require.True(t, s.fetchable("a", 0), "one of three left")
	r2 := s.reserve([]string{"a", "b"}, 5, 0)
	require.Equal(t, 2, r2.N, "the last of a and the one of b")
	require.False(t, s.fetchable("a", 0))
	require.False(t, s.fetchable("b", 0))
	require.Zero(t, s.reserve([]string{"a", "b"}, 1, 0).N, "nothing left to reserve")
	require.Zero(t, s.reserve([]string{"paused", "capped", "unknown"}, 1, 0).N)

	// r1's claim applied and took its two jobs: the Update's signal comes
	// first, then the release; nothing is left unreserved, no wake-up.
	watch := s.watch("a")
	s.applied(&statemachine.AppliedInfo{ShardID: 1, Queues: []statemachine.QueueSignal{{Queue: "a", Pending: 1}}})
	s.release(r1, true, 0)
	require.False(t, s.fetchable("a", 0), "r2 still holds the last one")
	require.False(t, closed(watch))

	// r2's claim failed (never applied): its jobs are free again and the
	// long-polls that parked for them are woken.
	s.release(r2, true, 0)
	require.True(t, s.fetchable("a", 0))
	require.True(t, s.fetchable("b", 0))
	require.True(t, closed(watch))
	r3 := s.reserve([]string{"a"}, 4, 0)
	require.Equal(t, 1, r3.N)

	// A claim that got nothing while the job stays pending (it could not
	// be claimed) wakes nobody: the poll that saw it retries on a timer.
	watch = s.watch("a")
	s.release(r3, false, 0)
	require.True(t, s.fetchable("a", 0))
	require.False(t, closed(watch))
}
