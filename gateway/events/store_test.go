package events

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// Every field of an event comes back from its record as it went in, nil
// and empty progress apart.
func TestEventRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for _, e := range []statemachine.JobEvent{
		{},
		{Index: 1 << 40, Pos: 1<<32 - 1, Type: statemachine.EventMoved, JobID: "00A1", Queue: "ns:q", FromQueue: "old",
			MovedTo: "01B2", State: statemachine.State(3), Attempt: 7, At: -5, WorkerID: "w-1", Error: strings.Repeat("x", 1024),
			Reason: "why", Progress: []byte(`{"p":1}`), DueAt: 1 << 62},
		{Type: statemachine.EventProgress, Progress: []byte{}},
	} {
		got := decodeEvent(encodeEvent(nil, 3, &e))
		require.Equal(t, Event{Shard: 3, JobEvent: e}, got)
	}
}

func FuzzEventRecord(f *testing.F) {
	f.Add(uint64(1), uint32(2), "q", "from", "id", "err", []byte("{}"), int64(-1))
	f.Fuzz(func(t *testing.T, idx uint64, pos uint32, q, from, id, errs string, prog []byte, at int64) {
		e := statemachine.JobEvent{Index: idx, Pos: pos, Queue: q, FromQueue: from, JobID: id, Error: errs, Progress: prog, At: at}
		got := decodeEvent(encodeEvent(nil, 1, &e))
		require.Equal(t, Event{Shard: 1, JobEvent: e}, got)
	})
}

// The ring holds at most its byte bound of events (the newest), frees the
// chunks it no longer needs, and an event larger than the bound is still
// kept alone; a cursor from before what it dropped resets.
func TestHubBytesBound(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Shards: 2, Capacity: 1 << 20, Bytes: 256 << 10})
	require.NoError(t, err)
	h.Start([]uint64{0, 0})
	big := strings.Repeat("e", 1000)
	for idx := uint64(1); idx <= 2000; idx++ {
		h.Applied(&statemachine.AppliedInfo{ShardID: 1, From: idx, Index: idx, Events: []statemachine.JobEvent{
			{Index: idx, Type: statemachine.EventFailed, JobID: "j", Queue: "a", Error: big}}})
	}
	r := &h.ring
	require.LessOrEqual(t, r.bytes, int64(256<<10))
	require.Greater(t, r.bytes, int64(200<<10), "the ring stays nearly full")
	require.LessOrEqual(t, h.Held(), int64(256<<10)+chunkBytes, "at most one chunk beyond the bound")
	require.Equal(t, uint64(2000), r.next)
	require.Equal(t, Pos{Index: r.first, N: 0}, h.floor[0], "the floor is the last event dropped")

	_, reset := h.Subscribe(Cursor{{Index: 1, N: 0}, {}}, Filter{})
	require.True(t, reset)
	s, reset := h.Subscribe(h.floor, Filter{})
	require.False(t, reset)
	got := drain(t, s)
	require.Len(t, got, int(r.next-r.first))
	require.Equal(t, uint64(2000), got[len(got)-1].Event.Index)
	require.Equal(t, big, got[0].Event.Error)

	// One event larger than the whole bound: kept, alone.
	huge := strings.Repeat("h", 300<<10)
	h.Applied(&statemachine.AppliedInfo{ShardID: 2, From: 1, Index: 1, Events: []statemachine.JobEvent{
		{Index: 1, Type: statemachine.EventFailed, JobID: "k", Queue: "b", Error: huge}}})
	require.Equal(t, uint64(1), r.next-r.first)
	require.Len(t, r.chunks, 1)
	s, _ = h.Subscribe(h.floor, Filter{})
	got = drain(t, s)
	require.Len(t, got, 1)
	require.Equal(t, huge, got[0].Event.Error)
}

// Filters read a record's type and queues without decoding it: the same
// answers as on decoded events.
func TestFilterOnRecords(t *testing.T) {
	t.Parallel()
	evs := []statemachine.JobEvent{
		{Type: statemachine.EventEnqueued, Queue: "a"},
		{Type: statemachine.EventMoved, Queue: "b", FromQueue: "a"},
		{Type: statemachine.EventCompleted, Queue: "t1/x"},
		{Type: statemachine.EventCompleted, Queue: "c"},
	}
	for _, tc := range []struct {
		f    Filter
		want []bool
	}{
		{Filter{}, []bool{true, true, true, true}},
		{Filter{Queues: map[string]bool{"a": true}}, []bool{true, true, false, false}},
		{Filter{Types: map[statemachine.EventType]bool{statemachine.EventCompleted: true}}, []bool{false, false, true, true}},
		{Filter{Namespace: "t1"}, []bool{false, false, true, false}},
	} {
		for i := range evs {
			_, _, r := decodeHead(encodeEvent(nil, 0, &evs[i]))
			require.Equal(t, tc.want[i], tc.f.matchRec(r), "%+v on %+v", tc.f, evs[i])
		}
	}
}

// BenchmarkHubAppliedAndRead: one entry of 3 events appended and read back
// by one subscriber filtering on a queue.
func BenchmarkHubAppliedAndRead(b *testing.B) {
	h, err := New(Config{Shards: 1})
	require.NoError(b, err)
	h.Start([]uint64{0})
	s, _ := h.Subscribe(nil, Filter{Queues: map[string]bool{"emails": true}})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		idx := uint64(i + 1)
		info := &statemachine.AppliedInfo{ShardID: 1, From: idx, Index: idx, Events: []statemachine.JobEvent{
			{Index: idx, Pos: 0, Type: statemachine.EventEnqueued, JobID: "01JDQ8Z6W4Y5C9P4Q2H6R8T0VX", Queue: "emails", At: 1},
			{Index: idx, Pos: 1, Type: statemachine.EventStarted, JobID: "01JDQ8Z6W4Y5C9P4Q2H6R8T0VX", Queue: "emails", WorkerID: "w1", Attempt: 1},
			{Index: idx, Pos: 2, Type: statemachine.EventCompleted, JobID: "01JDQ8Z6W4Y5C9P4Q2H6R8T0VX", Queue: "other"},
		}}
		h.Applied(info)
		for {
			if items, _, _ := s.Next(16); len(items) == 0 {
				break
			}
		}
	}
}
