package statemachine

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/internal/intern"
)

// Entries decoded for apply share one copy of each queue and worker name;
// the names read the same as without the interner, and it stops growing
// at intern.Max.
func TestDecodeEntryInternsNames(t *testing.T) {
	t.Parallel()
	var in intern.Table
	fetch := func(w string) *FetchOp {
		e := Entry{ID: NewEntryID(1, 2), Now: 3, Ops: []Op{&FetchOp{Queues: []string{"emails", "sms"}, WorkerID: w, Hostname: "h1", Count: 1}}}
		got, err := decodeEntry(e.Encode(nil), &in)
		require.NoError(t, err)
		plain, err := DecodeEntry(e.Encode(nil))
		require.NoError(t, err)
		require.Equal(t, plain.Ops, got.Ops)
		return got.Ops[0].(*FetchOp)
	}
	a, b := fetch("w1"), fetch("w1")
	require.Equal(t, unsafe.StringData(a.Queues[0]), unsafe.StringData(b.Queues[0]))
	require.Equal(t, unsafe.StringData(a.WorkerID), unsafe.StringData(b.WorkerID))

	for i := range intern.Max + 10 {
		in.Get(fmt.Appendf(nil, "worker-%d", i))
	}
	require.Equal(t, intern.Max, in.Len())
	require.Equal(t, "worker-4100", in.Get([]byte("worker-4100")), "past the bound a name is still read")
}
