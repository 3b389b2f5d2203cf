package peer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
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

// readLocal hosts some shards and answers their reads with "local-<sh>".
type readLocal struct{ hosts map[int]bool }

func (f readLocal) Shards() int                { return 4 }
func (f readLocal) Hosts(sh int) bool          { return f.hosts[sh] }
func (readLocal) Watch(string) <-chan struct{} { return nil }
func (readLocal) Fetchable(string) bool        { return false }
func (readLocal) ThrottledUntil(string) int64  { return 0 }
func (f readLocal) Read(sh int, _ any) (any, error) {
	return []statemachine.QueueInfo{{Name: "local-" + strconv.Itoa(sh)}}, nil
}
func (f readLocal) Propose(context.Context, int, ...statemachine.Op) ([]statemachine.Result, error) {
	return nil, nil
}

// TestReadEach: hosted shards are read locally, the others from a node
// hosting them, and the answers come back in shard order.
func TestReadEach(t *testing.T) {
	var remote atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remote.Add(1)
		sh := strings.Split(r.URL.Path, "/")[4]
		out, err := encodeReadResult([]statemachine.QueueInfo{{Name: "remote-" + sh}}, remoteReads["ListQueuesQuery"])
		require.NoError(t, err)
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := New(Config{Targets: func(int) []string { return []string{addr} }})
	defer c.Close()
	out, err := c.ReadEach(readLocal{hosts: map[int]bool{0: true, 2: true}}, func(int) any { return statemachine.ListQueuesQuery{} })
	require.NoError(t, err)
	var names []string
	for _, v := range out {
		names = append(names, v.([]statemachine.QueueInfo)[0].Name)
	}
	require.Equal(t, []string{"local-0", "remote-1", "local-2", "remote-3"}, names)
	require.Equal(t, int32(2), remote.Load())
}
