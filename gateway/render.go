package gateway

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/corvohq/corvo/statemachine"
)

// Hand-written JSON output for the hot paths: job documents are appended
// field by field into one buffer, never marshalled through reflection.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendRaw appends stored raw JSON, or def when there is none.
func appendRaw(b, raw []byte, def string) []byte {
	if len(raw) == 0 {
		return append(b, def...)
	}
	return append(b, raw...)
}

// TimeFormat is how every timestamp is rendered: RFC 3339, milliseconds, UTC.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

func appendTime(b []byte, ns int64) []byte {
	if ns == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = appendTimeUTC(b, time.Unix(0, ns).UTC())
	return append(b, '"')
}

// appendTimeUTC appends t (in UTC, a year from 1000 to 9999: every int64
// of nanoseconds is one) as TimeFormat does, without parsing the layout on
// every call (time formatting was 1 % of a fetch's CPU).
func appendTimeUTC(b []byte, t time.Time) []byte {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	ms := t.Nanosecond() / 1e6
	b = append(b, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+int(mo)/10), byte('0'+int(mo)%10), '-', byte('0'+d/10), byte('0'+d%10), 'T',
		byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
	return b
}

func appendNullableString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }

// durationOr renders a duration as sent, or the default's canonical form.
func durationOr(sent string, ms int64) string {
	if sent != "" {
		return sent
	}
	return formatMs(ms)
}

func formatMs(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d%time.Hour == 0 && d >= time.Hour:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d >= time.Minute:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	default:
		return d.String()
	}
}

// appendFetchedJob renders a job as the fetch endpoint returns it.
func appendFetchedJob(b []byte, v *statemachine.JobView) []byte {
	j, st := &v.Job, &v.State
	b = append(b, `{"job_id":`...)
	b = appendString(b, j.ID)
	b = append(b, `,"queue":`...)
	b = appendQueueName(b, j.Queue)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, j.Payload, "null")
	b = append(b, `,"priority":`...)
	b = appendString(b, j.Priority.String())
	b = append(b, `,"attempt":`...)
	b = appendInt(b, int64(st.Attempt))
	b = append(b, `,"max_retries":`...)
	b = appendInt(b, int64(j.MaxRetries))
	b = append(b, `,"lease_duration":`...)
	b = appendInt(b, int64(j.LeaseSeconds))
	b = append(b, `,"lease_expires_at":`...)
	b = appendTime(b, st.LeaseExpiresAt)
	b = append(b, `,"checkpoint":`...)
	b = appendRaw(b, st.Checkpoint, "null")
	b = append(b, `,"tags":`...)
	b = appendRaw(b, j.Tags, "{}")
	b = append(b, `,"created_at":`...)
	b = appendTime(b, j.CreatedAt)
	if j.Routing != nil && len(j.Routing.Models) > 0 {
		b = append(b, `,"routing":`...)
		b = appendFetchedRouting(b, v)
	}
	return append(b, '}')
}

// appendJob renders the full job document (spec 000 "Data model").
func appendJob(b []byte, v *statemachine.JobView) []byte {
	j, st := &v.Job, &v.State
	b = append(b, `{"id":`...)
	b = appendString(b, j.ID)
	b = append(b, `,"queue":`...)
	b = appendQueueName(b, j.Queue)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, j.Payload, "null")
	b = append(b, `,"state":`...)
	b = appendString(b, st.State.String())
	b = append(b, `,"priority":`...)
	b = appendString(b, j.Priority.String())
	b = append(b, `,"attempt":`...)
	b = appendInt(b, int64(st.Attempt))
	b = append(b, `,"max_retries":`...)
	b = appendInt(b, int64(j.MaxRetries))
	b = append(b, `,"attempts_remaining":`...)
	b = appendInt(b, int64(v.AttemptsRemaining()))
	b = append(b, `,"retry_backoff":`...)
	b = appendString(b, j.Backoff.String())
	b = append(b, `,"retry_base_delay":`...)
	b = appendString(b, durationOr(j.BaseDelay, j.BaseDelayMs))
	b = append(b, `,"retry_max_delay":`...)
	b = appendString(b, durationOr(j.MaxDelay, j.MaxDelayMs))
	b = append(b, `,"lease_duration":`...)
	b = appendInt(b, int64(j.LeaseSeconds))
	b = append(b, `,"created_at":`...)
	b = appendTime(b, j.CreatedAt)
	b = append(b, `,"scheduled_at":`...)
	sched := st.DueAt
	if sched == 0 && j.ScheduledAt > j.CreatedAt {
		sched = j.ScheduledAt
	}
	b = appendTime(b, sched)
	b = append(b, `,"started_at":`...)
	b = appendTime(b, st.StartedAt)
	b = append(b, `,"completed_at":`...)
	b = appendTime(b, st.CompletedAt)
	b = append(b, `,"failed_at":`...)
	b = appendTime(b, st.FailedAt)
	b = append(b, `,"lease_expires_at":`...)
	b = appendTime(b, st.LeaseExpiresAt)
	b = append(b, `,"expire_after":`...)
	b = appendNullableString(b, j.ExpireAfter)
	b = append(b, `,"expire_at":`...)
	b = appendTime(b, j.ExpireAt)
	b = append(b, `,"unique_key":`...)
	b = appendNullableString(b, j.UniqueKey)
	b = append(b, `,"unique_period":`...)
	if j.UniqueKey == "" {
		b = append(b, "null"...)
	} else {
		b = appendInt(b, j.UniquePeriod)
	}
	b = append(b, `,"batch_id":`...)
	b = appendNullableString(b, j.BatchID)
	b = append(b, `,"chain_id":`...)
	if c := j.Chain; c != nil {
		b = appendString(b, c.ID)
		b = append(b, `,"chain_step":`...)
		b = appendInt(b, int64(c.Step))
		b = append(b, `,"chain_config":`...)
		b = appendRaw(b, c.Config, "null")
	} else {
		b = append(b, `null,"chain_step":null,"chain_config":null`...)
	}
	b = append(b, `,"depends_on":[`...)
	for i := range j.DependsOn {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, j.DependsOn[i].ID)
	}
	b = append(b, `],"dependencies_done":`...)
	b = appendInt(b, int64(st.DepsDone))
	b = append(b, `,"tags":`...)
	b = appendRaw(b, j.Tags, "{}")
	b = append(b, `,"progress":`...)
	b = appendRaw(b, st.Progress, "null")
	b = append(b, `,"checkpoint":`...)
	b = appendRaw(b, st.Checkpoint, "null")
	b = append(b, `,"result":`...)
	b = appendRaw(b, st.Result, "null")
	b = append(b, `,"cancel_requested":`...)
	b = strconv.AppendBool(b, st.CancelRequested)
	b = append(b, `,"reason":`...)
	b = appendNullableString(b, st.Reason)
	b = append(b, `,"last_error":`...)
	b = appendNullableString(b, st.LastError)
	b = append(b, `,"errors":[`...)
	for i := range v.Errors {
		e := &v.Errors[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"attempt":`...)
		b = appendInt(b, int64(e.Attempt))
		b = append(b, `,"error":`...)
		b = appendString(b, e.Error)
		b = append(b, `,"backtrace":`...)
		b = appendNullableString(b, e.Backtrace)
		b = append(b, `,"at":`...)
		b = appendTime(b, e.At)
		b = append(b, `,"started_at":`...)
		b = appendTime(b, e.StartedAt)
		b = append(b, `,"worker_id":`...)
		b = appendNullableString(b, e.WorkerID)
		b = append(b, '}')
	}
	b = append(b, `],"worker":`...)
	if st.WorkerID == "" && st.Hostname == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"id":`...)
		b = appendString(b, st.WorkerID)
		b = append(b, `,"hostname":`...)
		b = appendNullableString(b, st.Hostname)
		b = append(b, '}')
	}
	b = append(b, `,"cache_key":`...)
	b = appendNullableString(b, j.CacheKey)
	b = append(b, `,"cached_from":`...)
	b = appendNullableString(b, j.CachedFrom)
	b = append(b, `,"result_schema":`...)
	b = appendRaw(b, j.ResultSchema, "null")
	b = append(b, `,"routing":`...)
	b = appendJobRouting(b, v)
	b = append(b, `,"usage":`...)
	b = appendJobUsage(b, v.Usage)
	b = append(b, `,"scores":`...)
	b = appendJobScores(b, v.Scores)
	return append(b, '}')
}
