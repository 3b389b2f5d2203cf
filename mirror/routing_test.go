package mirror

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// TestMirrorRouteTarget: a routed job's current model is stored and
// searchable, and follows the job's place in its order.
func TestMirrorRouteTarget(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	ctx := context.Background()
	a, b := view(1, "llm", "pending", `{}`), view(2, "llm", "pending", `{}`)
	a.Job.Routing = &statemachine.Routing{Models: []string{"big", "small"}}
	feed(t, m, 2, statemachine.JobChange{ID: a.Job.ID, Job: &a.Job, State: a.State}, statemachine.JobChange{ID: b.Job.ID, Job: &b.Job, State: b.State})
	ids := func(model string) []string {
		t.Helper()
		p, err := m.Search(ctx, Filter{RouteTarget: model})
		require.NoError(t, err)
		var out []string
		for _, r := range p.Jobs {
			out = append(out, r.ID)
		}
		return out
	}
	require.Equal(t, []string{a.Job.ID}, ids("big"))
	require.Empty(t, ids("small"))
	a.State.RouteIndex = 1
	feed(t, m, 3, statemachine.JobChange{ID: a.Job.ID, Job: &a.Job, State: a.State})
	require.Equal(t, []string{a.Job.ID}, ids("small"))
	require.Empty(t, ids("big"))
}
