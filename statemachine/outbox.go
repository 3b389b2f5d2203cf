package statemachine

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The cross-shard outbox (ARCHITECTURE.md). An op whose effect belongs on
// another shard writes an outbox record in the same batch as its own
// change; the source shard's leader relays the record's op to the target
// shard, then proposes an OutboxAckOp that deletes it. Delivery is at least
// once; every op that travels this way is idempotent on its target, so the
// effect happens exactly once, across leader changes and crashes.

// OutboxRecord is one effect waiting for delivery (key ob|{seq:8BE}).
type OutboxRecord struct {
	Seq    uint64
	Target int // shard index
	Op     Op
}

func outboxKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(pfxOutbox), seq)
}

func (r *OutboxRecord) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(1)
	e.uvarint(uint64(r.Target))
	e.u8(uint8(r.Op.Code()))
	e.bytes(r.Op.appendBody(nil))
	return e.b
}

func decodeOutbox(seq uint64, v []byte) (OutboxRecord, error) {
	d := dec{b: v}
	r := OutboxRecord{Seq: seq}
	if d.u8() != 1 {
		return r, errShort
	}
	r.Target = int(d.uvarint())
	code := OpCode(d.u8())
	body := d.bytes()
	if d.err != nil {
		return r, d.err
	}
	op, err := decodeOp(code, body)
	if err != nil {
		return r, err
	}
	r.Op = op
	return r, nil
}

// emit writes an outbox record for op, to be applied on shard target.
func (a *applier) emit(target int, op Op) {
	a.outSeq++
	seq := a.index<<20 | uint64(a.outSeq)
	rec := OutboxRecord{Seq: seq, Target: target, Op: op}
	a.set(outboxKey(seq), rec.appendTo(nil))
	a.s.outbox++
}

// OutboxQuery reads up to Limit records; the answer is []OutboxRecord.
type OutboxQuery struct{ Limit int }

func (s *StateMachine) readOutbox(limit int) ([]OutboxRecord, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxOutbox), UpperBound: prefixEnd([]byte(pfxOutbox))})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []OutboxRecord
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		k := it.Key()
		if len(k) != len(pfxOutbox)+8 {
			continue
		}
		r, err := decodeOutbox(binary.BigEndian.Uint64(k[len(pfxOutbox):]), append([]byte(nil), it.Value()...))
		if err != nil {
			return nil, fmt.Errorf("corrupt outbox record: %w", err)
		}
		out = append(out, r)
	}
	return out, it.Error()
}

// OutboxAckOp deletes delivered outbox records.
type OutboxAckOp struct{ Seqs []uint64 }

// Code implements Op.
func (*OutboxAckOp) Code() OpCode { return OpOutboxAck }
func (o *OutboxAckOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.uvarint(uint64(len(o.Seqs)))
	for _, s := range o.Seqs {
		e.uvarint(s)
	}
	return e.b
}
func (o *OutboxAckOp) decode(d *dec) {
	n := d.uvarint()
	if n > MaxOpsPerEntry {
		d.fail()
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		o.Seqs = append(o.Seqs, d.uvarint())
	}
}

func (a *applier) outboxAck(o *OutboxAckOp) Result {
	n := 0
	for _, seq := range o.Seqs {
		k := outboxKey(seq)
		if _, ok := a.get(k); ok {
			a.del(k)
			a.s.outbox--
			n++
		}
	}
	return Result{Count: uint32(n)}
}

// MoveOutOp moves a job to a queue on another shard: the job leaves this
// shard and travels in the outbox as a MoveInOp under its new ID (job IDs
// carry their shard). The old ID answers "moved to" afterwards.
type MoveOutOp struct {
	JobID        string
	NewID        string
	Queue        string
	Target       int // the queue's shard
	ResetAttempt bool
	SetPriority  bool // the job takes Priority (else it keeps its own)
	Priority     Priority
}

// Code implements Op.
func (*MoveOutOp) Code() OpCode { return OpMoveOut }
func (o *MoveOutOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	e.str(o.NewID)
	e.str(o.Queue)
	e.uvarint(uint64(o.Target))
	e.boolean(o.ResetAttempt)
	appendMovePriority(&e, o.SetPriority, o.Priority)
	return e.b
}
func (o *MoveOutOp) decode(d *dec) {
	o.JobID = d.str()
	o.NewID = d.str()
	o.Queue = d.str()
	o.Target = int(d.uvarint())
	o.ResetAttempt = d.boolean()
	o.SetPriority, o.Priority = decodeMovePriority(d)
}

// MoveInOp lands a moved job on its new shard (idempotent: a job that
// already exists under the ID is left alone). It carries the job as a
// JobView, in JobView's encoding.
type MoveInOp struct{ JobView }

// Code implements Op.
func (*MoveInOp) Code() OpCode { return OpMoveIn }
func (o *MoveInOp) appendBody(b []byte) []byte {
	e := enc{b: o.JobView.appendTo(b)}
	appendUsageScores(&e, o.Usage, o.Scores)
	return e.b
}
func (o *MoveInOp) decode(d *dec) {
	o.JobView.decode(d)
	o.Usage, o.Scores = decodeUsageScores(d)
}

func movedKey(id string) []byte { return append([]byte(pfxMoved), id...) }

func (a *applier) moveOut(o *MoveOutOp) Result {
	j0, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j0.ID)
	if st.State == StateActive {
		return Result{Status: StatusConflict, State: st.State, Message: "an active job cannot be moved"}
	}
	if o.SetPriority && o.Priority > PriorityNormal {
		return Result{Status: StatusInvalid, Message: "unknown priority"}
	}
	if a.hasWatchers(j0.ID) || (st.State == StateHeld && st.Reason == HoldDependencies) {
		return Result{Status: StatusConflict, State: st.State, Message: "a job with dependency links cannot move to another shard"}
	}
	errs := a.errorsOf(j0.ID, st.Errors)
	var used []UsageRecord
	if st.UsageKeys > 0 {
		var err error
		if used, err = readUsage(a.b, j0.ID); err != nil {
			a.fail(err)
			return Result{}
		}
	}
	var scores []ScoreRecord
	if st.ScoreKeys > 0 {
		var err error
		if scores, err = readScores(a.b, j0.ID); err != nil {
			a.fail(err)
			return Result{}
		}
	}
	// Off every index here, then gone.
	if st.State.Terminal() {
		a.del(timeIndexKey(pfxFinished, st.CompletedAt, j0.ID))
	} else {
		a.unindex(j0, &st)
	}
	from := st.State
	j := *j0
	gone := st
	a.dropKeys(&j, &gone)
	if e := a.event(EventMoved, &Job{ID: j.ID, Queue: o.Queue}, &st); e != nil {
		e.FromQueue, e.MovedTo = j.Queue, o.NewID
	}
	a.set(movedKey(j.ID), []byte(o.NewID))

	j.ID, j.Queue = o.NewID, o.Queue
	j.UniqueKey, j.UniquePeriod = "", 0
	if o.SetPriority {
		j.Priority = o.Priority
	}
	if o.ResetAttempt {
		st.Attempt = 0
	}
	a.emit(o.Target, &MoveInOp{JobView{Job: j, State: st, Errors: errs, Usage: used, Scores: scores}})
	return Result{State: from, JobID: o.NewID, Queue: o.Queue}
}

func (a *applier) errorsOf(id string, n uint32) []JobError {
	if n == 0 {
		return nil
	}
	var out []JobError
	a.eachKey(errorPrefix(id), func(_, v []byte) bool {
		var je JobError
		d := dec{b: v}
		je.decode(&d)
		if d.err != nil {
			a.fail(d.err)
			out = nil
			return false
		}
		out = append(out, je)
		return true
	})
	return out
}

func (a *applier) moveIn(o *MoveInOp) Result {
	j := &o.Job
	if _, exists := a.get(jobKey(j.ID)); exists {
		return Result{State: o.State.State, Queue: j.Queue} // delivered before
	}
	st := o.State
	j.Seq = a.nextSeq() // a place in this shard's FIFO
	a.set(jobKey(j.ID), j.appendTo(nil))
	for i := range o.Errors {
		a.set(errorKey(j.ID, uint32(i+1)), o.Errors[i].appendTo(nil))
	}
	st.Errors = uint32(len(o.Errors))
	for i := range o.Usage {
		rec := o.Usage[i]
		rec.N = uint32(i + 1)
		a.set(usageKey(j.ID, rec.N), rec.appendTo(nil))
		if a.newUsage != nil {
			a.newUsage[j.ID] = append(a.newUsage[j.ID], rec)
		}
	}
	st.UsageKeys = uint32(len(o.Usage))
	for i := range o.Scores {
		rec := o.Scores[i]
		rec.N = uint32(i)
		a.set(scoreKey(j.ID, rec.N), rec.appendTo(nil))
		if a.newScores != nil {
			a.newScores[j.ID] = append(a.newScores[j.ID], rec)
		}
	}
	st.ScoreKeys = uint32(len(o.Scores))
	a.stats(j.Queue)
	switch st.State {
	case StatePending:
		a.putState(j, &st)
		a.addPending(j)
	case StateScheduled, StateRetrying:
		a.putState(j, &st)
		a.set(timeIndexKey(pfxDue, st.DueAt, j.ID), nil)
		a.rewind(&a.s.dueCursor, st.DueAt)
	default: // terminal: into the retention index, no second finish
		a.putState(j, &st)
		a.set(timeIndexKey(pfxFinished, st.CompletedAt, j.ID), nil)
		a.rewind(&a.s.purgeCursor, st.CompletedAt)
		if st.State == StateDead {
			a.setDead(j, &st)
		}
	}
	a.move(j.Queue, 0, st.State)
	return Result{State: st.State, Queue: j.Queue}
}

// MovedQuery asks where a moved job went; the answer is the new ID ("" if
// it was not moved).
type MovedQuery struct{ ID string }

func (s *StateMachine) movedTo(id string) (string, error) {
	var to string
	_, err := s.read(movedKey(id), func(d *dec) { to = string(d.b); d.b = nil })
	return to, err
}

func (s *StateMachine) countOutbox() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxOutbox), UpperBound: prefixEnd([]byte(pfxOutbox))})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		s.outbox++
	}
	return it.Error()
}
