package mirror

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

func usageRec(n uint32, phase statemachine.UsagePhase, queue, model string, in, cost int64, at int64) statemachine.UsageRecord {
	return statemachine.UsageRecord{N: n, Attempt: 1, Phase: phase, Queue: queue, At: at,
		Usage: statemachine.Usage{InputTokens: in, OutputTokens: in / 2, CacheReadTokens: 1, Model: model, Provider: "p", CostNanos: cost}}
}

// TestMirrorUsageSummary: records are grouped by queue, model, provider or
// a tag; a heartbeat record replaced in a later change counts once, at
// its latest value; the period and the shard list filter; deleting a job
// deletes its records; a rebuild from Pebble gives the same sums.
func TestMirrorUsageSummary(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	ctx := context.Background()
	a, b, c := view(1, "llm.a", "completed", `{}`), view(2, "llm.a", "active", `{}`), view(3, "llm.b", "completed", `{}`)
	b.Job.Tags = []byte(`{"tenant":"globex"}`)
	c.Job.Tags = nil
	feed(t, m, 2,
		statemachine.JobChange{ID: a.Job.ID, Job: &a.Job, State: a.State, NewUsage: []statemachine.UsageRecord{
			usageRec(1, statemachine.PhaseHeartbeat, "llm.a", "m1", 100, 1000, base),
			usageRec(1, statemachine.PhaseHeartbeat, "llm.a", "m1", 150, 1500, base+1), // replaces the first
			usageRec(2, statemachine.PhaseAck, "llm.a", "m1", 10, 100, base+2)}},
		statemachine.JobChange{ID: b.Job.ID, Job: &b.Job, State: b.State, NewUsage: []statemachine.UsageRecord{usageRec(1, statemachine.PhaseHeartbeat, "llm.a", "m2", 7, 70, base)}},
		statemachine.JobChange{ID: c.Job.ID, Job: &c.Job, State: c.State, NewUsage: []statemachine.UsageRecord{usageRec(1, statemachine.PhaseAck, "llm.b", "", 1, 5, base-3600e9)}})
	// b's heartbeat replaced in a later Update.
	feed(t, m, 3, statemachine.JobChange{ID: b.Job.ID, Job: &b.Job, State: b.State, NewUsage: []statemachine.UsageRecord{usageRec(1, statemachine.PhaseHeartbeat, "llm.a", "m2", 9, 90, base+5)}})

	s, err := m.UsageSummary(ctx, UsageFilter{Since: base - 7200e9, GroupBy: "queue"})
	require.NoError(t, err)
	require.Equal(t, UsageGroup{InputTokens: 150 + 10 + 9 + 1, OutputTokens: 75 + 5 + 4, CacheReadTokens: 4, CostNanos: 1500 + 100 + 90 + 5, Jobs: 3, Reports: 4}, s.Totals)
	require.Len(t, s.Groups, 2)
	require.Equal(t, "llm.a", *s.Groups[0].Key)
	require.Equal(t, int64(1690), s.Groups[0].CostNanos)
	require.Equal(t, int64(2), s.Groups[0].Jobs)

	s, err = m.UsageSummary(ctx, UsageFilter{Since: base - 60e9, GroupBy: "model"})
	require.NoError(t, err)
	require.Equal(t, int64(1690), s.Totals.CostNanos, "c's record is older than the period")
	require.Equal(t, []string{"m1", "m2"}, []string{*s.Groups[0].Key, *s.Groups[1].Key})

	s, err = m.UsageSummary(ctx, UsageFilter{Since: base - 7200e9, GroupBy: "tag", TagKey: "tenant"})
	require.NoError(t, err)
	require.Len(t, s.Groups, 3)
	require.Equal(t, "acme", *s.Groups[0].Key)
	require.Equal(t, int64(1600), s.Groups[0].CostNanos)
	require.Equal(t, "globex", *s.Groups[1].Key)
	require.Nil(t, s.Groups[2].Key, "a job without the tag")

	_, err = m.UsageSummary(ctx, UsageFilter{GroupBy: "tag", TagKey: `a"b`})
	require.ErrorIs(t, err, ErrBadFilter)
	s, err = m.UsageSummary(ctx, UsageFilter{Since: 0, Shards: []int{1}})
	require.NoError(t, err)
	require.Zero(t, s.Totals.Reports, "shard 1 holds nothing")

	feed(t, m, 4, statemachine.JobChange{ID: a.Job.ID, Deleted: true})
	s, err = m.UsageSummary(ctx, UsageFilter{Since: 0})
	require.NoError(t, err)
	require.Equal(t, int64(95), s.Totals.CostNanos)

	// A mirror rebuilt from Pebble sums the same.
	b.Usage = []statemachine.UsageRecord{usageRec(1, statemachine.PhaseHeartbeat, "llm.a", "m2", 9, 90, base+5)}
	c.Usage = []statemachine.UsageRecord{usageRec(1, statemachine.PhaseAck, "llm.b", "", 1, 5, base-3600e9)}
	r, err := Open(Config{Path: filepath.Join(t.TempDir(), "mirror.db"), Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	require.NoError(t, r.Start(fakeSource{jobs: []statemachine.JobView{*b, *c}}))
	r.RequestRebuild()
	waitCtx, cancel := context.WithTimeout(ctx, 10e9)
	defer cancel()
	require.NoError(t, r.Caught(waitCtx))
	s2, err := r.UsageSummary(ctx, UsageFilter{Since: 0})
	require.NoError(t, err)
	require.Equal(t, s.Totals, s2.Totals)
}

// TestMirrorUsageSummaryByTime: group_by hour and day bucket the records
// by the UTC hour or day they were reported in, keyed by the bucket's
// start, oldest first, whatever their cost; the buckets add up to the
// totals.
func TestMirrorUsageSummaryByTime(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	ctx := context.Background()
	a, b := view(1, "llm.a", "completed", `{}`), view(2, "llm.b", "completed", `{}`)
	feed(t, m, 2,
		statemachine.JobChange{ID: a.Job.ID, Job: &a.Job, State: a.State, NewUsage: []statemachine.UsageRecord{
			usageRec(1, statemachine.PhaseAck, "llm.a", "m1", 10, 100, base-26*3600e9),  // 2026-02-10T08
			usageRec(2, statemachine.PhaseAck, "llm.a", "m1", 20, 5000, base+59*60e9)}}, // 2026-02-11T10:59
		statemachine.JobChange{ID: b.Job.ID, Job: &b.Job, State: b.State, NewUsage: []statemachine.UsageRecord{
			usageRec(1, statemachine.PhaseAck, "llm.b", "m2", 30, 300, base+3600e9), // 2026-02-11T11:00
			usageRec(2, statemachine.PhaseAck, "llm.b", "m2", 40, 400, base)}})      // 2026-02-11T10:00

	key := func(g UsageGroup) string { return *g.Key }
	s, err := m.UsageSummary(ctx, UsageFilter{Since: 0, GroupBy: "hour"})
	require.NoError(t, err)
	require.Equal(t, []string{"2026-02-10T08:00:00Z", "2026-02-11T10:00:00Z", "2026-02-11T11:00:00Z"},
		[]string{key(s.Groups[0]), key(s.Groups[1]), key(s.Groups[2])}, "oldest first, not by cost")
	require.Equal(t, []int64{100, 5400, 300}, []int64{s.Groups[0].CostNanos, s.Groups[1].CostNanos, s.Groups[2].CostNanos})
	require.Equal(t, int64(2), s.Groups[1].Jobs)
	require.Equal(t, int64(5800), s.Totals.CostNanos)

	s, err = m.UsageSummary(ctx, UsageFilter{Since: 0, GroupBy: "day"})
	require.NoError(t, err)
	require.Len(t, s.Groups, 2)
	require.Equal(t, "2026-02-10T00:00:00Z", key(s.Groups[0]))
	require.Equal(t, "2026-02-11T00:00:00Z", key(s.Groups[1]))
	require.Equal(t, []int64{10, 90}, []int64{s.Groups[0].InputTokens, s.Groups[1].InputTokens})

	s, err = m.UsageSummary(ctx, UsageFilter{Since: base - 3600e9, GroupBy: "day"})
	require.NoError(t, err)
	require.Len(t, s.Groups, 1, "the period bounds the buckets' records")
	require.Equal(t, int64(5700), s.Groups[0].CostNanos)
}
