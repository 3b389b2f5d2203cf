package statemachine

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"strconv"

	"github.com/oklog/ulid/v2"
)

// Batches and chains: what happens when a job finishes. Their effects may
// belong to other shards, so they go through the outbox (or apply at once
// when the target is this shard).

func (a *applier) selfShard() uint32 { return uint32(a.s.cfg.ShardID - 1) }

// send applies op here when target is this shard, or emits it.
func (a *applier) send(target uint32, op Op) {
	if target == a.selfShard() {
		a.apply(op)
		return
	}
	a.emit(int(target), op)
}

// derivedID is a job ID the state machine makes for a job it creates (a
// chain step, a callback): a function of its origin, so a replay or a
// second delivery names the same job. The ULID's time is the entry's.
func (a *applier) derivedID(shard uint32, origin, what string) string {
	sum := sha256.Sum256([]byte(origin + "\x00" + what))
	var u ulid.ULID
	_ = u.SetTime(uint64(a.now / 1e6))
	copy(u[6:], sum[:10])
	return "job_" + strconv.FormatUint(uint64(shard), 10) + "_" + u.String()
}

// afterFinish runs the batch and chain consequences of a job that just
// finished (completed, dead or cancelled).
func (a *applier) afterFinish(j *Job, st *JobState) {
	ok, reason := finishedHow(st.State)
	a.notifyWatchers(j.ID, ok, reason)
	if j.BatchID != "" {
		a.send(j.BatchShard, &BatchDoneOp{BatchID: j.BatchID, JobID: j.ID, OK: st.State == StateCompleted})
	}
	if c := j.Chain; c != nil {
		switch {
		case st.State == StateCompleted && a.ackStep == "exit":
			if c.OnExit != nil {
				a.chainJob(j, c.OnExit, "exit", withFields(c.OnExit.Payload, map[string]any{
					"chain_id": c.ID, "exited_at_step": c.Step, "previous_result": rawOrNull(st.Result)}), nil)
			}
		case st.State == StateCompleted && int(c.Step)+1 < len(c.Steps):
			next := c.Steps[c.Step+1]
			base := next.Payload
			if base == nil {
				base = j.Payload
			}
			nc := *c
			nc.Step++
			a.chainJob(j, &next, "step-"+strconv.Itoa(int(nc.Step)), withFields(base, map[string]any{"previous_result": rawOrNull(st.Result)}), &nc)
		case st.State == StateDead && c.OnFailure != nil:
			a.chainJob(j, c.OnFailure, "failure", withFields(c.OnFailure.Payload, map[string]any{
				"chain_id": c.ID, "failed_step": c.Step, "failed_job_id": j.ID, "error": st.LastError, "reason": st.Reason}), nil)
		}
	}
}

// chainJob enqueues the job a chain step leads to: the next step (with the
// chain carried on) or a handler (chain nil).
func (a *applier) chainJob(from *Job, to *ChainTarget, what string, payload []byte, chain *Chain) {
	nj := Job{
		ID:         a.derivedID(to.Shard, from.Chain.ID, what),
		Queue:      to.Queue,
		Payload:    payload,
		JobOptions: from.JobOptions.inherited(),
		Chain:      chain,
	}
	a.send(to.Shard, &EnqueueOp{Job: nj, IfAbsent: true})
}

func rawOrNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(b)
}

// withFields adds fields to a JSON object payload (keys sorted, so the
// bytes are deterministic); a payload that is not an object is wrapped as
// {"payload": …}.
func withFields(base []byte, fields map[string]any) []byte {
	obj := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(base); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, &obj); err != nil {
			obj = map[string]json.RawMessage{"payload": json.RawMessage(t)}
		}
	} else if len(t) > 0 {
		obj["payload"] = json.RawMessage(t)
	}
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		obj[k] = b
	}
	out, _ := json.Marshal(obj)
	return out
}

// ---- batches ----

// Batch is a group of jobs with a callback when all are finished (key
// b|{batch id}, on the batch's shard).
type Batch struct {
	ID              string
	Total           uint32 // 0 until the create op arrives
	Succeeded       uint32
	Failed          uint32
	CallbackQueue   string
	CallbackShard   uint32
	CallbackPayload []byte
	CallbackJobID   string
	CreatedAt       int64
	CompletedAt     int64
	// Namespace is the namespace of the request that made the batch (""
	// for the default one): another namespace's reads do not find it.
	Namespace string
}

func (b *Batch) appendTo(buf []byte) []byte {
	e := enc{b: buf}
	if b.Namespace != "" {
		e.u8(2) // version 1 and the namespace
	} else {
		e.u8(1)
	}
	e.str(b.ID)
	e.uvarint(uint64(b.Total))
	e.uvarint(uint64(b.Succeeded))
	e.uvarint(uint64(b.Failed))
	e.str(b.CallbackQueue)
	e.uvarint(uint64(b.CallbackShard))
	e.bytes(b.CallbackPayload)
	e.str(b.CallbackJobID)
	e.varint(b.CreatedAt)
	e.varint(b.CompletedAt)
	if b.Namespace != "" {
		e.str(b.Namespace)
	}
	return e.b
}

func (b *Batch) decode(d *dec) {
	v := d.u8()
	if v != 1 && v != 2 {
		d.fail()
		return
	}
	b.ID = d.str()
	b.Total = uint32(d.uvarint())
	b.Succeeded = uint32(d.uvarint())
	b.Failed = uint32(d.uvarint())
	b.CallbackQueue = d.str()
	b.CallbackShard = uint32(d.uvarint())
	b.CallbackPayload = cloneBytes(d.bytes())
	b.CallbackJobID = d.str()
	b.CreatedAt = d.varint()
	b.CompletedAt = d.varint()
	if v == 2 {
		b.Namespace = d.str()
	}
}

func batchKey(id string) []byte { return append([]byte(pfxBatch), id...) }

func batchJobKey(batch, job string) []byte {
	k := append([]byte(pfxBatchJob), batch...)
	k = append(k, 0)
	return append(k, job...)
}

// BatchCreateOp records a batch (idempotent; done-reports that arrived
// first are kept).
type BatchCreateOp struct{ Batch Batch }

// Code implements Op.
func (*BatchCreateOp) Code() OpCode                 { return OpBatchCreate }
func (o *BatchCreateOp) appendBody(b []byte) []byte { return o.Batch.appendTo(b) }
func (o *BatchCreateOp) decode(d *dec)              { o.Batch.decode(d) }

// BatchDoneOp reports one batch job finished (idempotent per job).
type BatchDoneOp struct {
	BatchID string
	JobID   string
	OK      bool
}

// Code implements Op.
func (*BatchDoneOp) Code() OpCode { return OpBatchDone }
func (o *BatchDoneOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.BatchID)
	e.str(o.JobID)
	e.boolean(o.OK)
	return e.b
}
func (o *BatchDoneOp) decode(d *dec) {
	o.BatchID = d.str()
	o.JobID = d.str()
	o.OK = d.boolean()
}

func (a *applier) loadBatch(id string) *Batch {
	b := &Batch{ID: id}
	if v, ok := a.get(batchKey(id)); ok {
		d := dec{b: v}
		b.decode(&d)
		if d.err != nil {
			a.fail(d.err)
		}
	}
	return b
}

func (a *applier) batchCreate(o *BatchCreateOp) Result {
	b := a.loadBatch(o.Batch.ID)
	if b.Total != 0 {
		return Result{} // created before
	}
	in := o.Batch
	b.Total, b.CallbackQueue, b.CallbackShard = in.Total, in.CallbackQueue, in.CallbackShard
	b.CallbackPayload, b.CallbackJobID, b.CreatedAt = in.CallbackPayload, in.CallbackJobID, a.now
	b.Namespace = in.Namespace
	a.maybeCompleteBatch(b)
	a.set(batchKey(b.ID), b.appendTo(nil))
	return Result{}
}

func (a *applier) batchDone(o *BatchDoneOp) Result {
	k := batchJobKey(o.BatchID, o.JobID)
	if _, seen := a.get(k); seen {
		return Result{}
	}
	a.set(k, nil)
	b := a.loadBatch(o.BatchID)
	if o.OK {
		b.Succeeded++
	} else {
		b.Failed++
	}
	a.maybeCompleteBatch(b)
	a.set(batchKey(b.ID), b.appendTo(nil))
	return Result{}
}

// maybeCompleteBatch fires the callback once every job has finished.
func (a *applier) maybeCompleteBatch(b *Batch) {
	if b.Total == 0 || b.CompletedAt != 0 || b.Succeeded+b.Failed < b.Total {
		return
	}
	b.CompletedAt = a.now
	if b.CallbackQueue == "" {
		return
	}
	payload := withFields(b.CallbackPayload, map[string]any{"batch": map[string]any{
		"id": b.ID, "total": b.Total, "succeeded": b.Succeeded, "failed": b.Failed}})
	cb := Job{ID: b.CallbackJobID, Queue: b.CallbackQueue, Payload: payload, JobOptions: DefaultJobOptions()}
	a.send(b.CallbackShard, &EnqueueOp{Job: cb, IfAbsent: true})
}

// BatchQuery reads a batch; the answer is *Batch (nil: none).
type BatchQuery struct{ ID string }

func (s *StateMachine) getBatch(id string) (*Batch, error) {
	b := &Batch{}
	ok, err := s.read(batchKey(id), b.decode)
	if err != nil || !ok {
		return nil, err
	}
	return b, nil
}
