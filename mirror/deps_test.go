package mirror

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// withDeps is job i of shard sh, depending on deps.
func withDeps(sh, i int, deps ...statemachine.JobView) statemachine.JobView {
	v := shardView(sh, i, "q")
	v.State.State = statemachine.StateHeld
	for _, d := range deps {
		v.Job.DependsOn = append(v.Job.DependsOn, statemachine.Dep{ID: d.Job.ID, Shard: uint32(sh)})
	}
	return v
}

func children(t *testing.T, m *Mirror, dep string) []string {
	t.Helper()
	p, err := m.Search(context.Background(), Filter{DependsOn: dep, Limit: 100})
	require.NoError(t, err)
	out := []string{}
	for _, r := range p.Jobs {
		out = append(out, r.ID)
	}
	sort.Strings(out)
	require.Equal(t, len(out), p.Total)
	return out
}

func depRows(t *testing.T, m *Mirror, job string) int {
	t.Helper()
	var n int
	require.NoError(t, m.rdb.QueryRow(`SELECT count(*) FROM job_deps WHERE job_id = ?`, job).Scan(&n))
	return n
}

// TestMirrorDependsOn: a search by depends_on finds a job's children on
// every shard; a child's rows go with it when it is deleted, when a
// rebuild no longer finds it and when its shard is dropped.
func TestMirrorDependsOn(t *testing.T) {
	t.Parallel()
	src := newShardSource(2, 0, 1)
	m := openShards(t, filepath.Join(t.TempDir(), "m.db"), src)
	p1, p2 := shardView(0, 1, "q"), shardView(1, 2, "q")
	c1 := withDeps(0, 3, p1, p2)
	c2 := withDeps(1, 4, p1)
	feedShard(t, m, 0, 10, p1, c1)
	feedShard(t, m, 1, 10, p2, c2)
	require.Equal(t, []string{c1.Job.ID, c2.Job.ID}, children(t, m, p1.Job.ID))
	require.Equal(t, []string{c1.Job.ID}, children(t, m, p2.Job.ID))
	require.Empty(t, children(t, m, c1.Job.ID))
	require.Empty(t, children(t, m, "job_0_nope"))

	// Later changes of a child (it runs) keep one row per dependency.
	c1.State.State = statemachine.StatePending
	feedShard(t, m, 0, 11, c1)
	require.Equal(t, 2, depRows(t, m, c1.Job.ID))
	// With other criteria: AND.
	p, err := m.Search(context.Background(), Filter{DependsOn: p1.Job.ID, States: []string{"held"}})
	require.NoError(t, err)
	require.Equal(t, []string{"004"}, ids(p))
	require.Empty(t, (&Filter{DependsOn: p1.Job.ID}).Unindexed(), "depends_on has an index")

	// Deleted: gone from the search and the table.
	m.Applied(&statemachine.AppliedInfo{ShardID: 2, Index: 12, Changes: []statemachine.JobChange{{ID: c2.Job.ID, Deleted: true}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Caught(ctx))
	require.Equal(t, []string{c1.Job.ID}, children(t, m, p1.Job.ID))
	require.Zero(t, depRows(t, m, c2.Job.ID))

	// A rebuild of shard 0 that finds c1 gone and a new child c3 of p2.
	c3 := withDeps(0, 5, p2)
	src.setHosted(0, true, 30, p1, c3)
	src.setHosted(1, true, 30, p2)
	m.RequestRebuild()
	eventually(t, "rebuilt", func() bool {
		p, err := m.Search(context.Background(), Filter{DependsOn: p2.Job.ID})
		return err == nil && len(p.Jobs) == 1 && p.Jobs[0].ID == c3.Job.ID
	})
	require.Zero(t, depRows(t, m, c1.Job.ID), "the rebuild's cleanup removed what it no longer found")
	require.Empty(t, children(t, m, p1.Job.ID))

	// Dropping the shard drops its children's rows.
	src.setHosted(0, false, 0)
	require.NoError(t, m.DropShard(0))
	require.Zero(t, depRows(t, m, c3.Job.ID))
}
