package statemachine

import (
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/stretchr/testify/require"
)

func FuzzDecodeEntry(f *testing.F) {
	e := Entry{ID: NewEntryID(1, 2), Now: 3, Ops: []Op{
		&EnqueueOp{Job: Job{ID: "job_0_x", Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{Priority: PriorityHigh, Backoff: BackoffFixed}}},
		&FetchOp{Queues: []string{"a", "b"}, WorkerID: "w", Count: 5},
		&AckOp{JobID: "job_0_x", Holder: Holder{WorkerID: "w", Attempt: 1}, Result: []byte(`1`)},
		&AckFetchOp{Ack: AckOp{JobID: "job_0_x", Holder: Holder{WorkerID: "w", Attempt: 1}}, Fetch: FetchOp{Queues: []string{"a"}, WorkerID: "w", Count: 2}},
		&AcksFetchOp{Acks: 3, Fetch: FetchOp{Queues: []string{"a"}, WorkerID: "w", Count: 2}},
		&FailOp{JobID: "j", Error: "e", Backtrace: "b"},
		&UnclaimOp{JobID: "job_0_x", Holder: Holder{WorkerID: "w", Attempt: 1}},
		&HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: "j", Progress: []byte(`{}`)}}},
		&HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: "j", Attempt: 2}, {JobID: "k"}}},
		&CancelOp{JobID: "j"}, &PromoteOp{Limit: 3}, &ReclaimOp{}, &PauseQueueOp{Queue: "q"}, &ResumeQueueOp{Queue: "q"}, &PruneDedupOp{Before: 9},
	}}
	f.Add(e.Encode(nil))
	imports := Entry{ID: NewEntryID(1, 3), Now: 3, Ops: importAIOpsV1()}
	f.Add(imports.Encode(nil))
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeEntry(b)
		if err != nil {
			return
		}
		// A decodable entry survives a re-encode unchanged (overlong
		// varints may shrink, the meaning may not).
		again, err := DecodeEntry(got.Encode(nil))
		require.NoError(t, err)
		require.Equal(t, got, again)
	})
}

func TestEntryRoundTrip(t *testing.T) {
	t.Parallel()
	e := Entry{ID: NewEntryID(10, 20), Now: 30, Ops: []Op{&CancelOp{JobID: "a"}, &FetchOp{Queues: []string{"q"}, Count: 2},
		&SetProviderOp{Provider: Provider{Namespace: "ns", Name: "p", RPM: 1, InputTPM: 2, OutputTPM: 3}, Delete: true},
		&LinkProviderOp{Queue: "q", Provider: "p"}, &ProviderMemberOp{Namespace: "ns", Member: ProviderMember{Name: "p", Shard: 3, Gen: 9, In: true}},
		&ProviderShareOp{Namespace: "ns", Name: "p", Gen: 1 << 50, Members: []uint32{0, 3}, Share: ProviderShare{RPM: 7, InputTPM: -1, OutputTPM: 9}, Raise: true}}}
	b := e.Encode(nil)
	got, err := DecodeEntry(b)
	require.NoError(t, err)
	require.Equal(t, e.ID, got.ID)
	require.Equal(t, e.Now, got.Now)
	require.Equal(t, e.Ops, got.Ops)
}

// An entry's enqueues and acks decode into shared slices, other ops each
// on its own, all through one decoder: interleaved, each comes back as
// sent, and no op shares another's memory.
func TestEntryRoundTripSharedSlices(t *testing.T) {
	t.Parallel()
	ack := func(id string, attempt uint32) *AckOp {
		return &AckOp{JobID: id, Holder: Holder{WorkerID: "w", Attempt: attempt}, Result: []byte(`"` + id + `"`), StepStatus: "continue"}
	}
	enq := func(id, q string) *EnqueueOp {
		return &EnqueueOp{Job: Job{ID: id, Queue: q, Payload: []byte(`{"id":"` + id + `"}`)}}
	}
	e := Entry{ID: NewEntryID(1, 2), Now: 3, Ops: []Op{
		ack("a", 1), enq("e1", "q"), &FetchOp{Queues: []string{"q", "r"}, WorkerID: "w", Count: 4}, ack("b", 2),
		enq("e2", "r"), &CancelOp{JobID: "c"}, ack("c", 3), &AcksFetchOp{Acks: 3, Fetch: FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 2}},
		enq("e3", "q"), &FailOp{JobID: "d", Error: "boom"},
	}}
	got, err := DecodeEntry(e.Encode(nil))
	require.NoError(t, err)
	require.Equal(t, e.Ops, got.Ops)
	got.Ops[0].(*AckOp).JobID = "changed"
	got.Ops[1].(*EnqueueOp).Job.Queue = "changed"
	require.Equal(t, "b", got.Ops[3].(*AckOp).JobID)
	require.Equal(t, "r", got.Ops[4].(*EnqueueOp).Job.Queue)
	// One op of a kind (no shared slice), and a corrupt last op fails the
	// entry.
	one := Entry{ID: NewEntryID(1, 3), Now: 3, Ops: []Op{ack("x", 1), enq("y", "q")}}
	got, err = DecodeEntry(one.Encode(nil))
	require.NoError(t, err)
	require.Equal(t, one.Ops, got.Ops)
	b := one.Encode(nil)
	_, err = DecodeEntry(append(b[:len(b)-1:len(b)-1], 0xff))
	require.Error(t, err)
}

// FuzzApplyEntry applies any bytes as a committed Raft entry, after a few
// jobs exist, on two state machines: a replica never panics or fails on an
// entry (whatever a peer's internal propose endpoint or a bug put in the
// log — a failing apply would stop every replica of the shard), and both
// end byte-for-byte alike (determinism).
func FuzzApplyEntry(f *testing.F) {
	seed := setup(f)
	id := seed.newID()
	for _, ops := range [][]Op{
		{&EnqueueOp{Job: Job{ID: id, Queue: "q", Payload: []byte(`{}`), JobOptions: JobOptions{Priority: PriorityHigh, MaxRetries: 2}}}},
		{&FetchOp{Queues: []string{"q", "r"}, WorkerID: "w", Count: 5}},
		{&AckOp{JobID: id, Holder: Holder{WorkerID: "w", Attempt: 1}, Result: []byte(`1`)}},
		{&FailOp{JobID: id, Holder: Holder{WorkerID: "w", Attempt: 1}, Error: "e"}},
		{&HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: id, Progress: []byte(`{}`)}}}},
		{&HeartbeatOp{WorkerID: "w", Jobs: []HeartbeatJob{{JobID: id, Attempt: 1, Checkpoint: []byte(`{}`)}, {JobID: id, Attempt: 2}}}},
		{&CancelOp{JobID: id}, &PromoteOp{Limit: 3}, &ReclaimOp{}, &PauseQueueOp{Queue: "q"}},
		{&MoveJobOp{JobID: id, Queue: "r"}, &PriorityOp{JobID: id, Priority: PriorityCritical}},
		{&DropQueueOp{Queue: "q", Index: DropPending}, &DropQueueOp{Queue: "q", Index: DropConfig}},
		importAIOpsV1(),
		{&SetProviderOp{Provider: Provider{Name: "p", RPM: 1, InputTPM: 10}}, &LinkProviderOp{Queue: "q", Provider: "p"},
			&ProviderMemberOp{Member: ProviderMember{Name: "p", Shard: 1, Gen: 1, In: true}}, &FetchOp{Queues: []string{"q"}, WorkerID: "w", Count: 2},
			&ProviderShareOp{Name: "p", Gen: 3, Members: []uint32{0, 1}, Share: ProviderShare{RPM: 1, InputTPM: 3}}},
	} {
		f.Add(seed.entry(ops...))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		run := func() ([]byte, []string) {
			tb := setup(t)
			tb.enqueue("q", PriorityNormal)
			tb.enqueue("q", PriorityHigh, func(j *Job) { j.UniqueKey = "u" })
			tb.fetch(1, "q")
			tb.index++
			out, err := tb.sm.Update([]sm.Entry{{Index: tb.index, Cmd: b}})
			require.NoError(t, err)
			return out[0].Result.Data, tb.dump()
		}
		r1, d1 := run()
		r2, d2 := run()
		require.Equal(t, r1, r2)
		require.Equal(t, d1, d2)
	})
}

// Ops the gateway would never build (they can still reach the log through
// the internal propose endpoint) are refused or bounded, and leave the
// state machine working.
func TestStateMachineRefusesMalformedOps(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := tb.enqueue("q", PriorityNormal)
	for _, c := range []struct {
		op   Op
		want Status
	}{
		{&EnqueueOp{Job: Job{}}, StatusInvalid},
		{&EnqueueOp{Job: Job{ID: "job_0_x"}}, StatusInvalid},
		{&EnqueueOp{Job: Job{ID: "job_0_y", Queue: "q", JobOptions: JobOptions{Priority: Priority(200)}}}, StatusInvalid},
		{&PriorityOp{JobID: id, Priority: Priority(99)}, StatusInvalid},
		{&DropQueueOp{Queue: "q", Index: 77}, StatusInvalid},
		{&AckOp{JobID: ""}, StatusNotFound},
	} {
		require.Equal(t, c.want, tb.one(c.op).Status, "%T %+v", c.op, c.op)
	}
	require.Nil(t, tb.get("job_0_y"))
	// A fetch of any size hands out what there is.
	jobs := tb.one(&FetchOp{Queues: []string{"q", "q", ""}, WorkerID: "w", Count: 1 << 31}).Jobs
	require.Len(t, jobs, 1)
	require.Equal(t, id, jobs[0].Job.ID)
}
