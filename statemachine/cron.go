package statemachine

import (
	"fmt"
	"sync"
	"time"

	"github.com/adhocore/gronx"
	"github.com/cockroachdb/pebble/v2"
)

// Cron schedules. A schedule lives on its queue's shard (key sc|{id}) with
// an index entry at its next run (sx|{next}{id}). The leader proposes a
// CronTickOp when the earliest run is due; the state machine fires every
// due run — missed ones included, each exactly once, whatever leader
// changes happened — and computes the next from the expression in the
// schedule's time zone. A run's job ID is derived from (schedule, run
// time), so a run can never be enqueued twice.

// Schedule is a cron schedule.
type Schedule struct {
	ID         string
	Name       string
	Queue      string
	Cron       string // 5 fields
	Timezone   string // IANA name
	Payload    []byte
	UniqueKey  string
	MaxRetries uint32
	Priority   Priority
	NextRun    int64
	LastRun    int64
	CreatedAt  int64
	UpdatedAt  int64
	Paused     bool   // a paused schedule does not fire (NextRun is 0)
	LastJobID  string // the job of the last run (cron or run now)
}

func (s *Schedule) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(1)
	e.str(s.ID)
	e.str(s.Name)
	e.str(s.Queue)
	e.str(s.Cron)
	e.str(s.Timezone)
	e.bytes(s.Payload)
	e.str(s.UniqueKey)
	e.uvarint(uint64(s.MaxRetries))
	e.u8(uint8(s.Priority))
	e.varint(s.NextRun)
	e.varint(s.LastRun)
	e.varint(s.CreatedAt)
	e.varint(s.UpdatedAt)
	// Fields added later: appended, read back under d.more(), and left out
	// while zero (a schedule that never used them keeps its old bytes).
	if s.Paused || s.LastJobID != "" {
		e.boolean(s.Paused)
		e.str(s.LastJobID)
	}
	return e.b
}

func (s *Schedule) decode(d *dec) {
	if d.u8() != 1 {
		d.fail()
		return
	}
	s.ID = d.str()
	s.Name = d.str()
	s.Queue = d.str()
	s.Cron = d.str()
	s.Timezone = d.str()
	s.Payload = cloneBytes(d.bytes())
	s.UniqueKey = d.str()
	s.MaxRetries = uint32(d.uvarint())
	s.Priority = Priority(d.u8())
	s.NextRun = d.varint()
	s.LastRun = d.varint()
	s.CreatedAt = d.varint()
	s.UpdatedAt = d.varint()
	if d.more() {
		s.Paused = d.boolean()
		s.LastJobID = d.str()
	}
}

func scheduleKey(id string) []byte { return append([]byte(pfxSchedule), id...) }

var (
	zonesMu sync.Mutex
	zones   = map[string]*time.Location{}
)

// zone loads a time zone once (the binary embeds the tz database, so every
// node computes the same times).
func zone(name string) (*time.Location, error) {
	zonesMu.Lock()
	defer zonesMu.Unlock()
	if l, ok := zones[name]; ok {
		return l, nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones[name] = l
	return l, nil
}

// NextRun is the first run of a cron expression strictly after t (Unix ns)
// in the time zone; the gateway validates with it too.
func NextRun(expr, tz string, after int64) (int64, error) {
	loc, err := zone(tz)
	if err != nil {
		return 0, fmt.Errorf("unknown time zone %q", tz)
	}
	if !gronx.IsValid(expr) {
		return 0, fmt.Errorf("invalid cron expression %q", expr)
	}
	// Cron has minute resolution: start from the minute after 'after'.
	ref := time.Unix(0, after).In(loc).Truncate(time.Minute)
	next, err := gronx.NextTickAfter(expr, ref, false)
	if err != nil {
		return 0, fmt.Errorf("cron expression %q: %w", expr, err)
	}
	return next.UnixNano(), nil
}

// ScheduleOp creates, replaces or (Delete) removes a schedule; with an
// Action it pauses, resumes or runs the existing schedule Schedule.ID.
type ScheduleOp struct {
	Schedule Schedule
	Delete   bool
	Action   ScheduleAction
}

// ScheduleAction is what a ScheduleOp does to an existing schedule.
type ScheduleAction uint8

// Schedule actions (append only: the value is in the Raft log).
const (
	ScheduleReplace ScheduleAction = 0 // create, replace or (Delete) remove
	SchedulePause   ScheduleAction = 1 // stop firing until resumed
	ScheduleResume  ScheduleAction = 2 // fire again, from the next run after now
	ScheduleRunNow  ScheduleAction = 3 // enqueue a run now, as job Schedule.LastJobID
)

// Code implements Op.
func (*ScheduleOp) Code() OpCode { return OpSchedule }
func (o *ScheduleOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.bytes(o.Schedule.appendTo(nil))
	e.boolean(o.Delete)
	if o.Action != ScheduleReplace { // added later: absent in older entries
		e.u8(uint8(o.Action))
	}
	return e.b
}
func (o *ScheduleOp) decode(d *dec) {
	sd := dec{b: d.bytes()}
	o.Schedule.decode(&sd)
	if sd.err != nil {
		d.fail()
	}
	o.Delete = d.boolean()
	if d.more() {
		o.Action = ScheduleAction(d.u8())
	}
}

// CronTickOp fires the schedules whose runs are due (at most Limit runs).
type CronTickOp struct{ Limit uint32 }

// Code implements Op.
func (*CronTickOp) Code() OpCode { return OpCronTick }
func (o *CronTickOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.uvarint(uint64(o.Limit))
	return e.b
}
func (o *CronTickOp) decode(d *dec) { o.Limit = uint32(d.uvarint()) }

func (a *applier) loadSchedule(id string) (*Schedule, bool) {
	v, ok := a.get(scheduleKey(id))
	if !ok {
		return nil, false
	}
	s := &Schedule{}
	d := dec{b: v}
	s.decode(&d)
	if d.err != nil {
		a.fail(d.err)
		return nil, false
	}
	return s, true
}

func (a *applier) schedule(o *ScheduleOp) Result {
	switch o.Action {
	case ScheduleReplace:
	case SchedulePause, ScheduleResume:
		return a.pauseSchedule(o.Schedule.ID, o.Action == SchedulePause)
	case ScheduleRunNow:
		return a.runSchedule(o.Schedule.ID, o.Schedule.LastJobID)
	default:
		return Result{Status: StatusInvalid, Message: "unknown schedule action"}
	}
	in := o.Schedule
	old, exists := a.loadSchedule(in.ID)
	if exists {
		a.del(timeIndexKey(pfxScheduleX, old.NextRun, old.ID))
	}
	if o.Delete {
		if !exists {
			return Result{Status: StatusNotFound, Message: "schedule not found"}
		}
		a.del(scheduleKey(in.ID))
		a.s.schedules--
		a.s.nextCronStale = true
		return Result{}
	}
	next, err := NextRun(in.Cron, in.Timezone, a.now)
	if err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	in.NextRun, in.UpdatedAt = next, a.now
	if exists {
		// A replaced schedule keeps its history and stays paused if it was.
		in.CreatedAt, in.LastRun, in.LastJobID, in.Paused = old.CreatedAt, old.LastRun, old.LastJobID, old.Paused
	} else {
		in.CreatedAt = a.now
		a.s.schedules++
	}
	if in.Paused {
		in.NextRun = 0
	}
	a.set(scheduleKey(in.ID), in.appendTo(nil))
	if !in.Paused {
		a.set(timeIndexKey(pfxScheduleX, in.NextRun, in.ID), nil)
	}
	a.s.nextCronStale = true
	return Result{NextAttemptAt: in.NextRun}
}

// pauseSchedule takes a schedule off the cron index (pause) or puts it
// back with its first run after now (resume: runs missed while paused are
// skipped).
func (a *applier) pauseSchedule(id string, pause bool) Result {
	s, ok := a.loadSchedule(id)
	if !ok {
		return Result{Status: StatusNotFound, Message: "schedule not found"}
	}
	if s.Paused == pause {
		return Result{NextAttemptAt: s.NextRun}
	}
	if pause {
		a.del(timeIndexKey(pfxScheduleX, s.NextRun, s.ID))
		s.Paused, s.NextRun = true, 0
	} else {
		next, err := NextRun(s.Cron, s.Timezone, a.now)
		if err != nil {
			return Result{Status: StatusInvalid, Message: err.Error()}
		}
		s.Paused, s.NextRun = false, next
		a.set(timeIndexKey(pfxScheduleX, s.NextRun, s.ID), nil)
	}
	s.UpdatedAt = a.now
	a.set(scheduleKey(s.ID), s.appendTo(nil))
	a.s.nextCronStale = true
	return Result{NextAttemptAt: s.NextRun}
}

// runSchedule enqueues a run of the schedule now, as job jobID (stamped
// by the proposer), paused or not; its next cron run stays as it was.
func (a *applier) runSchedule(id, jobID string) Result {
	s, ok := a.loadSchedule(id)
	if !ok {
		return Result{Status: StatusNotFound, Message: "schedule not found"}
	}
	if jobID == "" {
		return Result{Status: StatusInvalid, Message: "a run needs a job id"}
	}
	r := a.fire(s, jobID)
	if r.Status != StatusOK {
		return r
	}
	if r.JobID == "" {
		r.JobID = jobID
	}
	s.LastRun, s.LastJobID = a.now, r.JobID
	a.set(scheduleKey(s.ID), s.appendTo(nil))
	return r
}

// cronTick fires every due run, oldest first.
func (a *applier) cronTick(o *CronTickOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 1000
	}
	fired := 0
	for fired < limit {
		it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxScheduleX), UpperBound: timeIndexUpper(pfxScheduleX, a.now)})
		if err != nil {
			a.fail(err)
			return Result{}
		}
		var k []byte
		if it.First() {
			k = append([]byte(nil), it.Key()...)
		}
		if err := it.Close(); err != nil || k == nil {
			a.fail(err)
			break
		}
		a.del(k)
		at, id, _ := splitTimeIndexKey(pfxScheduleX, k)
		s, ok := a.loadSchedule(id)
		if !ok || s.NextRun != at {
			continue // stale key
		}
		firedID := a.derivedID(a.selfShard(), s.ID, fmt.Sprint(s.NextRun))
		r := a.fire(s, firedID)
		fired++
		next, err := NextRun(s.Cron, s.Timezone, s.NextRun)
		if err != nil {
			a.s.cfg.Logger.Error().Err(err).Str("schedule", s.ID).Msg("schedule stopped")
			a.set(scheduleKey(s.ID), s.appendTo(nil))
			continue
		}
		s.LastRun, s.NextRun = s.NextRun, next
		if r.Status == StatusOK && r.JobID != "" {
			s.LastJobID = r.JobID // a live job held the unique key: that one
		} else if r.Status == StatusOK {
			s.LastJobID = firedID
		}
		a.set(scheduleKey(s.ID), s.appendTo(nil))
		a.set(timeIndexKey(pfxScheduleX, s.NextRun, s.ID), nil)
	}
	a.s.nextCronStale = true
	return Result{Count: uint32(fired)}
}

// fire enqueues the job of one run as job id (on this shard: the schedule
// lives on its queue's shard).
func (a *applier) fire(s *Schedule, id string) Result {
	opts := DefaultJobOptions()
	opts.Priority, opts.MaxRetries, opts.UniqueKey = s.Priority, s.MaxRetries, s.UniqueKey
	opts.Tags = []byte(`{"schedule":` + fmt.Sprintf("%q", s.ID) + `}`)
	j := Job{
		ID:         id,
		Queue:      s.Queue,
		Payload:    s.Payload,
		JobOptions: opts,
	}
	if len(j.Payload) == 0 {
		j.Payload = []byte("{}")
	}
	return a.enqueue(&EnqueueOp{Job: j, IfAbsent: true})
}

// refreshNextCron recomputes the earliest run after schedules changed.
func (a *applier) refreshNextCron() {
	if !a.s.nextCronStale {
		return
	}
	a.s.nextCronStale = false
	a.s.nextCron = 0
	if a.s.schedules <= 0 {
		return
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxScheduleX), UpperBound: prefixEnd([]byte(pfxScheduleX))})
	if err != nil {
		a.fail(err)
		return
	}
	defer it.Close()
	if it.First() {
		a.s.nextCron, _, _ = splitTimeIndexKey(pfxScheduleX, it.Key())
	}
}

// SchedulesQuery lists a shard's schedules; the answer is []Schedule.
type SchedulesQuery struct{}

func (s *StateMachine) listSchedules() ([]Schedule, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxSchedule), UpperBound: prefixEnd([]byte(pfxSchedule))})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Schedule
	for it.First(); it.Valid(); it.Next() {
		var sc Schedule
		d := dec{b: it.Value()}
		sc.decode(&d)
		if d.err != nil {
			return nil, d.err
		}
		out = append(out, sc)
	}
	return out, it.Error()
}

func (s *StateMachine) loadCronState() error {
	scheds, err := s.listSchedules()
	if err != nil {
		return err
	}
	s.schedules = int64(len(scheds))
	for _, sc := range scheds {
		if sc.Paused {
			continue
		}
		if s.nextCron == 0 || sc.NextRun < s.nextCron {
			s.nextCron = sc.NextRun
		}
	}
	return nil
}
