package statemachine

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStateMachineHeartbeatChecksAttempt: a heartbeat job that names an
// attempt other than the lease's is lost and changes nothing (no lease
// extension, no checkpoint overwrite); the right attempt extends it.
func TestStateMachineHeartbeatChecksAttempt(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.LeaseSeconds = 10 })
	jobs := tb.fetch(1, "q")
	require.Len(t, jobs, 1)
	worker := jobs[0].State.WorkerID
	hb := tb.one(&HeartbeatOp{WorkerID: worker, Jobs: []HeartbeatJob{{JobID: id, Attempt: 1, Checkpoint: []byte(`{"offset":1}`)}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatOK}, hb.Heartbeats)

	tb.advance(5 * time.Second)
	hb = tb.one(&HeartbeatOp{WorkerID: worker, Jobs: []HeartbeatJob{{JobID: id, Attempt: 2, Checkpoint: []byte(`{"offset":666}`)}}})
	require.Equal(t, []HeartbeatStatus{HeartbeatLost}, hb.Heartbeats)
	require.JSONEq(t, `{"offset":1}`, string(tb.get(id).State.Checkpoint), "a wrong attempt overwrites nothing")
	tb.advance(5 * time.Second)
	require.Equal(t, uint32(1), tb.one(&ReclaimOp{}).Count, "a wrong attempt extends no lease")
}

// TestStateMachineHeartbeatOldFormat: a heartbeat op encoded before
// attempts were appended (as entries already in Raft logs are) decodes
// with no attempts and applies as it always did; one with attempts
// round-trips.
func TestStateMachineHeartbeatOldFormat(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal, func(j *Job) { j.LeaseSeconds = 10 })
	worker := tb.fetch(1, "q")[0].State.WorkerID

	// The old body, written by hand: worker, count, then per job its ID,
	// progress and checkpoint, each length-prefixed.
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	body := str(nil, worker)
	body = binary.AppendUvarint(body, 1)
	body = str(body, id)
	body = str(body, `{"current":1}`)
	body = str(body, `{"offset":5}`)
	op, err := decodeOp(OpHeartbeat, body)
	require.NoError(t, err)
	require.Equal(t, &HeartbeatOp{WorkerID: worker, Jobs: []HeartbeatJob{{JobID: id, Progress: []byte(`{"current":1}`), Checkpoint: []byte(`{"offset":5}`)}}}, op)
	require.Equal(t, body, op.appendBody(nil), "without attempts the encoding is the old one")

	tb.advance(9 * time.Second)
	hb := tb.one(op)
	require.Equal(t, []HeartbeatStatus{HeartbeatOK}, hb.Heartbeats)
	tb.advance(9 * time.Second)
	require.Zero(t, tb.one(&ReclaimOp{}).Count, "the old-format heartbeat extended the lease")
	require.JSONEq(t, `{"offset":5}`, string(tb.get(id).State.Checkpoint))

	withAttempts := &HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: "a", Attempt: 3}, {JobID: "b"}}}
	got, err := decodeOp(OpHeartbeat, withAttempts.appendBody(nil))
	require.NoError(t, err)
	require.Equal(t, withAttempts, got)
	// A trailing list that does not match the jobs is refused.
	bad := append((&HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: "a"}}}).appendBody(nil), 2, 1, 1)
	_, err = decodeOp(OpHeartbeat, bad)
	require.Error(t, err)
}
