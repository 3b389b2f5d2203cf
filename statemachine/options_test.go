package statemachine

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDefaultJobOptions pins the defaults to DECISIONS.md: max_retries 3,
// exponential backoff from 5s capped at 10m, a 60 s lease, priority normal.
func TestDefaultJobOptions(t *testing.T) {
	t.Parallel()
	require.Equal(t, JobOptions{
		Priority: PriorityNormal, MaxRetries: 3, Backoff: BackoffExponential,
		BaseDelayMs: 5_000, MaxDelayMs: 10 * 60_000, LeaseSeconds: 60,
	}, DefaultJobOptions())
}

// everyOption sets every field of JobOptions to a non-zero value, by
// reflection, so that the tests below cover options added later too.
func everyOption(t *testing.T) JobOptions {
	t.Helper()
	var o JobOptions
	v := reflect.ValueOf(&o).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Uint8, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.SetBytes([]byte(`{"f":"` + v.Type().Field(i).Name + `"}`))
		case reflect.Pointer:
			if _, ok := f.Interface().(*Routing); !ok {
				t.Fatalf("JobOptions.%s: pointer type %s not covered by everyOption", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf(&Routing{Strategy: RouteLowestCost, Models: []string{"a", "b"}, PriceNanos: []int64{2, 1}, Start: 1}))
		default:
			t.Fatalf("JobOptions.%s: kind %s not covered by everyOption", v.Type().Field(i).Name, f.Kind())
		}
	}
	return o
}

// TestJobOptionsEveryFieldIsStored: each option survives the job record,
// the enqueue op and a clone; an option left out of Job.appendTo fails
// here.
func TestJobOptionsEveryFieldIsStored(t *testing.T) {
	t.Parallel()
	j := Job{ID: "job_0_x", Queue: "q", Payload: []byte(`{}`), JobOptions: everyOption(t)}
	var got Job
	d := dec{b: j.appendTo(nil)}
	got.decode(&d)
	require.NoError(t, d.err)
	require.Empty(t, d.b)
	require.Equal(t, j, got)

	e := Entry{Ops: []Op{&EnqueueOp{Job: j, IfAbsent: true}}}
	de, err := DecodeEntry(e.Encode(nil))
	require.NoError(t, err)
	require.Equal(t, e.Ops, de.Ops)

	// A clone shares no slice with its original.
	c := j.JobOptions.clone()
	ov, cv := reflect.ValueOf(&j.JobOptions).Elem(), reflect.ValueOf(&c).Elem()
	for i := 0; i < ov.NumField(); i++ {
		if ov.Field(i).Kind() == reflect.Slice {
			ov.Field(i).Index(0).SetUint('X')
			require.NotEqual(t, byte('X'), cv.Field(i).Bytes()[0], "clone shares JobOptions.%s", ov.Type().Field(i).Name)
		}
	}
}

// TestJobOptionsInherited: a job another leads to carries every option but
// the ones that belong to the job they were sent with. An option is
// inherited unless it is listed here.
func TestJobOptionsInherited(t *testing.T) {
	t.Parallel()
	notInherited := map[string]bool{"ScheduledAt": true, "ExpireAfter": true, "ExpireAfterMs": true, "UniqueKey": true, "UniquePeriod": true,
		"ResultSchema": true, "CacheKey": true, "CacheTTLms": true, "Routing": true}
	o := everyOption(t)
	in := o.inherited()
	ov, iv := reflect.ValueOf(o), reflect.ValueOf(in)
	for i := 0; i < ov.NumField(); i++ {
		name := ov.Type().Field(i).Name
		if notInherited[name] {
			require.True(t, iv.Field(i).IsZero(), "%s must not be inherited", name)
		} else {
			require.Equal(t, ov.Field(i).Interface(), iv.Field(i).Interface(), "%s must be inherited", name)
		}
	}
}

// TestJobOptionsOfDerivedJobs: the jobs the state machine creates itself —
// a chain's next step, a batch callback, a cron run — get their options
// from the job before them or from DefaultJobOptions.
func TestJobOptionsOfDerivedJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	opts := JobOptions{Priority: PriorityHigh, MaxRetries: 7, Backoff: BackoffLinear, BaseDelayMs: 1500, MaxDelayMs: 90_000,
		BaseDelay: "1500ms", MaxDelay: "90s", LeaseSeconds: 45, ExpireAfter: "1h", ExpireAfterMs: 3_600_000,
		Tags: []byte(`{"tenant":"acme"}`), UniqueKey: "doc-1", UniquePeriod: 60}
	first := tb.enqueue("extract", PriorityHigh, func(j *Job) {
		j.JobOptions = opts
		j.Chain = &Chain{ID: j.ID, Steps: []ChainTarget{{Queue: "extract"}, {Queue: "summarize"}}}
	})
	tb.fetch(1, "extract")
	tb.one(&AckOp{JobID: first})
	step := tb.fetch(1, "summarize")
	require.Len(t, step, 1)
	require.Equal(t, opts.inherited(), step[0].Job.JobOptions)
	require.Equal(t, uint32(45), step[0].Job.LeaseSeconds)

	cbID := tb.newID()
	tb.one(&BatchCreateOp{Batch: Batch{ID: "batch_0_opts", Total: 1, CallbackQueue: "done", CallbackJobID: cbID}})
	tb.one(&BatchDoneOp{BatchID: "batch_0_opts", JobID: "job_0_any", OK: true})
	cb := tb.fetch(1, "done")
	require.Len(t, cb, 1)
	require.Equal(t, DefaultJobOptions(), cb[0].Job.JobOptions)

	require.Equal(t, StatusOK, tb.one(&ScheduleOp{Schedule: Schedule{ID: "sched_0_opts", Queue: "reports", Cron: "* * * * *",
		Timezone: "UTC", UniqueKey: "minutely", MaxRetries: 1, Priority: PriorityCritical}}).Status)
	tb.advance(time.Minute)
	tb.one(&CronTickOp{})
	run := tb.fetch(1, "reports")
	require.Len(t, run, 1)
	want := DefaultJobOptions()
	want.Priority, want.MaxRetries, want.UniqueKey = PriorityCritical, 1, "minutely"
	want.Tags = []byte(`{"schedule":"sched_0_opts"}`)
	require.Equal(t, want, run[0].Job.JobOptions)
}

// TestRecordsSkipFieldsOfLaterBuilds: bytes after the fields a build knows
// — fields a later build appended (wire.go) — are ignored, in a job record
// and in an enqueue op, whose IfAbsent flag follows the job.
func TestRecordsSkipFieldsOfLaterBuilds(t *testing.T) {
	t.Parallel()
	later := []byte{0x07, 'l', 'a', 't', 'e', 'r', 0x01, 0x02} // a str and a varint
	j := minJobV1()
	j.ResultSchema = []byte(`{"type":"object"}`) // up to the last field this build knows
	j.CacheKey, j.CacheTTLms, j.CachedFrom, j.SavedNanos = "k", 1000, "job_0_from", 5
	j.Routing = &Routing{Strategy: RouteRoundRobin, Models: []string{"a", "b"}, Start: 1}
	rec := append(j.appendTo(nil), later...)
	var got Job
	d := dec{b: rec}
	got.decode(&d)
	require.NoError(t, d.err)
	require.Equal(t, j, got)

	// An enqueue op as a later build writes it: the longer job, then IfAbsent.
	body := append(append(j.appendTo(nil), later...), 1)
	op, err := decodeOp(OpEnqueue, body)
	require.NoError(t, err)
	require.Equal(t, &EnqueueOp{Job: j, IfAbsent: true}, op)
	body[len(body)-1] = 0
	op, err = decodeOp(OpEnqueue, body)
	require.NoError(t, err)
	require.False(t, op.(*EnqueueOp).IfAbsent)
	_, err = decodeOp(OpEnqueue, nil)
	require.Error(t, err)

	// A state or error record with more than this build knows.
	st := fullStateV1()
	st.UsageKeys, st.CostNanos = 3, 1234 // every field this build knows
	st.RouteIndex, st.RouteFallbacks, st.ScoreKeys = 1, 2, 3
	var gs JobState
	d = dec{b: append(st.appendTo(nil), later...)}
	gs.decode(&d)
	require.NoError(t, d.err)
	require.Equal(t, st, gs)
	je := errorV2()
	var ge JobError
	d = dec{b: append(je.appendTo(nil), later...)}
	ge.decode(&d)
	require.NoError(t, d.err)
	require.Equal(t, je, ge)
}
