package statemachine

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeWireFixture writes a wire fixture that does not exist yet. A
// fixture is frozen once committed: it holds bytes an older release wrote
// (to Pebble or a Raft log), which every later release must still read.
// When a format grows, add a fixture for the new release beside the old
// ones; never regenerate one.
var writeWireFixture = flag.Bool("write-wire-fixture", false, "write missing testdata/wire fixtures with this build's encoder")

// wireV1 is testdata/wire/v1.txt: records as the encoders wrote them
// before the record-versioning rule (wire.go) was written down.
const wireV1 = "testdata/wire/v1.txt"

func fullJobV1() Job {
	return Job{
		ID: "job_1_01JAAAAAAAAAAAAAAAAAAAAAAA", Queue: "emails.send", Payload: []byte(`{"to":"a@b.c"}`),
		JobOptions: JobOptions{
			Priority: PriorityHigh, MaxRetries: 7, Backoff: BackoffLinear, BaseDelayMs: 1500, MaxDelayMs: 90000,
			BaseDelay: "1500ms", MaxDelay: "90s", LeaseSeconds: 45, ScheduledAt: 1_770_000_000_000_000_000,
			ExpireAfter: "1h", ExpireAfterMs: 3_600_000,
			Tags: []byte(`{"tenant":"acme"}`), UniqueKey: "user-42", UniquePeriod: 3600,
		},
		ExpireAt: 1_770_003_600_000_000_000,
		BatchID:  "batch_2_01JBBBBBBBBBBBBBBBBBBBBBBB", CreatedAt: 1_769_999_000_000_000_000, Seq: 77<<24 | 3, BatchShard: 2,
		Chain: &Chain{ID: "job_1_01JAAAAAAAAAAAAAAAAAAAAAAA", Step: 1,
			Steps: []ChainTarget{
				{Queue: "emails.send", Shard: 1},
				{Queue: "emails.log", Shard: 3, Payload: []byte(`{"log":true}`)},
			},
			OnFailure: &ChainTarget{Queue: "emails.dead", Shard: 0, Payload: []byte(`{"f":1}`)},
			OnExit:    &ChainTarget{Queue: "emails.exit", Shard: 2},
			Config:    []byte(`{"steps":[{"queue":"emails.send"},{"queue":"emails.log"}]}`)},
		DependsOn: []Dep{{ID: "job_0_01JCCCCCCCCCCCCCCCCCCCCCCC", Shard: 0}, {ID: "job_3_01JDDDDDDDDDDDDDDDDDDDDDDD", Shard: 3}},
	}
}

func minJobV1() Job {
	return Job{ID: "job_0_01JEEEEEEEEEEEEEEEEEEEEEEE", Queue: "q", Payload: []byte(`{}`),
		JobOptions: JobOptions{Priority: PriorityNormal, MaxRetries: 3, Backoff: BackoffExponential, BaseDelayMs: 5000,
			MaxDelayMs: 600000, LeaseSeconds: 60},
		CreatedAt: 1_769_999_000_000_000_000, Seq: 1 << 24}
}

func fullStateV1() JobState {
	return JobState{State: StateActive, Attempt: 2, WorkerID: "worker-1", Hostname: "host-a", LeaseExpiresAt: 1_770_000_060_000_000_000,
		StartedAt: 1_770_000_000_000_000_000, CompletedAt: 0, FailedAt: 1_769_999_990_000_000_000, DueAt: 1_769_999_995_000_000_000,
		CancelRequested: true, Progress: []byte(`{"pct":50}`), Checkpoint: []byte(`{"at":10}`), Result: []byte(`{"ok":1}`),
		Reason: "expired", Errors: 1, LastError: "boom", DepsDone: 2, ProgressAt: 1_770_000_030_000_000_000}
}

func errorV2() JobError {
	return JobError{Attempt: 1, Error: "boom", Backtrace: "main.go:1", At: 1_769_999_990_000_000_000,
		StartedAt: 1_769_999_980_000_000_000, WorkerID: "worker-1", RetryAt: 1_769_999_995_000_000_000}
}

func scheduleV1() Schedule {
	return Schedule{ID: "sched_1", Name: "nightly", Queue: "reports", Cron: "0 3 * * *", Timezone: "Europe/Paris",
		Payload: []byte(`{"r":1}`), UniqueKey: "nightly", MaxRetries: 2, Priority: PriorityCritical,
		NextRun: 1_770_080_000_000_000_000, LastRun: 1_769_990_000_000_000_000, CreatedAt: 1_769_000_000_000_000_000, UpdatedAt: 1_769_500_000_000_000_000}
}

func batchV1() Batch {
	return Batch{ID: "batch_2_01JBBBBBBBBBBBBBBBBBBBBBBB", Total: 10, Succeeded: 6, Failed: 1, CallbackQueue: "done", CallbackShard: 3,
		CallbackPayload: []byte(`{"cb":1}`), CallbackJobID: "job_3_01JFFFFFFFFFFFFFFFFFFFFFFF", CreatedAt: 1_769_999_000_000_000_000}
}

func viewV1() JobView {
	return JobView{Job: fullJobV1(), State: fullStateV1(), Errors: []JobError{errorV2()}}
}

func entryV1() Entry {
	return Entry{ID: NewEntryID(1_770_000_000_000_000_000, 42), Retry: true, Now: 1_770_000_000_000_000_001, Ops: []Op{
		&EnqueueOp{Job: fullJobV1(), IfAbsent: true},
		&EnqueueOp{Job: minJobV1()},
		&ScheduleOp{Schedule: scheduleV1()},
		&BatchCreateOp{Batch: batchV1()},
		&MoveInOp{viewV1()},
	}}
}

func resultsV1() []Result {
	return []Result{
		{Status: StatusOK, State: StateActive, NextAttemptAt: 5, AttemptsRemaining: 2, Count: 3, Message: "m", Queue: "q",
			Existing: true, JobID: "job_1_x", Cursor: []byte{1, 2}, Jobs: []JobView{viewV1()},
			Heartbeats: []HeartbeatStatus{HeartbeatOK, HeartbeatLost}},
		{Status: StatusConflict, State: StateCompleted, Message: "not held"},
	}
}

// errorV1Bytes is a JobError as releases before version 2 wrote it (the
// encoder now writes version 2 only).
func errorV1Bytes() []byte {
	e := enc{}
	e.u8(1)
	e.uvarint(3)
	e.str("old failure")
	e.str("")
	e.varint(1_700_000_000_000_000_000)
	return e.b
}

// wireRecordsV1 names each record of the v1 fixture with the bytes this
// build's encoder writes for it.
func wireRecordsV1() map[string][]byte {
	st := fullStateV1()
	noProgressAt := fullStateV1()
	noProgressAt.ProgressAt = 0
	je := errorV2()
	full, minimal := fullJobV1(), minJobV1()
	sc, bt, v := scheduleV1(), batchV1(), viewV1()
	e := entryV1()
	return map[string][]byte{
		"job.full":         full.appendTo(nil),
		"job.min":          minimal.appendTo(nil),
		"state.full":       st.appendTo(nil),
		"state.noprogress": noProgressAt.appendTo(nil),
		"error.v1":         errorV1Bytes(),
		"error.v2":         je.appendTo(nil),
		"schedule":         sc.appendTo(nil),
		"batch":            bt.appendTo(nil),
		"view":             v.appendTo(nil),
		"entry":            e.Encode(nil),
		"results.full":     AppendResults(nil, resultsV1()),
		"results.compact":  encodeResults(nil, resultsV1(), true),
	}
}

func readWireFixture(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hx, ok := strings.Cut(line, " ")
		require.True(t, ok, "bad fixture line %q", line)
		b, err := hex.DecodeString(hx)
		require.NoError(t, err, name)
		out[name] = b
	}
	require.NoError(t, sc.Err())
	return out
}

func writeFixture(t *testing.T, path, header string, recs map[string][]byte) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("%s exists: fixtures are frozen, add a new one instead", path)
	}
	var buf bytes.Buffer
	buf.WriteString(header)
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		fmt.Fprintf(&buf, "%s %x\n", name, recs[name])
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

// checkWireFixture is the common part of a frozen fixture's test: it
// writes the fixture when asked (writeWireFixture), reads it, and requires
// that this build encodes the same values to the same bytes, record by
// record. It returns the frozen records for the caller to decode.
func checkWireFixture(t *testing.T, path, header string, recs map[string][]byte) map[string][]byte {
	t.Helper()
	if *writeWireFixture {
		writeFixture(t, path, header, recs)
	}
	old := readWireFixture(t, path)
	require.Len(t, old, len(recs))
	for name, b := range recs {
		require.Equal(t, hex.EncodeToString(old[name]), hex.EncodeToString(b), name)
	}
	return old
}

// requireDecodes requires the frozen record b to decode, without an
// error, to want.
func requireDecodes[T any, P interface {
	*T
	decode(d *dec)
}](t *testing.T, b []byte, want T) {
	t.Helper()
	var v T
	d := dec{b: b}
	P(&v).decode(&d)
	require.NoError(t, d.err)
	require.Equal(t, want, v)
}

// decodeWireOps decodes the frozen entry b and returns its ops.
func decodeWireOps(t *testing.T, b []byte) []Op {
	t.Helper()
	e, err := DecodeEntry(b)
	require.NoError(t, err)
	return e.Ops
}

// TestWireFixtureV1: records and entries written before the versioning
// rule — already in Pebble and in Raft logs — decode to the same values,
// and this build writes the same values to the same bytes (replicas
// running either build stay byte-for-byte alike).
func TestWireFixtureV1(t *testing.T) {
	t.Parallel()
	// Same values, same bytes (error.v1 is no longer written).
	old := checkWireFixture(t, wireV1, "# Records as Corvo wrote them before the record-versioning rule (statemachine/wire.go).\n"+
		"# Frozen: never regenerate. Values: compat_test.go (…V1 functions).\n", wireRecordsV1())

	decodeInto := func(name string, fn func(d *dec)) {
		t.Helper()
		b, ok := old[name]
		require.True(t, ok, name)
		d := dec{b: b}
		fn(&d)
		require.NoError(t, d.err, name)
	}
	var j Job
	decodeInto("job.full", j.decode)
	require.Equal(t, fullJobV1(), j)
	j = Job{}
	decodeInto("job.min", j.decode)
	require.Equal(t, minJobV1(), j)
	var st JobState
	decodeInto("state.full", st.decode)
	require.Equal(t, fullStateV1(), st)
	st = JobState{}
	decodeInto("state.noprogress", st.decode)
	want := fullStateV1()
	want.ProgressAt = 0
	require.Equal(t, want, st)
	var je JobError
	decodeInto("error.v1", je.decode)
	require.Equal(t, JobError{Attempt: 3, Error: "old failure", At: 1_700_000_000_000_000_000}, je)
	je = JobError{}
	decodeInto("error.v2", je.decode)
	require.Equal(t, errorV2(), je)
	var sc Schedule
	decodeInto("schedule", sc.decode)
	require.Equal(t, scheduleV1(), sc)
	var bt Batch
	decodeInto("batch", bt.decode)
	require.Equal(t, batchV1(), bt)
	var v JobView
	decodeInto("view", v.decode)
	require.Equal(t, viewV1(), v)

	e, err := DecodeEntry(old["entry"])
	require.NoError(t, err)
	want2 := entryV1()
	require.Equal(t, &want2, e)

	rs, err := DecodeResults(old["results.full"])
	require.NoError(t, err)
	require.Equal(t, resultsV1(), rs)
	rs, compact, err := decodeResults(old["results.compact"])
	require.NoError(t, err)
	require.True(t, compact)
	require.Equal(t, "job_1_01JAAAAAAAAAAAAAAAAAAAAAAA", rs[0].Jobs[0].Job.ID)
}

// wireAuditV1 is testdata/wire/audit-v1.txt: the audit record and its ops
// as their first release wrote them.
const wireAuditV1 = "testdata/wire/audit-v1.txt"

func auditRecordV1() AuditRecord {
	return AuditRecord{ID: "01JAAAAAAAAAAAAAAAAAAAAAAA", At: 1_770_000_000_000_000_001, KeyID: "key_01JB", KeyName: "ops", Role: "operator",
		Namespace: "acme", Method: "POST", Path: "/api/v1/queues/emails/pause", Status: 200, Summary: "pause queue emails",
		Remote: "10.0.0.1:5000"}
}

func wireRecordsAuditV1() map[string][]byte {
	r := auditRecordV1()
	e := Entry{ID: NewEntryID(1_770_000_000_000_000_000, 7), Now: 1_770_000_000_000_000_001, Ops: []Op{
		&AuditOp{Record: auditRecordV1()}, &PruneAuditOp{Before: 1_760_000_000_000_000_000, Limit: 5000},
	}}
	return map[string][]byte{"audit.record": r.appendTo(nil), "audit.entry": e.Encode(nil)}
}

// TestWireFixtureAuditV1: audit records in Pebble and audit ops in Raft
// logs keep decoding to the same values, and encode to the same bytes.
func TestWireFixtureAuditV1(t *testing.T) {
	t.Parallel()
	old := checkWireFixture(t, wireAuditV1, "# Audit records and ops as their first release wrote them.\n"+
		"# Frozen: never regenerate. Values: compat_test.go (…AuditV1 functions).\n", wireRecordsAuditV1())
	requireDecodes(t, old["audit.record"], auditRecordV1())
	require.Equal(t, []Op{&AuditOp{Record: auditRecordV1()}, &PruneAuditOp{Before: 1_760_000_000_000_000_000, Limit: 5000}},
		decodeWireOps(t, old["audit.entry"]))
}

// wireSchedulePause is testdata/wire/schedule-pause-v1.txt: a schedule
// with the fields pause and run now added (Paused, LastJobID), and the
// ScheduleOp actions, as their first release wrote them.
const wireSchedulePause = "testdata/wire/schedule-pause-v1.txt"

func schedulePausedV1() Schedule {
	s := scheduleV1()
	s.Paused, s.NextRun, s.LastJobID = true, 0, "job_1_01JCCCCCCCCCCCCCCCCCCCCCCC"
	return s
}

func scheduleOpsV1() []Op {
	return []Op{
		&ScheduleOp{Schedule: Schedule{ID: "sched_1"}, Action: SchedulePause},
		&ScheduleOp{Schedule: Schedule{ID: "sched_1"}, Action: ScheduleResume},
		&ScheduleOp{Schedule: Schedule{ID: "sched_1", LastJobID: "job_1_01JDDDDDDDDDDDDDDDDDDDDDDD"}, Action: ScheduleRunNow},
	}
}

func wireRecordsSchedulePause() map[string][]byte {
	s := schedulePausedV1()
	e := Entry{ID: NewEntryID(1_770_000_000_000_000_000, 9), Now: 1_770_000_000_000_000_001, Ops: scheduleOpsV1()}
	return map[string][]byte{"schedule.paused": s.appendTo(nil), "schedule.entry": e.Encode(nil)}
}

// TestWireFixtureSchedulePause: paused schedules and the pause, resume and
// run-now ops keep decoding to the same values and encoding to the same
// bytes; a schedule without them keeps the bytes it had before (v1.txt).
func TestWireFixtureSchedulePause(t *testing.T) {
	t.Parallel()
	old := checkWireFixture(t, wireSchedulePause, "# A paused schedule and the schedule actions as their first release wrote them.\n"+
		"# Frozen: never regenerate. Values: compat_test.go (schedulePausedV1, scheduleOpsV1).\n", wireRecordsSchedulePause())
	requireDecodes(t, old["schedule.paused"], schedulePausedV1())
	require.Equal(t, scheduleOpsV1(), decodeWireOps(t, old["schedule.entry"]))
}

// wireMovePriority is testdata/wire/move-priority-v1.txt: the move ops
// with the priority fields added to them, as their first release wrote them.
const wireMovePriority = "testdata/wire/move-priority-v1.txt"

func moveOpsV1() []Op {
	return []Op{
		&MoveJobOp{JobID: "job_1_01JAAAAAAAAAAAAAAAAAAAAAAA", Queue: "to", ResetAttempt: true, SetPriority: true, Priority: PriorityHigh},
		&MoveOutOp{JobID: "job_1_01JAAAAAAAAAAAAAAAAAAAAAAA", NewID: "job_2_01JAAAAAAAAAAAAAAAAAAAAAAA", Queue: "far", Target: 2, SetPriority: true, Priority: PriorityNormal},
		&MoveJobOp{JobID: "job_1_01JBBBBBBBBBBBBBBBBBBBBBBB", Queue: "kept"},
	}
}

func wireRecordsMovePriority() map[string][]byte {
	e := Entry{ID: NewEntryID(1_770_000_000_000_000_000, 11), Now: 1_770_000_000_000_000_001, Ops: moveOpsV1()}
	return map[string][]byte{"move.entry": e.Encode(nil)}
}

// TestWireFixtureMovePriority: moves that set a priority keep decoding to
// the same values and encoding to the same bytes; one that sets none
// encodes as before the fields existed.
func TestWireFixtureMovePriority(t *testing.T) {
	t.Parallel()
	old := checkWireFixture(t, wireMovePriority, "# Move ops with a priority as their first release wrote them.\n"+
		"# Frozen: never regenerate. Values: compat_test.go (moveOpsV1).\n", wireRecordsMovePriority())
	require.Equal(t, moveOpsV1(), decodeWireOps(t, old["move.entry"]))
	plain := &MoveJobOp{JobID: "j", Queue: "q", ResetAttempt: true}
	require.Equal(t, []byte{1, 'j', 1, 'q', 1}, plain.appendBody(nil), "no priority: the old bytes")
}
