package peer

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// TestReadCodec: a registered query and its answer survive the wire,
// typed nils included; an unregistered query is refused before sending.
func TestReadCodec(t *testing.T) {
	t.Parallel()
	rr, b, err := encodeReadQuery(statemachine.GetJobQuery{ID: "job_1_x"})
	require.NoError(t, err)
	q, rr2, err := decodeReadQuery(b)
	require.NoError(t, err)
	require.Equal(t, statemachine.GetJobQuery{ID: "job_1_x"}, q)
	require.Equal(t, rr, rr2)
	_, _, err = decodeReadQuery(append(b, 0))
	require.ErrorContains(t, err, "trailing bytes")

	for _, v := range []any{nil, (*statemachine.JobView)(nil), &statemachine.JobView{}} {
		out, err := encodeReadResult(v, rr)
		require.NoError(t, err)
		back, err := decodeReadResult(out, rr)
		require.NoError(t, err)
		require.Equal(t, v, back)
	}
	_, err = encodeReadResult("a string", rr)
	require.ErrorContains(t, err, "not *statemachine.JobView")

	_, _, err = encodeReadQuery(statemachine.PeekQuery{Queues: []string{"x"}})
	require.ErrorContains(t, err, "not registered")
	require.Contains(t, ReadKinds(), "ListQueuesQuery")
}

func FuzzDecodeReadQuery(f *testing.F) {
	for _, q := range []any{statemachine.GetJobQuery{ID: "job_0_x"}, statemachine.MovedQuery{ID: "m"}, statemachine.BatchQuery{ID: "b"},
		statemachine.ListQueuesQuery{}, statemachine.DeadQuery{Queue: "q", Before: 5, BeforeID: "x", Limit: 3},
		statemachine.SchedulesQuery{}, statemachine.WorkersQuery{}} {
		_, b, err := encodeReadQuery(q)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte("\x07\x0c\x00\x04kind"))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, rr, err := decodeReadQuery(b)
		if err != nil {
			return
		}
		require.Equal(t, rr.query, reflect.TypeOf(q))
		// A decodable query survives a re-encode unchanged.
		_, again, err := encodeReadQuery(q)
		require.NoError(t, err)
		q2, _, err := decodeReadQuery(again)
		require.NoError(t, err)
		require.Equal(t, q, q2)
	})
}
