package gateway

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// A job's timeline (spec 000 "Job detail view") is told from what the job
// record keeps: its creation, each failed attempt's record (start, worker,
// error, when the next attempt was due), the current attempt, the last
// progress report and how it ended. It is exact (read from Pebble) and
// bounded by the job's error history.

type timelineEntry struct {
	at      int64
	typ     string
	attempt uint32
	worker  string
	detail  string
}

func jobTimeline(v *statemachine.JobView) []timelineEntry {
	j, st := &v.Job, &v.State
	tl := []timelineEntry{{at: j.CreatedAt, typ: "enqueued"}}
	if j.ScheduledAt > j.CreatedAt {
		tl = append(tl, timelineEntry{at: j.CreatedAt, typ: "scheduled", detail: "runs at " + time.Unix(0, j.ScheduledAt).UTC().Format(TimeFormat)})
	}
	if n := len(j.DependsOn); n > 0 {
		what := " dependencies"
		if n == 1 {
			what = " dependency"
		}
		tl = append(tl, timelineEntry{at: j.CreatedAt, typ: "held", detail: "waiting on " + strconv.Itoa(n) + what})
	}
	currentShown := false
	for i := range v.Errors {
		e := &v.Errors[i]
		if e.StartedAt > 0 {
			tl = append(tl, timelineEntry{at: e.StartedAt, typ: "started", attempt: e.Attempt, worker: e.WorkerID})
			currentShown = currentShown || e.StartedAt == st.StartedAt
		}
		tl = append(tl, timelineEntry{at: e.At, typ: "failed", attempt: e.Attempt, worker: e.WorkerID, detail: e.Error})
		if e.RetryAt > 0 {
			d := "retry now"
			if wait := time.Duration(e.RetryAt - e.At); wait > 0 {
				d = "retry in " + wait.Round(time.Millisecond).String() + " (" + j.Backoff.String() + " backoff)"
			}
			tl = append(tl, timelineEntry{at: e.At, typ: "retrying", attempt: e.Attempt, detail: d})
		}
	}
	if st.Attempt > 0 && st.StartedAt > 0 && !currentShown {
		tl = append(tl, timelineEntry{at: st.StartedAt, typ: "started", attempt: st.Attempt, worker: st.WorkerID})
	}
	if st.ProgressAt > 0 {
		tl = append(tl, timelineEntry{at: st.ProgressAt, typ: "progress", attempt: st.Attempt, detail: progressText(st.Progress)})
	}
	switch st.State {
	case statemachine.StateCompleted:
		tl = append(tl, timelineEntry{at: st.CompletedAt, typ: "completed", attempt: st.Attempt, worker: st.WorkerID})
	case statemachine.StateDead, statemachine.StateCancelled:
		tl = append(tl, timelineEntry{at: st.CompletedAt, typ: st.State.String(), attempt: st.Attempt, detail: st.Reason})
	}
	sort.SliceStable(tl, func(a, b int) bool { return tl[a].at < tl[b].at })
	return tl
}

// progressText renders {"current","total","message"} as "450/1000 message".
func progressText(raw []byte) string {
	var p struct {
		Current *float64 `json:"current"`
		Total   *float64 `json:"total"`
		Message string   `json:"message"`
	}
	if json.Unmarshal(raw, &p) != nil || p.Current == nil {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			return buf.String()
		}
		return ""
	}
	s := strconv.FormatFloat(*p.Current, 'f', -1, 64)
	if p.Total != nil {
		s += "/" + strconv.FormatFloat(*p.Total, 'f', -1, 64)
	}
	if p.Message != "" {
		s += " " + p.Message
	}
	return s
}

func appendTimeline(b []byte, tl []timelineEntry) []byte {
	b = append(b, '[')
	for i := range tl {
		e := &tl[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"at":`...)
		b = appendTime(b, e.at)
		b = append(b, `,"type":`...)
		b = appendString(b, e.typ)
		if e.attempt > 0 {
			b = append(b, `,"attempt":`...)
			b = appendInt(b, int64(e.attempt))
		}
		if e.worker != "" {
			b = append(b, `,"worker_id":`...)
			b = appendString(b, e.worker)
		}
		if e.detail != "" {
			b = append(b, `,"detail":`...)
			b = appendString(b, e.detail)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
