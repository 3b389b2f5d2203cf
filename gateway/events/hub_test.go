package events

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// newHub is New for a valid config.
func newHub(t *testing.T, shards, capacity int) *Hub {
	t.Helper()
	h, err := New(Config{Shards: shards, Capacity: capacity})
	require.NoError(t, err)
	return h
}

// TestConfigDefaultsString pins what a Config of 4 shards becomes: the ring
// keeps 65,536 events, as docs/api.md and docs/architecture.md say.
func TestConfigDefaultsString(t *testing.T) {
	t.Parallel()
	c := Config{Shards: 4}.WithDefaults()
	require.Equal(t, "Shards=4\nCapacity=65536\nBytes=4194304\n", fmt.Sprintf("Shards=%d\nCapacity=%d\nBytes=%d\n", c.Shards, c.Capacity, c.Bytes))
	require.NoError(t, c.Validate())
	h, err := New(Config{Shards: 4})
	require.NoError(t, err)
	require.Equal(t, 4, h.Shards())
	require.Zero(t, h.Held(), "nothing is allocated before the first event")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {Shards: -1}, {Shards: 2, Capacity: -1}, {Shards: 1, Bytes: -1}} {
		require.Error(t, c.WithDefaults().Validate(), "%+v", c)
		_, err := New(c)
		require.Error(t, err, "%+v", c)
	}
	require.NoError(t, Config{Shards: 1, Capacity: 1}.WithDefaults().Validate())
}

func feed(h *Hub, shard int, index uint64, n int, queue string) {
	info := &statemachine.AppliedInfo{ShardID: uint64(shard + 1), From: index, Index: index}
	for i := 0; i < n; i++ {
		info.Events = append(info.Events, statemachine.JobEvent{Index: index, Pos: uint32(i), Type: statemachine.EventEnqueued, JobID: "j", Queue: queue})
	}
	h.Applied(info)
}

func drain(t *testing.T, s *Sub) []Item {
	var out []Item
	for {
		items, wait, reset := s.Next(3)
		require.False(t, reset)
		out = append(out, items...)
		if wait != nil {
			return out
		}
	}
}

func TestHubResumeExactlyAndReset(t *testing.T) {
	t.Parallel()
	h := newHub(t, 2, 8)
	h.Start([]uint64{10, 20})
	live, _ := h.Subscribe(nil, Filter{})
	feed(h, 0, 11, 2, "a")
	feed(h, 1, 21, 1, "b")
	feed(h, 0, 12, 1, "a")
	all := drain(t, live)
	require.Len(t, all, 4)

	// Resuming after each item gives exactly the rest.
	for i := range all {
		c, err := DecodeCursor(all[i].Cursor, 2)
		require.NoError(t, err)
		s, reset := h.Subscribe(c, Filter{})
		require.False(t, reset)
		rest := drain(t, s)
		require.Len(t, rest, len(all)-i-1, "after %d", i)
		for k := range rest {
			require.Equal(t, all[i+1+k].Cursor, rest[k].Cursor)
		}
	}
	// A queue filter.
	s, _ := h.Subscribe(Cursor{{10, ^uint32(0)}, {20, ^uint32(0)}}, Filter{Queues: map[string]bool{"b": true}})
	got := drain(t, s)
	require.Len(t, got, 1)
	require.Equal(t, "b", got[0].Event.Queue)

	// Older than the run's start: reset.
	_, reset := h.Subscribe(Cursor{{9, 0}, {20, ^uint32(0)}}, Filter{})
	require.True(t, reset)

	// Overflow the ring (8): the first events fall out, an old cursor resets,
	// a slow live subscriber is told to reset.
	first, _ := DecodeCursor(all[0].Cursor, 2)
	slow, _ := h.Subscribe(nil, Filter{})
	feed(h, 0, 13, 8, "a")
	_, reset = h.Subscribe(first, Filter{})
	require.True(t, reset)
	_, _, reset = slow.Next(100)
	require.False(t, reset, "slow read from the start of the ring: still retained")
	slow2, _ := h.Subscribe(nil, Filter{})
	feed(h, 1, 22, 9, "b")
	_, _, reset = slow2.Next(100)
	require.True(t, reset)
	items, wait, reset := slow2.Next(100)
	require.False(t, reset)
	require.Empty(t, items)
	require.NotNil(t, wait, "live again")
}

func TestCursorDecodeRejectsGarbage(t *testing.T) {
	t.Parallel()
	good := Cursor{{1, 2}, {3, 4}}.Encode()
	c, err := DecodeCursor(good, 2)
	require.NoError(t, err)
	require.Equal(t, Cursor{{1, 2}, {3, 4}}, c)
	for _, bad := range []string{"", "!!", "AA", good + "A", Cursor{{1, 2}}.Encode(), "AQIBAgME_", string(make([]byte, 5000))} {
		_, err := DecodeCursor(bad, 2)
		require.ErrorIs(t, err, ErrBadCursor, bad)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(Cursor{{1, 2}, {3, 4}}.Encode())
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCursor(s, 2)
		if err == nil {
			require.Len(t, c, 2)
			c2, err := DecodeCursor(c.Encode(), 2)
			require.NoError(t, err)
			require.Equal(t, c, c2)
		}
	})
}

// A replica that recovered from a snapshot skipped the events before it:
// a cursor from before the snapshot gets a reset, one after resumes.
func TestHubSnapshotResetsOlderCursors(t *testing.T) {
	t.Parallel()
	h := newHub(t, 1, 8)
	h.Start([]uint64{10})
	feed(h, 0, 11, 1, "a")
	h.Applied(&statemachine.AppliedInfo{ShardID: 1, Index: 500, Reset: true})
	feed(h, 0, 501, 2, "a")
	_, reset := h.Subscribe(Cursor{{11, 0}}, Filter{})
	require.True(t, reset, "a cursor from before the snapshot must reset")
	s, reset := h.Subscribe(Cursor{{500, ^uint32(0)}}, Filter{})
	require.False(t, reset)
	require.Len(t, drain(t, s), 2)
}

// TestHubSnapshotGap: a replica that skips entries (a snapshot install)
// cannot replay their events: old cursors and live subscribers reset.
func TestHubSnapshotGap(t *testing.T) {
	t.Parallel()
	h := newHub(t, 1, 100)
	h.Start([]uint64{10})
	feed(h, 0, 11, 1, "a")
	live, _ := h.Subscribe(nil, Filter{})
	require.Len(t, drain(t, live), 0)
	before := Cursor{{Index: 11, N: 0}}
	s, reset := h.Subscribe(before, Filter{})
	require.False(t, reset)
	require.Empty(t, drain(t, s))
	h.Applied(&statemachine.AppliedInfo{ShardID: 1, From: 12, Index: 12}) // no events: no gap
	feed(h, 0, 50, 1, "a")                                                // entries 13..49 skipped
	_, reset = h.Subscribe(before, Filter{})
	require.True(t, reset, "events 13..49 are unknown")
	_, _, reset = live.Next(10)
	require.True(t, reset)
	after := Cursor{{Index: 50, N: 0}}
	s, reset = h.Subscribe(after, Filter{})
	require.False(t, reset)
	feed(h, 0, 51, 2, "a")
	require.Len(t, drain(t, s), 2)
}

// TestHubShardsFilter: a subscription restricted to some shards (a node
// streaming the shards it hosts to another) checks, reads and moves only
// their positions, and only their skips reset it.
func TestHubShardsFilter(t *testing.T) {
	t.Parallel()
	h := newHub(t, 3, 100)
	h.Start([]uint64{10, 0, 30}) // shard 1 is not hosted here: never fed
	only := Filter{Shards: []bool{true, false, true}}
	// Shard 1's position is not checked (0 is older than anything).
	from := Cursor{{10, ^uint32(0)}, {0, 0}, {30, ^uint32(0)}}
	s, reset := h.Subscribe(from, only)
	require.False(t, reset)
	_, reset = h.Subscribe(from, Filter{})
	require.True(t, reset, "unrestricted, shard 1's position counts")
	_, reset = h.Subscribe(Cursor{{9, 0}, {0, 0}, {30, ^uint32(0)}}, only)
	require.True(t, reset, "shard 0's position is too old")

	feed(h, 0, 11, 2, "a")
	feed(h, 2, 31, 1, "c")
	got := drain(t, s)
	require.Len(t, got, 3)
	c, err := DecodeCursor(got[2].Cursor, 3)
	require.NoError(t, err)
	require.Equal(t, Cursor{{11, 1}, {0, 0}, {31, 0}}, c, "shard 1 stays where it was")

	// Another shard's gap does not reset it; one of its own does.
	other, _ := h.Subscribe(c, Filter{Shards: []bool{true, false, false}})
	h.Applied(&statemachine.AppliedInfo{ShardID: 3, From: 40, Index: 40, Reset: true})
	_, _, reset = other.Next(10)
	require.False(t, reset, "shard 2's snapshot is not this subscription's")
	_, _, reset = s.Next(10)
	require.True(t, reset)
	c = s.Cursor()
	require.Equal(t, Pos{0, 0}, c[1], "a reset moves only its shards to live")
	require.Equal(t, Pos{40, ^uint32(0)}, c[2])
	feed(h, 0, 12, 1, "a")
	require.Len(t, drain(t, other), 1)
}

// A shard that moved away and came back replays, from index 1, entries
// this node applied before: their events are in the ring already and are
// neither appended again nor sent again to a live subscriber; the events
// after them are.
func TestHubReplayAfterShardReturns(t *testing.T) {
	t.Parallel()
	h := newHub(t, 1, 64)
	h.Start([]uint64{0})
	for idx := uint64(1); idx <= 5; idx++ {
		feed(h, 0, idx, 2, "a")
	}
	live, _ := h.Subscribe(nil, Filter{})
	// The new replica replays 1..5, then applies 6 and 7.
	for idx := uint64(1); idx <= 7; idx++ {
		feed(h, 0, idx, 2, "a")
	}
	got := drain(t, live)
	require.Len(t, got, 4)
	require.Equal(t, uint64(6), got[0].Event.Index)
	require.Equal(t, Pos{Index: 7, N: 1}, h.head[0])
	require.Equal(t, uint64(14), h.ring.next-h.ring.first, "each event once in the ring")

	// Resuming from the start of the run gives every event exactly once.
	s, reset := h.Subscribe(Cursor{{Index: 0, N: ^uint32(0)}}, Filter{})
	require.False(t, reset)
	all := drain(t, s)
	require.Len(t, all, 14)
	for i := 1; i < len(all); i++ {
		require.True(t, all[i-1].Event.pos().Less(all[i].Event.pos()))
	}
}
