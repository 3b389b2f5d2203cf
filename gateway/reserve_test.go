package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// claimCounter is the real engine, counting the fetch claims proposed and
// those that claimed nothing.
type claimCounter struct {
	Engine
	claims, empty *atomic.Int64
}

func (c claimCounter) Propose(ctx context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	rs, err := c.Engine.Propose(ctx, sh, ops...)
	for i, op := range ops {
		if _, ok := op.(*statemachine.FetchOp); ok {
			c.claims.Add(1)
			if err == nil && i < len(rs) && len(rs[i].Jobs) == 0 {
				c.empty.Add(1)
			}
		}
	}
	return rs, err
}

// Long-polls that find a queue with pending jobs at once claim, between
// them, no more than are pending: the rest park until a job arrives,
// rather than each proposing a claim that one wins and the others spend a
// Raft round on for nothing.
func TestConcurrentFetchesClaimOnlyWhatIsPending(t *testing.T) {
	t.Parallel()
	q := uq("reserve")
	eng := claimCounter{Engine: testEngine, claims: new(atomic.Int64), empty: new(atomic.Int64)}
	_, addr := frontServer(t, Config{}, eng)
	url := "http://" + addr
	for i := 0; i < 3; i++ {
		code, body := callAt(t, "POST", url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]int{"n": i}})
		require.Equal(t, 201, code, string(body))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for w := 0; w < 24; w++ {
		wg.Go(func() {
			code, body := callAt(t, "POST", url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w", "timeout": 1})
			if code != 200 {
				return
			}
			j := mustJSON[struct {
				JobID string `json:"job_id"`
			}](t, body)
			mu.Lock()
			got[j.JobID]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, got, 3, "every job was delivered")
	for id, n := range got {
		require.Equal(t, 1, n, "job %s delivered once", id)
	}
	require.Zero(t, eng.empty.Load(), "no claim proposed for nothing (%d claims)", eng.claims.Load())
	require.LessOrEqual(t, eng.claims.Load(), int64(3))
}
