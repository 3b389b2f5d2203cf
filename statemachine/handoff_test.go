package statemachine

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/stretchr/testify/require"
)

func setupHandoff(t *testing.T) *testBundle {
	t.Helper()
	tb := &testBundle{t: t, dir: t.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2)),
		handoff: NewHandoff()}
	tb.open()
	t.Cleanup(func() { _ = tb.sm.Close() })
	return tb
}

// handEntry encodes ops as an entry, with its ID.
func (tb *testBundle) handEntry(ops ...Op) (EntryID, []byte) {
	e := Entry{ID: NewEntryID(tb.now.UnixNano(), tb.rnd.Uint64()), Now: tb.now.UnixNano(), Ops: ops}
	return e.ID, e.Encode(nil)
}

// update applies cmd and checks that dragonboat's result carries no bytes.
func (tb *testBundle) update(cmd []byte) {
	tb.t.Helper()
	tb.index++
	out, err := tb.sm.Update([]sm.Entry{{Index: tb.index, Cmd: cmd}})
	require.NoError(tb.t, err)
	require.Equal(tb.t, ResultApplied, out[0].Result.Value)
	require.Empty(tb.t, out[0].Result.Data, "with a Handoff the results are not encoded")
}

// A proposer's results come through the Handoff, not as bytes; an entry no
// one waits for (a replica applying another node's proposal) hands over
// nothing, and changes the state all the same.
func TestHandoffDeliversResultsInMemory(t *testing.T) {
	t.Parallel()
	tb := setupHandoff(t)

	id, cmd := tb.handEntry(&EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{"n":1}`), JobOptions: DefaultJobOptions()}})
	tb.handoff.Expect(id)
	tb.update(cmd)
	rs, ok := tb.handoff.Take(id)
	require.True(t, ok)
	require.Len(t, rs, 1)
	require.Equal(t, StatusOK, rs[0].Status)
	require.Equal(t, StatePending, rs[0].State)
	_, ok = tb.handoff.Take(id)
	require.False(t, ok, "Take ends the wait")

	unseen := tb.newID()
	id, cmd = tb.handEntry(&EnqueueOp{Job: Job{ID: unseen, Queue: "q", Payload: []byte(`{"n":2}`), JobOptions: DefaultJobOptions()}})
	tb.update(cmd)
	_, ok = tb.handoff.Take(id)
	require.False(t, ok, "no one waited: nothing was kept")
	require.NotNil(t, tb.get(unseen), "the entry applied all the same")

	id, cmd = tb.handEntry(&FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 5})
	tb.handoff.Expect(id)
	tb.update(cmd)
	rs, ok = tb.handoff.Take(id)
	require.True(t, ok)
	require.Len(t, rs[0].Jobs, 2)
	for _, v := range rs[0].Jobs {
		stored := tb.get(v.Job.ID)
		require.Equal(t, StateActive, v.State.State)
		require.Equal(t, stored.Job.Payload, v.Job.Payload)
		require.Equal(t, stored.State.LeaseExpiresAt, v.State.LeaseExpiresAt)
	}
}

// A retried proposal (same entry ID) is applied once: its waiter keeps the
// first attempt's results, and a retry whose first attempt no one saw
// gets the first attempt's results replayed (the jobs reloaded).
func TestHandoffRetriesApplyOnce(t *testing.T) {
	t.Parallel()
	tb := setupHandoff(t)
	for range 3 {
		_, cmd := tb.handEntry(&EnqueueOp{Job: Job{ID: tb.newID(), Queue: "q", Payload: []byte(`{}`), JobOptions: DefaultJobOptions()}})
		tb.update(cmd)
	}
	retry := func(cmd []byte) []byte {
		r := append([]byte(nil), cmd...)
		r[RetryFlagOffset] = 1
		return r
	}

	// The first attempt applied while its proposer waited, then the retry.
	id, cmd := tb.handEntry(&FetchOp{Queues: []string{"q"}, WorkerID: "w1", Count: 1})
	tb.handoff.Expect(id)
	tb.update(cmd)
	tb.update(retry(cmd))
	rs, ok := tb.handoff.Take(id)
	require.True(t, ok)
	require.Len(t, rs[0].Jobs, 1)
	first := rs[0].Jobs[0].Job.ID
	require.Equal(t, uint32(1), tb.get(first).State.Attempt, "claimed once")

	// The first attempt applied before anyone waited here: the retry
	// replays its results.
	id, cmd = tb.handEntry(&FetchOp{Queues: []string{"q"}, WorkerID: "w2", Count: 1})
	tb.update(cmd)
	tb.handoff.Expect(id)
	tb.update(retry(cmd))
	rs, ok = tb.handoff.Take(id)
	require.True(t, ok)
	require.Len(t, rs[0].Jobs, 1)
	second := rs[0].Jobs[0].Job.ID
	require.NotEqual(t, first, second)
	require.Equal(t, "w2", rs[0].Jobs[0].State.WorkerID, "the replayed job is reloaded")
	require.Equal(t, uint32(1), tb.get(second).State.Attempt)

	// A proposer that gave up keeps nothing.
	id, cmd = tb.handEntry(&FetchOp{Queues: []string{"q"}, WorkerID: "w3", Count: 1})
	tb.handoff.Expect(id)
	tb.handoff.Forget(id)
	tb.update(cmd)
	_, ok = tb.handoff.Take(id)
	require.False(t, ok)
	require.Empty(t, tb.handoff.slots)
}

// An Update's applier reuses the previous one's maps and buffers, emptied
// when that Update ended: nothing one Update noted reaches the next, and
// an idle shard holds nothing of its last Update (a large payload's
// buffer, the records its changes pointed to).
func TestApplierReuseStartsEmpty(t *testing.T) {
	t.Parallel()
	tb := &testBundle{t: t, dir: t.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
	tb.sm = New(Config{ShardID: 1, Dir: tb.dir, EmitChanges: true, EmitEvents: true})
	_, err := tb.sm.Open(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tb.sm.Close() })
	tb.enqueue("q", PriorityNormal)
	p := tb.sm.spare
	require.NotNil(t, p.noted, "the maps are kept")
	require.Empty(t, p.noted)
	require.Empty(t, p.dirty)
	require.Nil(t, p.changes)
	require.Nil(t, p.events)
	require.Nil(t, p.b)
	require.NotNil(t, p.scratch, "a small buffer is kept")

	big := make([]byte, 0, 200<<10)
	big = append(big, `{"blob":"`...)
	big = append(big, bytes.Repeat([]byte("x"), 150<<10)...)
	big = append(big, `"}`...)
	tb.enqueue("q", PriorityNormal, func(j *Job) { j.Payload = big })
	require.Nil(t, p.scratch, "a large payload's buffer is not kept")

	b := tb.sm.db.NewIndexedBatch()
	defer b.Close()
	a := newApplier(tb.sm, b)
	require.Same(t, p, a)
	require.Empty(t, a.noted)
	require.Empty(t, a.dirty)
	require.Empty(t, a.ready)
	require.Nil(t, a.changes)
	require.Zero(t, a.jobSeq)
}
