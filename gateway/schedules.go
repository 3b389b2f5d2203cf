package gateway

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

type scheduleRequest struct {
	Name       *string        `json:"name"`
	Queue      *string        `json:"queue"`
	Cron       *string        `json:"cron"`
	Timezone   *string        `json:"timezone"`
	Payload    jsontext.Value `json:"payload"`
	UniqueKey  *string        `json:"unique_key"`
	MaxRetries *int64         `json:"max_retries"`
	Priority   jsontext.Value `json:"priority"`
}

func (r *scheduleRequest) toSchedule(maxPayload int) (statemachine.Schedule, *apiError) {
	def := statemachine.DefaultJobOptions()
	sc := statemachine.Schedule{Timezone: "UTC", MaxRetries: def.MaxRetries, Priority: def.Priority}
	if r.Name == nil || *r.Name == "" || len(*r.Name) > 256 {
		return sc, invalid("field \"name\" must be 1–256 bytes")
	}
	sc.Name = *r.Name
	if r.Queue == nil {
		return sc, invalid("field \"queue\" is required")
	}
	if err := router.ValidateQueueName(*r.Queue); err != nil {
		return sc, invalid("field \"queue\": %v", err)
	}
	sc.Queue = *r.Queue
	if r.Cron == nil {
		return sc, invalid("field \"cron\" is required (5 fields, e.g. \"0 9 * * *\")")
	}
	if len(strings.Fields(*r.Cron)) != 5 {
		return sc, invalid("field \"cron\": %q must have 5 fields (minute hour day month weekday)", *r.Cron)
	}
	sc.Cron = *r.Cron
	if r.Timezone != nil {
		sc.Timezone = *r.Timezone
	}
	if _, err := statemachine.NextRun(sc.Cron, sc.Timezone, time.Now().UnixNano()); err != nil {
		return sc, invalid("%v", err)
	}
	if len(r.Payload) > maxPayload {
		return sc, codePayloadTooLarge.err("payload over the limit")
	}
	sc.Payload = rawOrNil(r.Payload)
	if r.UniqueKey != nil {
		sc.UniqueKey = *r.UniqueKey
	}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 || *r.MaxRetries > maxRetriesLimit {
			return sc, invalid("field \"max_retries\" must be 0–%d", maxRetriesLimit)
		}
		sc.MaxRetries = uint32(*r.MaxRetries)
	}
	if p, set, err := parsePriority(r.Priority); err != nil {
		return sc, invalid("field \"priority\": %v", err)
	} else if set {
		sc.Priority = p
	}
	return sc, nil
}

func appendSchedule(b []byte, sc *statemachine.Schedule) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, sc.ID)
	b = append(b, `,"name":`...)
	b = appendString(b, sc.Name)
	b = append(b, `,"queue":`...)
	b = appendQueueName(b, sc.Queue)
	b = append(b, `,"cron":`...)
	b = appendString(b, sc.Cron)
	b = append(b, `,"timezone":`...)
	b = appendString(b, sc.Timezone)
	b = append(b, `,"payload":`...)
	b = appendRaw(b, sc.Payload, "{}")
	b = append(b, `,"unique_key":`...)
	b = appendNullableString(b, sc.UniqueKey)
	b = append(b, `,"max_retries":`...)
	b = appendInt(b, int64(sc.MaxRetries))
	b = append(b, `,"priority":`...)
	b = appendString(b, sc.Priority.String())
	b = append(b, `,"next_run":`...)
	b = appendTime(b, sc.NextRun)
	b = append(b, `,"last_run":`...)
	b = appendTime(b, sc.LastRun)
	b = append(b, `,"last_job_id":`...)
	b = appendNullableString(b, sc.LastJobID)
	b = append(b, `,"paused":`...)
	b = strconv.AppendBool(b, sc.Paused)
	b = append(b, `,"created_at":`...)
	b = appendTime(b, sc.CreatedAt)
	return append(b, '}')
}

// allSchedules lists the schedules of the request's namespace (of its
// scope, for a key limited to some queues).
func (s *Server) allSchedules(ctx *fasthttp.RequestCtx) ([]statemachine.Schedule, *apiError) {
	vs, err := s.readEach(func(int) any { return statemachine.SchedulesQuery{} })
	if err != nil {
		return nil, engineError(err)
	}
	ns, p := s.searchNamespace(ctx), principal(ctx)
	var all []statemachine.Schedule
	for _, v := range vs {
		for _, sc := range v.([]statemachine.Schedule) {
			if (ns == "" || router.QueueInNamespace(sc.Queue, ns)) && p.AllowsQueue(sc.Queue) {
				all = append(all, sc)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

// GET /api/v1/schedules
func (s *Server) handleListSchedules(ctx *fasthttp.RequestCtx) {
	all, aerr := s.allSchedules(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := []byte(`{"schedules":[`)
	for i := range all {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendSchedule(b, &all[i])
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// POST /api/v1/schedules and PUT /api/v1/schedules/{id}
func (s *Server) handlePutSchedule(ctx *fasthttp.RequestCtx) {
	var req scheduleRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	sc, aerr := req.toSchedule(s.cfg.MaxPayloadBytes)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if !allowQueue(ctx, sc.Queue) {
		return
	}
	sc.Queue = storedQueue(ctx, sc.Queue)
	all, aerr := s.allSchedules(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	id, _ := ctx.UserValue("id").(string)
	status := 201
	if id != "" { // PUT: the schedule keeps its ID (and shard)
		status = 200
		found := false
		for _, x := range all {
			if x.ID == id {
				found = true
				if s.rt.ShardForQueue(sc.Queue) != s.scheduleShard(id) {
					writeError(ctx, invalid("a schedule cannot change to a queue on another shard; delete it and create a new one"))
					return
				}
			}
		}
		if !found {
			writeError(ctx, codeNotFound.err("schedule "+id+" not found"))
			return
		}
	} else {
		id = "sched_" + strconv.Itoa(s.rt.ShardForQueue(sc.Queue)) + "_" + ulid.Make().String()
	}
	for _, x := range all {
		if x.Name == sc.Name && x.ID != id {
			writeError(ctx, codeConflict.err("a schedule named "+strconv.Quote(sc.Name)+" exists ("+x.ID+")"))
			return
		}
	}
	sc.ID = id
	rs, aerr := s.propose(s.rt.ShardForQueue(sc.Queue), &statemachine.ScheduleOp{Schedule: sc})
	if aerr == nil {
		aerr = resultError(&rs[0])
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	sc.NextRun = rs[0].NextAttemptAt
	// Answer with the stored record (it has the times the shard set).
	if v, err := s.read(s.rt.ShardForQueue(sc.Queue), statemachine.SchedulesQuery{}); err == nil {
		for _, x := range v.([]statemachine.Schedule) {
			if x.ID == sc.ID {
				sc = x
			}
		}
	}
	writeJSON(ctx, status, appendSchedule(nil, &sc))
}

func (s *Server) scheduleShard(id string) int {
	rest, _ := strings.CutPrefix(id, "sched_")
	num, _, _ := strings.Cut(rest, "_")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= s.eng.Shards() {
		return -1
	}
	return n
}

// DELETE /api/v1/schedules/{id}
func (s *Server) handleDeleteSchedule(ctx *fasthttp.RequestCtx) {
	id, _ := ctx.UserValue("id").(string)
	sh := s.scheduleShard(id)
	if sh < 0 || !s.scheduleInScope(ctx, sh, id) {
		writeError(ctx, codeNotFound.err("schedule "+id+" not found"))
		return
	}
	rs, aerr := s.propose(sh, &statemachine.ScheduleOp{Schedule: statemachine.Schedule{ID: id}, Delete: true})
	if aerr == nil {
		aerr = resultError(&rs[0])
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	writeJSON(ctx, 200, []byte(`{"deleted":true}`))
}

// scheduleInScope reports whether the schedule id on shard sh, if it
// exists, is of the request's namespace and scope (one that does not
// exist is left to the shard to answer).
func (s *Server) scheduleInScope(ctx *fasthttp.RequestCtx, sh int, id string) bool {
	if !s.checksJobs(principal(ctx)) {
		return true
	}
	v, err := s.read(sh, statemachine.SchedulesQuery{})
	if err != nil {
		return true // the delete meets the same error
	}
	for _, sc := range v.([]statemachine.Schedule) {
		if sc.ID == id {
			return inNamespace(ctx, sc.Queue) && principal(ctx).AllowsQueue(sc.Queue)
		}
	}
	return true
}

// POST /api/v1/schedules/{id}/pause and /resume: a paused schedule fires
// nothing (its next_run is null) until resumed, when it fires from its
// next run after now. Answers the schedule.
func (s *Server) handlePauseSchedule(pause bool) fasthttp.RequestHandler {
	action := statemachine.ScheduleResume
	if pause {
		action = statemachine.SchedulePause
	}
	return func(ctx *fasthttp.RequestCtx) {
		id, sh, ok := s.scheduleParam(ctx)
		if !ok {
			return
		}
		if _, ok := s.proposeSchedule(ctx, sh, &statemachine.ScheduleOp{Schedule: statemachine.Schedule{ID: id}, Action: action}); !ok {
			return
		}
		s.writeScheduleOf(ctx, sh, id)
	}
}

// POST /api/v1/schedules/{id}/run — enqueue a run now (paused or not), as
// the cron would; its next run stays. → 201 {"job_id", "status",
// "schedule_id"}; a live job holding the schedule's unique key answers
// 200 with that job and "unique_existing": true.
func (s *Server) handleRunSchedule(ctx *fasthttp.RequestCtx) {
	id, sh, ok := s.scheduleParam(ctx)
	if !ok {
		return
	}
	jobID := s.newJobID(sh)
	r, ok := s.proposeSchedule(ctx, sh, &statemachine.ScheduleOp{Schedule: statemachine.Schedule{ID: id, LastJobID: jobID}, Action: statemachine.ScheduleRunNow})
	if !ok {
		return
	}
	status := 201
	if r.JobID != "" && r.JobID != jobID {
		status, jobID = 200, r.JobID
	}
	b := append([]byte(`{"job_id":`), appendString(nil, jobID)...)
	b = append(b, `,"status":`...)
	b = appendString(b, r.State.String())
	b = append(b, `,"schedule_id":`...)
	b = appendString(b, id)
	if status == 200 {
		b = append(b, `,"unique_existing":true`...)
	}
	writeJSON(ctx, status, append(b, '}'))
}

// scheduleParam reads {id}: the schedule's shard, or a 404 written (an ID
// that names no shard, or a schedule outside the request's scope).
func (s *Server) scheduleParam(ctx *fasthttp.RequestCtx) (string, int, bool) {
	id, _ := ctx.UserValue("id").(string)
	sh := s.scheduleShard(id)
	if sh < 0 || !s.scheduleInScope(ctx, sh, id) {
		writeError(ctx, codeNotFound.err("schedule "+id+" not found"))
		return "", 0, false
	}
	return id, sh, true
}

func (s *Server) proposeSchedule(ctx *fasthttp.RequestCtx, sh int, op *statemachine.ScheduleOp) (statemachine.Result, bool) {
	rs, aerr := s.propose(sh, op)
	if aerr == nil {
		aerr = resultError(&rs[0])
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return statemachine.Result{}, false
	}
	return rs[0], true
}

// writeScheduleOf answers schedule id as shard sh stores it.
func (s *Server) writeScheduleOf(ctx *fasthttp.RequestCtx, sh int, id string) {
	v, err := s.read(sh, statemachine.SchedulesQuery{})
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	for _, sc := range v.([]statemachine.Schedule) {
		if sc.ID == id {
			writeJSON(ctx, 200, appendSchedule(nil, &sc))
			return
		}
	}
	writeError(ctx, codeNotFound.err("schedule "+id+" not found"))
}
