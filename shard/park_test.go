package shard

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

func enqueueBatch(queues ...string) []*request {
	var ops []statemachine.Op
	for _, q := range queues {
		ops = append(ops, &statemachine.EnqueueOp{Job: statemachine.Job{Queue: q}})
	}
	return []*request{{ops: ops}}
}

// TestParkGroupServesOnce: a fetch parked at two proposers (one part
// each, one group) rides in exactly one entry even when both proposers
// take parked fetches at the same moment; the other part is dropped, and
// withdrawing it then succeeds (it is not in an entry).
func TestParkGroupServesOnce(t *testing.T) {
	for range 200 {
		var a, b parking
		g := new(ParkGroup)
		pa := a.park(&statemachine.FetchOp{Queues: []string{"qa"}, Count: 1}, g)
		pb := b.park(&statemachine.FetchOp{Queues: []string{"qb"}, Count: 1}, g)
		var ta, tb []*request
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ta = a.take(enqueueBatch("qa"), 0, 10) }()
		go func() { defer wg.Done(); tb = b.take(enqueueBatch("qb"), 0, 10) }()
		wg.Wait()
		require.Equal(t, 1, len(ta)+len(tb), "the fetch rode in %d entries", len(ta)+len(tb))
		require.Empty(t, a.list)
		require.Empty(t, b.list)
		if len(ta) == 1 {
			require.False(t, a.unpark(pa), "the part in an entry cannot be withdrawn")
			require.True(t, b.unpark(pb))
		} else {
			require.False(t, b.unpark(pb))
			require.True(t, a.unpark(pa))
		}
	}
}

// TestParkGroupPartWaitsForItsQueues: a part whose queues get no job stays
// parked until its group is taken elsewhere, then goes at the next take.
func TestParkGroupPartWaitsForItsQueues(t *testing.T) {
	var a, b parking
	g := new(ParkGroup)
	a.park(&statemachine.FetchOp{Queues: []string{"qa"}, Count: 1}, g)
	b.park(&statemachine.FetchOp{Queues: []string{"qb"}, Count: 1}, g)
	require.Empty(t, b.take(enqueueBatch("other"), 0, 10))
	require.Len(t, b.list, 1, "a part with nothing to serve stays")
	require.Len(t, a.take(enqueueBatch("qa"), 0, 10), 1)
	require.Empty(t, b.take(enqueueBatch("qb"), 0, 10), "the group was served by the other shard")
	require.Empty(t, b.list)
	// Without a group, parked fetches are as before: each is served.
	var c parking
	c.park(&statemachine.FetchOp{Queues: []string{"qc"}, Count: 1}, nil)
	c.park(&statemachine.FetchOp{Queues: []string{"qc"}, Count: 1}, nil)
	require.Len(t, c.take(enqueueBatch("qc", "qc"), 0, 10), 2)
}
