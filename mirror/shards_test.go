package mirror

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

var errNotHosted = errors.New("shard not hosted here")

// shardSource is a node's Pebble state over several shards, some of which
// it may not host (their reads fail, as shard.Host's do).
type shardSource struct {
	n     int
	mu    sync.Mutex
	hosts map[int]bool
	jobs  map[int][]statemachine.JobView // what a rebuild scan finds
	index map[int]uint64
	reads map[int]int // reads per shard
	// gate, when set, holds every rebuild scan until it is closed.
	gate chan struct{}
}

func newShardSource(n int, hosted ...int) *shardSource {
	s := &shardSource{n: n, hosts: map[int]bool{}, jobs: map[int][]statemachine.JobView{}, index: map[int]uint64{}, reads: map[int]int{}}
	for _, sh := range hosted {
		s.hosts[sh] = true
	}
	return s
}

func (s *shardSource) Shards() int { return s.n }

func (s *shardSource) Hosts(sh int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hosts[sh]
}

func (s *shardSource) setHosted(sh int, hosted bool, index uint64, jobs ...statemachine.JobView) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts[sh], s.index[sh], s.jobs[sh] = hosted, index, jobs
}

func (s *shardSource) readsOf(sh int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[sh]
}

func (s *shardSource) Read(sh int, q interface{}) (interface{}, error) {
	if _, scan := q.(statemachine.ScanJobsQuery); scan {
		s.mu.Lock()
		gate := s.gate
		s.mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[sh]++
	if !s.hosts[sh] {
		return nil, errNotHosted
	}
	switch q.(type) {
	case statemachine.OpenedAtQuery:
		return s.index[sh], nil
	case statemachine.ScanJobsQuery:
		return statemachine.ScanPage{Jobs: s.jobs[sh], Index: s.index[sh]}, nil
	}
	return nil, fmt.Errorf("unexpected %T", q)
}

// shardView is job i of shard sh (jobs i and 1000+i share a creation
// time: their order is their IDs').
func shardView(sh, i int, queue string) statemachine.JobView {
	return statemachine.JobView{
		Job:   statemachine.Job{ID: fmt.Sprintf("job_%d_%026d", sh, i), Queue: queue, Payload: []byte(`{}`), JobOptions: statemachine.JobOptions{Priority: statemachine.PriorityNormal}, CreatedAt: base + int64(i%1000)*1e6},
		State: statemachine.JobState{State: statemachine.StatePending},
	}
}

func openShards(t *testing.T, path string, src *shardSource) *Mirror {
	t.Helper()
	m, err := Open(Config{Path: path, Logger: zerolog.Nop(), FlushWindow: 5 * time.Millisecond, Shards: src.n})
	require.NoError(t, err)
	require.NoError(t, m.Start(src))
	t.Cleanup(m.Close)
	return m
}

// feedShard applies jobs to shard sh at index and waits until the mirror
// has them (or ignored them).
func feedShard(t *testing.T, m *Mirror, sh int, index uint64, jobs ...statemachine.JobView) {
	t.Helper()
	var ch []statemachine.JobChange
	for i := range jobs {
		ch = append(ch, statemachine.JobChange{ID: jobs[i].Job.ID, Job: &jobs[i].Job, State: jobs[i].State,
			NewErrors: []statemachine.JobError{{Attempt: 1, Error: "boom", At: base}}})
	}
	m.Applied(&statemachine.AppliedInfo{ShardID: uint64(sh + 1), Index: index, Changes: ch})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Caught(ctx))
}

// shardsOf lists the shards of a search's rows (by ID), in order of
// first appearance, and the row count.
func countByShard(t *testing.T, m *Mirror, f Filter) map[int]int {
	t.Helper()
	out := map[int]int{}
	f.Limit = 1000
	for {
		p, err := m.Search(context.Background(), f)
		require.NoError(t, err)
		for _, r := range p.Jobs {
			var sh int
			_, err := fmt.Sscanf(r.ID, "job_%d_", &sh)
			require.NoError(t, err)
			out[sh]++
		}
		if !p.HasMore {
			return out
		}
		f.Cursor = p.Cursor
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting: %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMirrorShardsFilter: a search restricted to some shards returns the
// rows of exactly those shards, with totals, cursors and the sort values
// that make pages of several mirrors mergeable.
func TestMirrorShardsFilter(t *testing.T) {
	t.Parallel()
	const shards = 12 // shard 1 and shards 10, 11 share the ID prefix "job_1"
	src := newShardSource(shards)
	for sh := 0; sh < shards; sh++ {
		src.hosts[sh] = true
	}
	m := openShards(t, filepath.Join(t.TempDir(), "m.db"), src)
	for sh := 0; sh < shards; sh++ {
		var jobs []statemachine.JobView
		for i := 0; i < 10+sh; i++ {
			q := "a"
			if i%2 == 1 {
				q = "b"
			}
			jobs = append(jobs, shardView(sh, sh*1000+i, q))
		}
		feedShard(t, m, sh, 5, jobs...)
	}
	size := func(sh int) int { return 10 + sh }
	for _, c := range []struct {
		shards []int
		want   []int
	}{
		{nil, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{[]int{1}, []int{1}},
		{[]int{1, 1, 10}, []int{1, 10}},
		{[]int{0, 2, 5}, []int{0, 2, 5}},
		{[]int{0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11}, []int{0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11}}, // the complement
		{[]int{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{[]int{}, nil},
	} {
		got := countByShard(t, m, Filter{Shards: c.shards})
		want := map[int]int{}
		total := 0
		for _, sh := range c.want {
			want[sh] = size(sh)
			total += size(sh)
		}
		require.Equal(t, want, got, "shards %v", c.shards)
		// The total, counted (a cursor-less first page that holds
		// everything counts itself; limit 1 forces the count query).
		p, err := m.Search(context.Background(), Filter{Shards: c.shards, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, total, p.Total, "shards %v", c.shards)
		// With another filter.
		p, err = m.Search(context.Background(), Filter{Shards: c.shards, Queue: "a", Limit: 1})
		require.NoError(t, err)
		half := 0
		for _, sh := range c.want {
			half += (size(sh) + 1) / 2
		}
		require.Equal(t, half, p.Total, "shards %v, queue a", c.shards)
	}
	_, err := m.Search(context.Background(), Filter{Shards: []int{12}})
	require.ErrorIs(t, err, ErrBadFilter)
	require.ErrorIs(t, (&Filter{Shards: []int{-1}}).Check(shards), ErrBadFilter)
	require.NoError(t, (&Filter{Shards: []int{3}}).Check(shards))
	require.ErrorIs(t, (&Filter{Limit: 1001}).Check(shards), ErrBadFilter)

	// Two restricted searches merged by (sort value, ID) and cut at the
	// limit give the unrestricted page, and its last row's cursor
	// continues both: a walk of merged pages is the unrestricted walk.
	for _, desc := range []bool{true, false} {
		var whole, merged []string
		cur := ""
		for {
			p, err := m.Search(context.Background(), Filter{Limit: 7, Desc: desc, Cursor: cur, Sort: "created_at"})
			require.NoError(t, err)
			require.Len(t, p.SortValues, len(p.Jobs))
			for _, r := range p.Jobs {
				whole = append(whole, r.ID)
			}
			if !p.HasMore {
				break
			}
			cur = p.Cursor
		}
		cur = ""
		for {
			type hit struct {
				v  int64
				id string
			}
			var hits []hit
			more := false
			for _, part := range [][]int{{0, 2, 4, 6, 8, 10}, {1, 3, 5, 7, 9, 11}} {
				p, err := m.Search(context.Background(), Filter{Shards: part, Limit: 7, Desc: desc, Cursor: cur})
				require.NoError(t, err)
				for i, r := range p.Jobs {
					hits = append(hits, hit{p.SortValues[i], r.ID})
				}
				more = more || p.HasMore
			}
			sort.Slice(hits, func(i, j int) bool {
				a, b := hits[i], hits[j]
				if desc {
					a, b = b, a
				}
				return a.v < b.v || a.v == b.v && a.id < b.id
			})
			if len(hits) > 7 {
				hits, more = hits[:7], true
			}
			for _, h := range hits {
				merged = append(merged, h.id)
			}
			if !more {
				break
			}
			cur = CursorAfter(hits[len(hits)-1].v, hits[len(hits)-1].id)
		}
		require.Equal(t, whole, merged, "desc %v", desc)
		require.Len(t, whole, 12*10+66)
	}
}

// TestMirrorDropShard: DropShard deletes the shard's rows, errors and
// applied index; events queued or arriving for it are ignored while the
// source does not host it; once it does again (an event, or the periodic
// check) the shard is rebuilt from Pebble, and Holds says when it is whole.
func TestMirrorDropShard(t *testing.T) {
	t.Parallel()
	src := newShardSource(4, 0, 1, 2, 3)
	m := openShards(t, filepath.Join(t.TempDir(), "m.db"), src)
	for sh := 0; sh < 4; sh++ {
		feedShard(t, m, sh, 10, shardView(sh, 1, "q"), shardView(sh, 2, "q"))
	}
	require.Equal(t, map[int]int{0: 2, 1: 2, 2: 2, 3: 2}, countByShard(t, m, Filter{}))

	// Stop hosting shard 2: an event queued just before the drop is ignored.
	src.setHosted(2, false, 0)
	m.Applied(&statemachine.AppliedInfo{ShardID: 3, Index: 11, Changes: []statemachine.JobChange{{ID: "job_2_" + fmt.Sprintf("%026d", 3), Job: &ptr(shardView(2, 3, "q")).Job, State: shardView(2, 3, "q").State}}})
	require.NoError(t, m.DropShard(2))
	require.False(t, m.Holds(2))
	require.True(t, m.Holds(1))
	feedShard(t, m, 2, 12, shardView(2, 4, "q")) // not hosted: ignored
	feedShard(t, m, 0, 11, shardView(0, 3, "q")) // the queue is past both
	require.Equal(t, map[int]int{0: 3, 1: 2, 3: 2}, countByShard(t, m, Filter{}))
	var n int
	require.NoError(t, m.rdb.QueryRow(`SELECT count(*) FROM job_errors WHERE job_id LIKE 'job_2_%'`).Scan(&n))
	require.Zero(t, n, "the shard's errors are gone")
	require.NoError(t, m.rdb.QueryRow(`SELECT count(*) FROM mirror_state WHERE shard = 2`).Scan(&n))
	require.Zero(t, n, "the shard's applied index is gone")
	require.Zero(t, m.Lag()[2], "a shard not kept here has no lag")
	require.NoError(t, m.DropShard(2), "dropping twice is harmless")
	require.Error(t, m.DropShard(4))

	// Hosted again: an event of the shard triggers a rebuild from Pebble,
	// which has what happened meanwhile.
	src.setHosted(2, true, 20, shardView(2, 2, "q"), shardView(2, 4, "q"), shardView(2, 5, "q"))
	m.Applied(&statemachine.AppliedInfo{ShardID: 3, Index: 21, Changes: []statemachine.JobChange{{ID: shardView(2, 6, "q").Job.ID, Job: &ptr(shardView(2, 6, "q")).Job, State: shardView(2, 6, "q").State}}})
	eventually(t, "shard 2 refilled", func() bool { return m.Holds(2) })
	feedShard(t, m, 2, 22, shardView(2, 7, "q"))
	require.Equal(t, map[int]int{2: 4}, countByShard(t, m, Filter{Shards: []int{2}}), "the scan's three jobs and the later event")
	p, err := m.Search(context.Background(), Filter{JobIDPrefix: shardView(2, 1, "q").Job.ID})
	require.NoError(t, err)
	require.Empty(t, p.Jobs, "a job deleted while the shard was elsewhere is not resurrected")

	// Hosted again with no event at all: the periodic check notices.
	src.setHosted(3, false, 0)
	require.NoError(t, m.DropShard(3))
	require.Empty(t, countByShard(t, m, Filter{Shards: []int{3}}))
	src.setHosted(3, true, 30, shardView(3, 9, "q"))
	eventually(t, "shard 3 refilled without events", func() bool { return m.Holds(3) })
	require.Equal(t, map[int]int{3: 1}, countByShard(t, m, Filter{Shards: []int{3}}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Caught(ctx))
}

func ptr[T any](v T) *T { return &v }

// TestMirrorStartsWithoutSomeShards: a node that does not host every shard
// starts its mirror (rows left from when it hosted a shard are dropped),
// never spins reading the shards it lacks, reports no lag for them, and a
// rebuild of a shard the node has stopped hosting drops it instead of
// retrying forever.
func TestMirrorStartsWithoutSomeShards(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	all := newShardSource(4, 0, 1, 2, 3)
	m, err := Open(Config{Path: path, Logger: zerolog.Nop(), FlushWindow: 5 * time.Millisecond, Shards: 4})
	require.NoError(t, err)
	require.NoError(t, m.Start(all))
	for sh := 0; sh < 4; sh++ {
		feedShard(t, m, sh, 10, shardView(sh, 1, "q"))
	}
	m.Close()

	src := newShardSource(4, 0, 1, 3)
	for _, sh := range []int{0, 1, 3} {
		src.setHosted(sh, true, 10, shardView(sh, 1, "q")) // the mirror is up to date with these
	}
	m = openShards(t, path, src)
	require.Equal(t, map[int]int{0: 1, 1: 1, 3: 1}, countByShard(t, m, Filter{}))
	require.False(t, m.Holds(2))
	for i := 0; i < 5; i++ {
		feedShard(t, m, 2, uint64(20+i), shardView(2, 5+i, "q"))
	}
	m.RequestRebuild()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Caught(ctx))
	require.Equal(t, []int64{0, 0, 0, 0}, m.Lag())
	require.Equal(t, 1, src.readsOf(2), "one read at Start, none after: the mirror asks Hosts")
	require.Equal(t, map[int]int{0: 1, 1: 1, 3: 1}, countByShard(t, m, Filter{}))

	// Shard 1 goes away without DropShard: its rebuild's read fails and the
	// shard is dropped, not retried forever.
	src.setHosted(1, false, 0)
	m.RequestRebuild()
	// The drop stops holding the shard first (reads stop using its rows),
	// then deletes them.
	eventually(t, "shard 1 dropped", func() bool { return !m.Holds(1) && countByShard(t, m, Filter{})[1] == 0 })
	require.Equal(t, map[int]int{0: 1, 3: 1}, countByShard(t, m, Filter{}))
	require.False(t, m.dirty[1].Load(), "no retry is pending (a retry keeps the shard dirty)")
	require.Zero(t, m.Lag()[1])
}

// TestMirrorResetHoldsNothingUntilRebuilt: a snapshot that replaces a
// shard's state (Reset: a replica that joined or fell behind) leaves the
// mirror's rows of it from another state; Holds is false from that moment
// until the rebuild from Pebble has finished, so a search asks a node
// that holds the shard instead of answering from them.
func TestMirrorResetHoldsNothingUntilRebuilt(t *testing.T) {
	t.Parallel()
	src := newShardSource(2, 0, 1)
	m := openShards(t, filepath.Join(t.TempDir(), "m.db"), src)
	feedShard(t, m, 1, 10, shardView(1, 1, "q"))
	require.True(t, m.Holds(1))

	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the mirror closes (cleanups run last first): a failed check must not leave the rebuild waiting
	src.mu.Lock()
	src.gate, src.index[1], src.jobs[1] = gate, 50, []statemachine.JobView{shardView(1, 2, "q"), shardView(1, 3, "q")}
	src.mu.Unlock()
	m.Applied(&statemachine.AppliedInfo{ShardID: 2, From: 50, Index: 50, Reset: true})
	require.False(t, m.Holds(1), "the rows are another state's until the rebuild")
	eventually(t, "the rebuild scans", func() bool { return src.readsOf(1) > 0 })
	require.False(t, m.Holds(1), "a rebuild under way holds nothing yet")
	require.True(t, m.Holds(0), "other shards are untouched")
	open()
	eventually(t, "shard 1 rebuilt", func() bool { return m.Holds(1) })
	require.Equal(t, map[int]int{1: 2}, countByShard(t, m, Filter{Shards: []int{1}}))
}

// TestMirrorRowidsKeepAShardTogether: a new row's rowid is its shard's
// number in the high bits and a sequence in the low ones, so a shard's
// rows (its queues') lie together in the table, in the order they came;
// an update keeps the rowid, and a reopened mirror goes on after the last
// one (a rowid given twice would fail the write).
func TestMirrorRowidsKeepAShardTogether(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mirror.db")
	src := newShardSource(3, 0, 1, 2)
	m := openShards(t, path, src)
	feedShard(t, m, 2, 4, shardView(2, 1, "c"))
	feedShard(t, m, 2, 5, shardView(2, 2, "c"))
	feedShard(t, m, 0, 5, shardView(0, 1, "a"))
	feedShard(t, m, 2, 6, shardView(2, 3, "c"))
	upd := shardView(2, 1, "c")
	upd.State.State = statemachine.StateActive
	feedShard(t, m, 2, 7, upd)
	m.Close()
	m = openShards(t, path, src)
	feedShard(t, m, 2, 8, shardView(2, 4, "c"))
	feedShard(t, m, 0, 8, shardView(0, 2, "a"))

	rows, err := m.db.Query(`SELECT id, shard, rowid FROM jobs ORDER BY rowid`)
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id string
		var sh int
		var rowid int64
		require.NoError(t, rows.Scan(&id, &sh, &rowid))
		require.Equal(t, int64(sh), rowid>>rowidSeqBits, "%s: rowid %x", id, rowid)
		got = append(got, fmt.Sprintf("%s:%d", id[len(id)-1:], rowid&(1<<rowidSeqBits-1)))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"1:1", "2:2", "1:1", "2:2", "3:3", "4:4"}, got,
		"shard 0's rows, then shard 2's, each in the order they came (the update of 2/1 kept its rowid; the reopened mirror went on after the table's last)")
}
