package gateway

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/statemachine"
)

type searchRequest struct {
	Queue           string            `json:"queue"`
	State           []string          `json:"state"`
	Priority        *string           `json:"priority"`
	Tags            map[string]string `json:"tags"`
	PayloadContains string            `json:"payload_contains"`
	PayloadJQ       string            `json:"payload_jq"`
	CreatedAfter    string            `json:"created_after"`
	CreatedBefore   string            `json:"created_before"`
	ScheduledAfter  string            `json:"scheduled_after"`
	ScheduledBefore string            `json:"scheduled_before"`
	StartedAfter    string            `json:"started_after"`
	StartedBefore   string            `json:"started_before"`
	CompletedAfter  string            `json:"completed_after"`
	CompletedBefore string            `json:"completed_before"`
	ExpireAfter     string            `json:"expire_after"`
	ExpireBefore    string            `json:"expire_before"`
	WorkerID        string            `json:"worker_id"`
	HasErrors       *bool             `json:"has_errors"`
	ErrorContains   string            `json:"error_contains"`
	BatchID         string            `json:"batch_id"`
	UniqueKey       string            `json:"unique_key"`
	AttemptMin      *int              `json:"attempt_min"`
	AttemptMax      *int              `json:"attempt_max"`
	JobIDPrefix     string            `json:"job_id_prefix"`
	Sort            string            `json:"sort"`
	Order           string            `json:"order"`
	Cursor          *string           `json:"cursor"`
	Limit           int               `json:"limit"`
}

func (r *searchRequest) filter() (mirror.Filter, error) {
	f := mirror.Filter{Queue: r.Queue, States: r.State, Tags: r.Tags, PayloadContains: r.PayloadContains, PayloadJQ: r.PayloadJQ,
		WorkerID: r.WorkerID, HasErrors: r.HasErrors, ErrorContains: r.ErrorContains, BatchID: r.BatchID, UniqueKey: r.UniqueKey,
		AttemptMin: r.AttemptMin, AttemptMax: r.AttemptMax, JobIDPrefix: r.JobIDPrefix, Sort: r.Sort, Limit: r.Limit}
	if r.Priority != nil {
		p, ok := statemachine.ParsePriority(*r.Priority)
		if !ok {
			return f, errors.New("priority: unknown value " + strconv.Quote(*r.Priority))
		}
		n := int(p)
		f.Priority = &n
	}
	switch r.Order {
	case "", "desc":
		f.Desc = true
	case "asc":
	default:
		return f, errors.New("order must be asc or desc")
	}
	if r.Cursor != nil {
		f.Cursor = *r.Cursor
	}
	for _, t := range []struct {
		name string
		in   string
		out  *int64
	}{{"created_after", r.CreatedAfter, &f.CreatedAfter}, {"created_before", r.CreatedBefore, &f.CreatedBefore},
		{"scheduled_after", r.ScheduledAfter, &f.ScheduledAfter}, {"scheduled_before", r.ScheduledBefore, &f.ScheduledBefore},
		{"started_after", r.StartedAfter, &f.StartedAfter}, {"started_before", r.StartedBefore, &f.StartedBefore},
		{"completed_after", r.CompletedAfter, &f.CompletedAfter}, {"completed_before", r.CompletedBefore, &f.CompletedBefore},
		{"expire_after", r.ExpireAfter, &f.ExpireAfter}, {"expire_before", r.ExpireBefore, &f.ExpireBefore}} {
		v, err := mirror.ParseTime(t.name, t.in)
		if err != nil {
			return f, err
		}
		*t.out = v
	}
	return f, nil
}

// countByQueueState answers the total of a search that filters by queue
// and/or state only, from the state machines' per-queue state counts (exact
// in Pebble, O(queues)), so such a search never counts rows in SQLite. It
// returns nil for any other filter.
func (s *Server) countByQueueState(r *searchRequest) *int {
	other := *r
	other.Queue, other.State, other.Sort, other.Order, other.Cursor, other.Limit = "", nil, "", "", nil, 0
	if !reflect.DeepEqual(other, searchRequest{}) {
		return nil
	}
	var states []statemachine.State
	for _, name := range r.State {
		st, ok := statemachine.ParseState(name)
		if !ok {
			return nil
		}
		if !slices.Contains(states, st) {
			states = append(states, st)
		}
	}
	shards := make([]int, 0, s.eng.Shards())
	if r.Queue != "" {
		shards = append(shards, s.rt.ShardForQueue(r.Queue))
	} else {
		for sh := 0; sh < s.eng.Shards(); sh++ {
			shards = append(shards, sh)
		}
	}
	total := 0
	for _, sh := range shards {
		v, err := s.eng.Read(sh, statemachine.ListQueuesQuery{})
		if err != nil {
			return nil
		}
		for _, q := range v.([]statemachine.QueueInfo) {
			if r.Queue != "" && q.Name != r.Queue {
				continue
			}
			if len(states) == 0 {
				for _, c := range q.Stats.Counts {
					total += int(c)
				}
				continue
			}
			for _, st := range states {
				total += int(q.Stats.Counts[st])
			}
		}
	}
	return &total
}

// POST /api/v1/jobs/search — every filter of the spec over this node's
// mirror, newest first by default, with keyset cursors.
func (s *Server) handleSearch(ctx *fasthttp.RequestCtx) {
	if s.cfg.Mirror == nil {
		writeError(ctx, &apiError{status: 503, code: "unavailable", msg: "search needs the mirror, which this server runs without"})
		return
	}
	var req searchRequest
	if err := decodeBody(ctx.PostBody(), &req, true); err != nil {
		writeError(ctx, err)
		return
	}
	f, err := req.filter()
	if err != nil {
		writeError(ctx, invalid("%v", err))
		return
	}
	f.KnownTotal = s.countByQueueState(&req)
	c, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	page, err := s.cfg.Mirror.Search(c, f)
	if errors.Is(err, mirror.ErrBadFilter) {
		writeError(ctx, invalid("%v", err))
		return
	}
	if err != nil {
		writeError(ctx, &apiError{status: 500, code: "internal", msg: err.Error()})
		return
	}
	b := []byte(`{"jobs":[`)
	for i := range page.Jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRow(b, &page.Jobs[i])
	}
	b = append(b, `],"total":`...)
	b = appendInt(b, int64(page.Total))
	b = append(b, `,"cursor":`...)
	b = appendNullableString(b, page.Cursor)
	b = append(b, `,"has_more":`...)
	b = appendBool(b, page.HasMore)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(page.Duration.Microseconds())/1000, 'f', 3, 64)
	writeJSON(ctx, 200, append(b, '}'))
}

func appendNullableTime(b []byte, ns *int64) []byte {
	if ns == nil {
		return append(b, "null"...)
	}
	return appendTime(b, *ns)
}

func appendNullablePtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendString(b, *s)
}

// appendRow renders a search hit (the mirror's view of a job).
func appendRow(b []byte, r *mirror.Row) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"queue":`...)
	b = appendString(b, r.Queue)
	b = append(b, `,"state":`...)
	b = appendString(b, r.State)
	b = append(b, `,"priority":`...)
	b = appendString(b, statemachine.Priority(r.Priority).String())
	b = append(b, `,"payload":`...)
	b = appendRaw(b, r.Payload, "null")
	b = append(b, `,"attempt":`...)
	b = appendInt(b, int64(r.Attempt))
	b = append(b, `,"max_retries":`...)
	b = appendInt(b, int64(r.MaxRetries))
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	b = append(b, `,"scheduled_at":`...)
	b = appendNullableTime(b, r.ScheduledAt)
	b = append(b, `,"started_at":`...)
	b = appendNullableTime(b, r.StartedAt)
	b = append(b, `,"completed_at":`...)
	b = appendNullableTime(b, r.CompletedAt)
	b = append(b, `,"last_error":`...)
	b = appendNullablePtr(b, r.LastError)
	b = append(b, `,"error_count":`...)
	b = appendInt(b, int64(r.ErrorCount))
	b = append(b, `,"reason":`...)
	b = appendNullablePtr(b, r.Reason)
	b = append(b, `,"tags":`...)
	b = appendRaw(b, r.Tags, "{}")
	b = append(b, `,"batch_id":`...)
	b = appendNullablePtr(b, r.BatchID)
	b = append(b, `,"unique_key":`...)
	b = appendNullablePtr(b, r.UniqueKey)
	b = append(b, `,"worker_id":`...)
	b = appendNullablePtr(b, r.WorkerID)
	b = append(b, `,"progress":`...)
	b = appendRaw(b, r.Progress, "null")
	return append(b, '}')
}

// POST /api/v1/admin/rebuild-mirror — rebuild this node's mirror from Pebble.
func (s *Server) handleRebuildMirror(ctx *fasthttp.RequestCtx) {
	if s.cfg.Mirror == nil {
		writeError(ctx, &apiError{status: 503, code: "unavailable", msg: "this server runs without a mirror"})
		return
	}
	s.cfg.Mirror.RequestRebuild()
	writeJSON(ctx, 202, []byte(`{"status":"rebuilding"}`))
}
