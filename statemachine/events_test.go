package statemachine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/stretchr/testify/require"
)

type eventRecorder struct{ events []JobEvent }

func (r *eventRecorder) Applied(info *AppliedInfo) { r.events = append(r.events, info.Events...) }

func setupEvents(t *testing.T) (*testBundle, *eventRecorder) {
	tb := &testBundle{t: t, dir: t.TempDir(), now: time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC), rnd: rand.New(rand.NewPCG(1, 2))}
	rec := &eventRecorder{}
	tb.sm = New(Config{ShardID: 1, Dir: tb.dir, Listener: rec, EmitEvents: true})
	idx, err := tb.sm.Open(nil)
	require.NoError(t, err)
	tb.index = idx
	t.Cleanup(func() { _ = tb.sm.Close() })
	return tb, rec
}

func eventTypes(evs []JobEvent, id string) []string {
	var out []string
	for _, e := range evs {
		if e.JobID == id {
			out = append(out, e.Type.String()+"/"+e.State.String())
		}
	}
	return out
}

// TestStateMachineEvents: each transition emits its event, in order, with
// the facts a subscriber needs; the per-attempt facts land in the error
// records and the state for the job's timeline.
func TestStateMachineEvents(t *testing.T) {
	t.Parallel()
	tb, rec := setupEvents(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 2; j.Backoff = BackoffFixed; j.BaseDelayMs = 1000 })
	require.Len(t, tb.fetch(1, "q"), 1)
	started := tb.now.UnixNano()
	tb.advance(time.Second)
	r := tb.one(&FailOp{JobID: id, Error: "boom"})
	require.Equal(t, StateRetrying, r.State)
	failedAt := tb.now.UnixNano()
	tb.advance(time.Second)
	require.Equal(t, uint32(1), tb.one(&PromoteOp{}).Count)
	require.Len(t, tb.fetch(1, "q"), 1)
	hb := tb.one(&HeartbeatOp{WorkerID: "w1", Jobs: []HeartbeatJob{{JobID: id, Progress: []byte(`{"current":1,"total":2}`)}}})
	require.Equal(t, HeartbeatOK, hb.Heartbeats[0])
	require.Equal(t, StatusOK, tb.one(&AckOp{JobID: id}).Status)

	require.Equal(t, []string{"enqueued/pending", "started/active", "failed/active", "retrying/retrying", "enqueued/pending",
		"started/active", "progress/active", "completed/completed"}, eventTypes(rec.events, id))
	for i, e := range rec.events {
		want := uint32(0)
		if i == 3 {
			want = 1 // failed and retrying come from one entry
		}
		require.Equal(t, want, e.Pos, "event %d", i)
	}
	require.Equal(t, "boom", rec.events[2].Error)
	require.Equal(t, "w1", rec.events[1].WorkerID)
	require.Equal(t, uint32(2), rec.events[5].Attempt)
	require.Equal(t, failedAt+1e9, rec.events[3].DueAt)
	require.JSONEq(t, `{"current":1,"total":2}`, string(rec.events[6].Progress))

	v := tb.get(id)
	require.Len(t, v.Errors, 1)
	require.Equal(t, started, v.Errors[0].StartedAt)
	require.Equal(t, "w1", v.Errors[0].WorkerID)
	require.Equal(t, failedAt+1e9, v.Errors[0].RetryAt)
	require.NotZero(t, v.State.ProgressAt)

	// Several events in one entry are numbered within it; a failure out of
	// attempts is failed then dead; delete and move say so.
	a := tb.enqueue("q", PriorityNormal, func(j *Job) { j.MaxRetries = 0 })
	b := tb.enqueue("q", PriorityNormal)
	rec.events = nil
	rs := tb.apply(&FetchOp{Queues: []string{"q"}, WorkerID: "w2", Count: 2}, &FailOp{JobID: a, Error: "x"},
		&MoveJobOp{JobID: b, Queue: "q2"}, &DeleteJobOp{JobID: b})
	require.Len(t, rs[0].Jobs, 2)
	var got []string
	for i, e := range rec.events {
		require.Equal(t, uint32(i), e.Pos)
		got = append(got, fmt.Sprintf("%s %s", e.JobID[len(e.JobID)-4:], e.Type))
	}
	require.Equal(t, []string{a[len(a)-4:] + " started", b[len(b)-4:] + " started", a[len(a)-4:] + " failed",
		a[len(a)-4:] + " dead", b[len(b)-4:] + " deleted"}, got, "b is active: the move is refused, the delete is not")
	require.Equal(t, "max_retries", rec.events[3].Reason)
}

// TestStateMachineEventsDeterministic: one log gives the same events
// whatever the Update batching (the event cursor relies on it).
func TestStateMachineEventsDeterministic(t *testing.T) {
	t.Parallel()
	a, ra := setupEvents(t)
	a.rnd = rand.New(rand.NewPCG(7, 7*7919))
	randomLog(a, 400)
	require.NotEmpty(t, ra.events)
	c, rc := setupEvents(t)
	for i := 0; i < len(a.log); {
		n := 1 + c.rnd.IntN(7)
		var ents []sm.Entry
		for ; n > 0 && i < len(a.log); n, i = n-1, i+1 {
			c.index++
			ents = append(ents, sm.Entry{Index: c.index, Cmd: a.log[i]})
		}
		_, err := c.sm.Update(ents)
		require.NoError(t, err)
	}
	require.Equal(t, ra.events, rc.events)
	// Positions only grow.
	for i := 1; i < len(ra.events); i++ {
		p, q := ra.events[i-1], ra.events[i]
		require.True(t, q.Index > p.Index || (q.Index == p.Index && q.Pos == p.Pos+1), "event %d", i)
	}
}
