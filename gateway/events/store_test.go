package events

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
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

// Full chunks are sealed (packed): a ring of enqueue events takes well
// under half of their encoded bytes, and every event reads back as it
// went in, from sealed chunks and the open one, by subscribers at
// different places and after the oldest chunks were dropped.
func TestRingPacksSealedChunks(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Shards: 4, Capacity: 1 << 20, Bytes: 1 << 20})
	require.NoError(t, err)
	h.Start([]uint64{0, 0, 0, 0})
	early, _ := h.Subscribe(nil, Filter{})
	var want []statemachine.JobEvent
	const n = 40000 // ~2.5 MB encoded: the oldest are dropped
	for i := range n {
		idx := uint64(i/4 + 1)
		e := statemachine.JobEvent{Index: idx, Type: statemachine.EventEnqueued, Queue: "emails",
			JobID: router.JobID(i%4, ulid.Make()), State: statemachine.State(1), At: int64(1_700_000_000_000 + i)}
		want = append(want, e)
		h.Applied(&statemachine.AppliedInfo{ShardID: uint64(i%4 + 1), From: idx, Index: idx, Events: []statemachine.JobEvent{e}})
		if i == 100 {
			_, _, reset := early.Next(1) // reads one event now, the rest later
			require.False(t, reset)
		}
	}
	r := &h.ring
	require.Greater(t, len(r.chunks), 3)
	sealed := 0
	for _, c := range r.chunks[:len(r.chunks)-1] {
		require.Nil(t, c.data)
		require.NotNil(t, c.packed)
		sealed++
	}
	require.Nil(t, r.chunks[len(r.chunks)-1].packed, "the newest chunk is open")
	t.Logf("%d events in %d chunks: %d encoded bytes held in %d", r.next-r.first, len(r.chunks), r.bytes, h.Held())
	require.Less(t, h.Held(), r.bytes/2)
	require.Greater(t, r.bytes, int64(900<<10), "the byte bound counts encoded bytes: the ring stays nearly full")

	// The early subscriber fell behind what the ring keeps: it resets.
	_, _, reset := early.Next(10)
	require.True(t, reset)
	// A subscriber from the floor reads every retained event, in order.
	s, reset := h.Subscribe(h.floor, Filter{})
	require.False(t, reset)
	got := drain(t, s)
	require.Len(t, got, int(r.next-r.first))
	for i, it := range got {
		w := want[int(r.first)+i]
		require.Equal(t, Event{Shard: int(r.first+uint64(i)) % 4, JobEvent: w}, it.Event)
	}
	require.Nil(t, s.u.c, "a subscriber at the open chunk keeps no unpacked chunk")
}
