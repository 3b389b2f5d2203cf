package statemachine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPendingWindowsStayBounded: a shard keeps windows for at most
// winQueues queues however many it serves, and a window dropped for the
// bound only costs a seek: every fetch still gets its queue's jobs in
// order.
func TestPendingWindowsStayBounded(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.sm.winKeys = 2
	const queues = winQueues + 44
	ids := map[string][]string{}
	for i := range queues {
		q := fmt.Sprint("q", i)
		for range 5 {
			ids[q] = append(ids[q], tb.enqueue(q, PriorityNormal))
		}
		require.LessOrEqual(t, len(tb.sm.wins), winQueues)
	}
	for i := range queues {
		q := fmt.Sprint("q", i)
		var got []string
		for _, n := range []int{1, 3, 1} {
			for _, j := range tb.fetch(n, q) {
				got = append(got, j.Job.ID)
			}
			tb.checkWindows()
		}
		require.Equal(t, ids[q], got, "queue %s", q)
		require.LessOrEqual(t, len(tb.sm.wins), winQueues)
	}
	require.NotEmpty(t, tb.sm.wins, "fetches leave their queues windows")
}
