package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/corvohq/corvo/internal/intern"
)

// OpCode identifies an op inside a Raft entry. Codes are append-only: never
// renumber or reuse one, or old logs replay differently.
type OpCode uint8

// Op codes.
const (
	OpEnqueue     OpCode = 1
	OpFetch       OpCode = 2
	OpAck         OpCode = 3
	OpFail        OpCode = 4
	OpHeartbeat   OpCode = 5
	OpCancel      OpCode = 6
	OpPromote     OpCode = 7
	OpReclaim     OpCode = 8
	OpPauseQueue  OpCode = 9
	OpResumeQueue OpCode = 10
	OpPruneDedup  OpCode = 11
	OpSetLimits   OpCode = 12
	OpSweep       OpCode = 13
	OpRetryJob    OpCode = 14
	OpDeleteJob   OpCode = 15
	OpMoveJob     OpCode = 16
	OpDropQueue   OpCode = 17
	OpMoveOut     OpCode = 18
	OpMoveIn      OpCode = 19
	OpOutboxAck   OpCode = 20
	OpBatchCreate OpCode = 21
	OpBatchDone   OpCode = 22
	OpDepWatch    OpCode = 23
	OpDepDone     OpCode = 24
	OpRelease     OpCode = 25
	OpSchedule    OpCode = 26
	OpCronTick    OpCode = 27
	OpRequeue     OpCode = 28
	OpPriority    OpCode = 29
	OpAudit       OpCode = 30
	OpPruneAudit  OpCode = 31
	OpImport      OpCode = 32
	OpAckFetch    OpCode = 33
	OpAcksFetch   OpCode = 34
	OpUnclaim     OpCode = 35
	OpScore       OpCode = 36
	OpSetBudget   OpCode = 40 // budget.go (37–39 unused)
	// provider.go
	OpSetProvider    OpCode = 41
	OpLinkProvider   OpCode = 42
	OpProviderMember OpCode = 43
	OpProviderShare  OpCode = 44
)

// MaxOpsPerEntry bounds one entry: an op's position is the low 16 bits of
// the FIFO sequence number.
const MaxOpsPerEntry = 1<<16 - 1

const entryVersion = 1

// EntryID identifies a proposal so that a retried proposal applies once. The
// first 8 bytes are the big-endian proposal time, so old IDs can be pruned by
// range.
type EntryID [16]byte

// NewEntryID builds an ID from a time and a random value.
func NewEntryID(nowNs int64, random uint64) EntryID {
	var id EntryID
	binary.BigEndian.PutUint64(id[:8], uint64(nowNs))
	binary.BigEndian.PutUint64(id[8:], random)
	return id
}

// Op is one operation inside an entry.
type Op interface {
	Code() OpCode
	appendBody(b []byte) []byte
}

// Entry is what the shard proposer puts in one Raft entry: every op shares
// the entry's time, stamped by the proposer (the state machine never reads a
// clock).
type Entry struct {
	ID EntryID
	// Retry marks a proposal sent again after a timeout (for logs and
	// tests). The state machine looks up every entry's ID, whatever the
	// flag: a retry may commit before its first attempt.
	Retry bool
	Now   int64 // Unix ns
	Ops   []Op
}

// RetryFlagOffset is where an encoded entry's retry flag byte sits, so a
// proposer can mark its retry without re-encoding.
const RetryFlagOffset = 1 + 16

// Encode appends the entry's wire form to b.
func (e *Entry) Encode(b []byte) []byte {
	b = append(b, entryVersion)
	b = append(b, e.ID[:]...)
	if e.Retry {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendVarint(b, e.Now)
	b = binary.AppendUvarint(b, uint64(len(e.Ops)))
	for _, op := range e.Ops {
		b = append(b, byte(op.Code()))
		lenAt := len(b)
		b = append(b, 0, 0, 0, 0) // fixed 4-byte length, patched below
		b = op.appendBody(b)
		binary.BigEndian.PutUint32(b[lenAt:], uint32(len(b)-lenAt-4))
	}
	return b
}

// DecodeEntry parses an entry.
func DecodeEntry(b []byte) (*Entry, error) { return decodeEntry(b, nil) }

// decodeEntry decodes an entry, interning its names in names (nil: none).
func decodeEntry(b []byte, names *intern.Table) (*Entry, error) {
	if len(b) < RetryFlagOffset+1 || b[0] != entryVersion {
		return nil, errors.New("statemachine: unknown entry version")
	}
	e := &Entry{}
	copy(e.ID[:], b[1:17])
	switch b[RetryFlagOffset] {
	case 0:
	case 1:
		e.Retry = true
	default:
		return nil, errors.New("statemachine: bad entry flags")
	}
	d := dec{b: b[RetryFlagOffset+1:]}
	e.Now = d.varint()
	n := d.uvarint()
	if d.err != nil || n > MaxOpsPerEntry {
		return nil, errors.New("statemachine: bad entry header")
	}
	e.Ops = make([]Op, 0, n)
	// The entry's enqueues share one allocation (a batch's entry holds
	// hundreds of them), and so do its acks.
	var enqs []EnqueueOp
	var acks []AckOp
	if ne, na := countOps(d.b, n); ne > 1 || na > 1 {
		if ne > 1 {
			enqs = make([]EnqueueOp, 0, ne)
		}
		if na > 1 {
			acks = make([]AckOp, 0, na)
		}
	}
	// One decoder for every op: its address goes through an interface
	// method, so each op's own made an allocation.
	od := new(dec)
	for i := uint64(0); i < n; i++ {
		if len(d.b) < 5 {
			return nil, errShort
		}
		code := OpCode(d.b[0])
		l := binary.BigEndian.Uint32(d.b[1:5])
		if uint64(len(d.b)-5) < uint64(l) {
			return nil, errShort
		}
		*od = dec{b: d.b[5 : 5+l], names: names}
		d.b = d.b[5+l:]
		var op Op
		switch {
		case code == OpEnqueue && len(enqs) < cap(enqs):
			enqs = enqs[:len(enqs)+1]
			eo := &enqs[len(enqs)-1]
			eo.decode(od)
			op = eo
		case code == OpAck && len(acks) < cap(acks):
			acks = acks[:len(acks)+1]
			ao := &acks[len(acks)-1]
			ao.decode(od)
			op = ao
		default:
			var err error
			if op, err = decodeOpWith(code, od); err != nil {
				return nil, fmt.Errorf("op %d (code %d): %w", i, code, err)
			}
		}
		if od.err != nil {
			return nil, fmt.Errorf("op %d (code %d): %w", i, code, od.err)
		}
		e.Ops = append(e.Ops, op)
	}
	if len(d.b) != 0 {
		return nil, errors.New("statemachine: trailing bytes after entry")
	}
	return e, nil
}

func decodeOp(code OpCode, body []byte) (Op, error) { return decodeOpNames(code, body, nil) }

// countOps counts the enqueues and the acks among the first n framed ops
// of b ([code][u32 length][body] each), stopping at the first short one.
func countOps(b []byte, n uint64) (enqueues, acks int) {
	for ; n > 0 && len(b) >= 5; n-- {
		l := binary.BigEndian.Uint32(b[1:5])
		if uint64(len(b)-5) < uint64(l) {
			break
		}
		switch OpCode(b[0]) {
		case OpEnqueue:
			enqueues++
		case OpAck:
			acks++
		}
		b = b[5+l:]
	}
	return enqueues, acks
}

// decodeOpNames decodes an op, interning its names in names (nil: none).
func decodeOpNames(code OpCode, body []byte, names *intern.Table) (Op, error) {
	return decodeOpWith(code, &dec{b: body, names: names})
}

// decodeOpWith decodes an op from d.
func decodeOpWith(code OpCode, d *dec) (Op, error) {
	var op interface {
		Op
		decode(*dec)
	}
	switch code {
	case OpEnqueue:
		op = &EnqueueOp{}
	case OpFetch:
		op = &FetchOp{}
	case OpAck:
		op = &AckOp{}
	case OpFail:
		op = &FailOp{}
	case OpHeartbeat:
		op = &HeartbeatOp{}
	case OpCancel:
		op = &CancelOp{}
	case OpPromote:
		op = &PromoteOp{}
	case OpReclaim:
		op = &ReclaimOp{}
	case OpPauseQueue:
		op = &PauseQueueOp{}
	case OpResumeQueue:
		op = &ResumeQueueOp{}
	case OpPruneDedup:
		op = &PruneDedupOp{}
	case OpSetLimits:
		op = &SetLimitsOp{}
	case OpSweep:
		op = &SweepOp{}
	case OpRetryJob:
		op = &RetryJobOp{}
	case OpDeleteJob:
		op = &DeleteJobOp{}
	case OpMoveJob:
		op = &MoveJobOp{}
	case OpDropQueue:
		op = &DropQueueOp{}
	case OpMoveOut:
		op = &MoveOutOp{}
	case OpMoveIn:
		op = &MoveInOp{}
	case OpOutboxAck:
		op = &OutboxAckOp{}
	case OpBatchCreate:
		op = &BatchCreateOp{}
	case OpBatchDone:
		op = &BatchDoneOp{}
	case OpDepWatch:
		op = &DepWatchOp{}
	case OpDepDone:
		op = &DepDoneOp{}
	case OpRelease:
		op = &ReleaseOp{}
	case OpSchedule:
		op = &ScheduleOp{}
	case OpCronTick:
		op = &CronTickOp{}
	case OpRequeue:
		op = &RequeueOp{}
	case OpPriority:
		op = &PriorityOp{}
	case OpAudit:
		op = &AuditOp{}
	case OpPruneAudit:
		op = &PruneAuditOp{}
	case OpImport:
		op = &ImportOp{}
	case OpAckFetch:
		op = &AckFetchOp{}
	case OpAcksFetch:
		op = &AcksFetchOp{}
	case OpUnclaim:
		op = &UnclaimOp{}
	case OpScore:
		op = &ScoreOp{}
	case OpSetBudget:
		op = &SetBudgetOp{}
	case OpSetProvider:
		op = &SetProviderOp{}
	case OpLinkProvider:
		op = &LinkProviderOp{}
	case OpProviderMember:
		op = &ProviderMemberOp{}
	case OpProviderShare:
		op = &ProviderShareOp{}
	default:
		return nil, fmt.Errorf("unknown op code %d", code)
	}
	op.decode(d)
	if d.err != nil {
		return nil, d.err
	}
	return op, nil
}

// EnqueueOp creates a job. The gateway fills the job's ID and options; the
// state machine sets CreatedAt, Seq and ExpireAt. An enqueue of an ID that
// exists changes nothing and answers Existing (applier.enqueue). IfAbsent
// marks the ops a shard sends another (chain steps, batch callbacks: they
// travel the outbox and may arrive twice) and cron runs; it is kept in the
// encoding, and the rule is the same for every enqueue.
type EnqueueOp struct {
	Job      Job
	IfAbsent bool
	// Budget is what the gateway found of the job's budgets when it
	// proposed the op (budget.go): BudgetHold enqueues the job held
	// (Reason HoldBudget), BudgetAlert records an EventBudgetExceeded.
	Budget BudgetVerdict
}

// BudgetVerdict is an enqueue's budget decision, made by the proposer.
type BudgetVerdict uint8

// Budget verdicts.
const (
	BudgetOK    BudgetVerdict = 0
	BudgetHold  BudgetVerdict = 1
	BudgetAlert BudgetVerdict = 2
)

// Code implements Op.
func (*EnqueueOp) Code() OpCode { return OpEnqueue }

// The last byte of an enqueue's body: bit 0 IfAbsent, bits 1–2 the budget
// verdict (0 in entries written before budgets).
func (o *EnqueueOp) appendBody(b []byte) []byte {
	b = o.Job.appendTo(b)
	f := byte(o.Budget&3) << 1
	if o.IfAbsent {
		f |= 1
	}
	return append(b, f)
}
func (o *EnqueueOp) decode(d *dec) {
	// The body is the job record then the flags byte: the job is read
	// from the body less its last byte, so that fields appended to Job
	// read as absent in entries written before them (wire.go, rule 4).
	if len(d.b) == 0 {
		d.fail()
		return
	}
	jd := dec{b: d.b[:len(d.b)-1]}
	o.Job.decode(&jd)
	if jd.err != nil {
		d.fail()
		return
	}
	f := d.b[len(d.b)-1]
	d.b = d.b[len(d.b):]
	if f > 5 { // a verdict of 3 is none
		d.fail()
		return
	}
	o.IfAbsent, o.Budget = f&1 == 1, BudgetVerdict(f>>1)
}

// FetchOp claims up to Count pending jobs from Queues (all on this shard).
type FetchOp struct {
	Queues   []string
	WorkerID string
	Hostname string
	Count    uint32
}

// Code implements Op.
func (*FetchOp) Code() OpCode { return OpFetch }
func (o *FetchOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.uvarint(uint64(len(o.Queues)))
	for _, q := range o.Queues {
		e.str(q)
	}
	e.str(o.WorkerID)
	e.str(o.Hostname)
	e.uvarint(uint64(o.Count))
	return e.b
}
func (o *FetchOp) decode(d *dec) {
	n := d.uvarint()
	if n > 1024 {
		d.fail()
		return
	}
	o.Queues = make([]string, 0, n)
	for i := uint64(0); i < n; i++ {
		o.Queues = append(o.Queues, d.name())
	}
	o.WorkerID = d.name()
	o.Hostname = d.name()
	o.Count = uint32(d.uvarint())
}

// Holder says which lease an ack, fail or heartbeat speaks for. Empty fields
// are not checked.
type Holder struct {
	WorkerID string
	Attempt  uint32
}

func (h *Holder) append(e *enc) {
	e.str(h.WorkerID)
	e.uvarint(uint64(h.Attempt))
}
func (h *Holder) decode(d *dec) {
	h.WorkerID = d.name()
	h.Attempt = uint32(d.uvarint())
}

// AckOp completes an active job.
type AckOp struct {
	JobID  string
	Holder Holder
	Result []byte
	// StepStatus steers a chain: "" or "continue" runs the next step,
	// "exit" skips the rest (and runs on_exit).
	StepStatus string
	Usage      *Usage // what the attempt used beyond its heartbeats (nil: none)
	// SchemaChecked says the gateway validated Result against the job's
	// result_schema: an ack of a job with one applies only then.
	SchemaChecked bool
}

// Code implements Op.
func (*AckOp) Code() OpCode { return OpAck }
func (o *AckOp) appendBody(b []byte) []byte {
	e := enc{b: o.appendFields(b)}
	o.appendLater(&e)
	return e.b
}

// appendLater writes the fields appended to the ack after its first
// release (wire.go), each left out while it and every later one are
// unset: the usage (a flag, then the usage), then SchemaChecked.
func (o *AckOp) appendLater(e *enc) {
	if o.Usage == nil && !o.SchemaChecked {
		return
	}
	e.boolean(o.Usage != nil)
	if o.Usage != nil {
		o.Usage.append(e)
	}
	if o.SchemaChecked {
		e.boolean(true)
	}
}

func (o *AckOp) decodeLater(d *dec) {
	o.Usage = decodeOptUsage(d)
	if d.more() {
		o.SchemaChecked = d.boolean()
	}
}

// appendFields writes the ack's first-release fields: AckFetchOp holds
// them inline, so the fields appended later go at the end of each op.
func (o *AckOp) appendFields(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	o.Holder.append(&e)
	e.bytes(o.Result)
	e.str(o.StepStatus)
	return e.b
}
func (o *AckOp) decode(d *dec) {
	o.decodeFields(d)
	o.decodeLater(d)
}
func (o *AckOp) decodeFields(d *dec) {
	o.JobID = d.str()
	o.Holder.decode(d)
	o.Result = d.bytes()
	o.StepStatus = d.str()
}

// AckFetchOp is an ack and the worker's next fetch in one op: the fetch
// runs only when the ack succeeds, so a refused ack (a lease lost, a job
// gone) claims nothing. Its result is the ack's, with the fetch's jobs.
type AckFetchOp struct {
	Ack   AckOp
	Fetch FetchOp
}

// Code implements Op.
func (*AckFetchOp) Code() OpCode { return OpAckFetch }
func (o *AckFetchOp) appendBody(b []byte) []byte {
	e := enc{b: o.Fetch.appendBody(o.Ack.appendFields(b))}
	o.Ack.appendLater(&e)
	return e.b
}
func (o *AckFetchOp) decode(d *dec) {
	o.Ack.decodeFields(d)
	o.Fetch.decode(d)
	o.Ack.decodeLater(d)
}

// UnclaimOp hands back an active job whose fetch answer never reached its
// worker (the connection closed while the fetch waited): pending again at
// once, the attempt not counted, no error recorded. Holder names the
// claim being undone; any other state or holder is a conflict.
type UnclaimOp struct {
	JobID  string
	Holder Holder
}

// Code implements Op.
func (*UnclaimOp) Code() OpCode { return OpUnclaim }
func (o *UnclaimOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	o.Holder.append(&e)
	return e.b
}
func (o *UnclaimOp) decode(d *dec) {
	o.JobID = d.str()
	o.Holder.decode(d)
}

// AcksFetchOp is the fetch of an ack batch: it comes right after the
// batch's Acks acks in the same request's ops (one request's ops travel in
// one entry, in order) and claims up to Fetch.Count jobs only when at
// least one of those acks applied, so a batch whose acks were all refused
// claims nothing. Ops before it that are not AckOps never count. Its
// result carries the fetch's jobs (none when no ack applied).
type AcksFetchOp struct {
	Acks  uint32
	Fetch FetchOp
}

// Code implements Op.
func (*AcksFetchOp) Code() OpCode { return OpAcksFetch }
func (o *AcksFetchOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.uvarint(uint64(o.Acks))
	return o.Fetch.appendBody(e.b)
}
func (o *AcksFetchOp) decode(d *dec) {
	o.Acks = uint32(d.uvarint())
	o.Fetch.decode(d)
}

// FailOp records a failed attempt of an active job.
type FailOp struct {
	JobID      string
	Holder     Holder
	Error      string
	Backtrace  string
	Checkpoint []byte // optional: stored before the job is retried
	Usage      *Usage // what the attempt used beyond its heartbeats (nil: none)
	// ProviderError: the model's provider failed (not the job); a routed
	// job moves to its next model (routing.go).
	ProviderError bool
}

// Code implements Op.
func (*FailOp) Code() OpCode { return OpFail }
func (o *FailOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	o.Holder.append(&e)
	e.str(o.Error)
	e.str(o.Backtrace)
	e.bytes(o.Checkpoint)
	// Appended later (wire.go), each left out while it and every later
	// one are empty.
	if o.ProviderError && o.Usage == nil {
		e.boolean(false)
	}
	appendOptUsage(&e, o.Usage)
	if o.ProviderError {
		e.boolean(true)
	}
	return e.b
}
func (o *FailOp) decode(d *dec) {
	o.JobID = d.str()
	o.Holder.decode(d)
	o.Error = d.str()
	o.Backtrace = d.str()
	o.Checkpoint = d.bytes()
	o.Usage = decodeOptUsage(d)
	o.ProviderError = d.more() && d.boolean()
}

// HeartbeatJob is one job in a heartbeat.
type HeartbeatJob struct {
	JobID      string
	Progress   []byte // raw JSON, nil = unchanged
	Checkpoint []byte // raw JSON, nil = unchanged
	Attempt    uint32 // the lease's attempt; 0 = not checked
	Usage      *Usage // the attempt's usage so far, cumulative (nil: none)
}

// HeartbeatOp extends the leases of active jobs and stores progress and
// checkpoints.
type HeartbeatOp struct {
	WorkerID string
	Jobs     []HeartbeatJob
}

// Code implements Op.
func (*HeartbeatOp) Code() OpCode { return OpHeartbeat }
func (o *HeartbeatOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.WorkerID)
	e.uvarint(uint64(len(o.Jobs)))
	for i := range o.Jobs {
		e.str(o.Jobs[i].JobID)
		e.bytes(o.Jobs[i].Progress)
		e.bytes(o.Jobs[i].Checkpoint)
	}
	// Appended later: the attempts, one per job, after the body above so
	// that ops already in Raft logs (which end there) decode unchanged.
	// Left out when no job names one: the encoding is then the old one.
	// Then, appended later still, the usage of each job (a flag, and the
	// usage when set), left out when no job has any; the attempts are
	// written whenever the usage is.
	usage := slices.ContainsFunc(o.Jobs, func(j HeartbeatJob) bool { return j.Usage != nil })
	if usage || slices.ContainsFunc(o.Jobs, func(j HeartbeatJob) bool { return j.Attempt != 0 }) {
		e.uvarint(uint64(len(o.Jobs)))
		for i := range o.Jobs {
			e.uvarint(uint64(o.Jobs[i].Attempt))
		}
	}
	if usage {
		e.uvarint(uint64(len(o.Jobs)))
		for i := range o.Jobs {
			e.boolean(o.Jobs[i].Usage != nil)
			if u := o.Jobs[i].Usage; u != nil {
				u.append(&e)
			}
		}
	}
	return e.b
}
func (o *HeartbeatOp) decode(d *dec) {
	o.WorkerID = d.str()
	n := d.uvarint()
	if n > MaxOpsPerEntry {
		d.fail()
		return
	}
	o.Jobs = make([]HeartbeatJob, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		o.Jobs = append(o.Jobs, HeartbeatJob{JobID: d.str(), Progress: d.bytes(), Checkpoint: d.bytes()})
	}
	if !d.more() {
		return // the old format: no attempts
	}
	if d.uvarint() != n {
		d.fail()
		return
	}
	for i := range o.Jobs {
		a := d.uvarint()
		if a > math.MaxUint32 {
			d.fail()
			return
		}
		o.Jobs[i].Attempt = uint32(a)
	}
	if !d.more() {
		return // no usage
	}
	if d.uvarint() != n {
		d.fail()
		return
	}
	for i := range o.Jobs {
		if d.boolean() {
			o.Jobs[i].Usage = &Usage{}
			o.Jobs[i].Usage.decode(d)
		}
	}
}

// CancelOp cancels a job: at once unless it is active, then on its next
// heartbeat.
type CancelOp struct{ JobID string }

// Code implements Op.
func (*CancelOp) Code() OpCode                 { return OpCancel }
func (o *CancelOp) appendBody(b []byte) []byte { e := enc{b: b}; e.str(o.JobID); return e.b }
func (o *CancelOp) decode(d *dec)              { o.JobID = d.str() }

// PromoteOp moves due scheduled and retrying jobs to pending.
type PromoteOp struct{ Limit uint32 }

// Code implements Op.
func (*PromoteOp) Code() OpCode { return OpPromote }
func (o *PromoteOp) appendBody(b []byte) []byte {
	return binary.AppendUvarint(b, uint64(o.Limit))
}
func (o *PromoteOp) decode(d *dec) { o.Limit = uint32(d.uvarint()) }

// ReclaimOp returns active jobs whose lease expired to pending.
type ReclaimOp struct{ Limit uint32 }

// Code implements Op.
func (*ReclaimOp) Code() OpCode { return OpReclaim }
func (o *ReclaimOp) appendBody(b []byte) []byte {
	return binary.AppendUvarint(b, uint64(o.Limit))
}
func (o *ReclaimOp) decode(d *dec) { o.Limit = uint32(d.uvarint()) }

// PauseQueueOp stops fetches from a queue.
type PauseQueueOp struct{ Queue string }

// Code implements Op.
func (*PauseQueueOp) Code() OpCode                 { return OpPauseQueue }
func (o *PauseQueueOp) appendBody(b []byte) []byte { e := enc{b: b}; e.str(o.Queue); return e.b }
func (o *PauseQueueOp) decode(d *dec)              { o.Queue = d.str() }

// ResumeQueueOp undoes PauseQueueOp.
type ResumeQueueOp struct{ Queue string }

// Code implements Op.
func (*ResumeQueueOp) Code() OpCode                 { return OpResumeQueue }
func (o *ResumeQueueOp) appendBody(b []byte) []byte { e := enc{b: b}; e.str(o.Queue); return e.b }
func (o *ResumeQueueOp) decode(d *dec)              { o.Queue = d.str() }

// SetLimitsOp changes a queue's concurrency cap and/or throttle.
type SetLimitsOp struct {
	Queue          string
	SetConcurrency bool
	MaxConcurrency uint32 // 0: no cap
	SetThrottle    bool
	RateLimit      uint32 // 0: no throttle
	RateWindowMs   int64
}

// Code implements Op.
func (*SetLimitsOp) Code() OpCode { return OpSetLimits }
func (o *SetLimitsOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Queue)
	e.boolean(o.SetConcurrency)
	e.uvarint(uint64(o.MaxConcurrency))
	e.boolean(o.SetThrottle)
	e.uvarint(uint64(o.RateLimit))
	e.varint(o.RateWindowMs)
	return e.b
}
func (o *SetLimitsOp) decode(d *dec) {
	o.Queue = d.str()
	o.SetConcurrency = d.boolean()
	o.MaxConcurrency = uint32(d.uvarint())
	o.SetThrottle = d.boolean()
	o.RateLimit = uint32(d.uvarint())
	o.RateWindowMs = d.varint()
}

// SweepOp is the leader's periodic housekeeping: jobs past expire_at go
// dead, expired unique locks go, and terminal jobs finished before
// PurgeBefore (0: none) are deleted. Each part handles at most Limit items.
type SweepOp struct {
	Limit       uint32
	PurgeBefore int64
}

// Code implements Op.
func (*SweepOp) Code() OpCode { return OpSweep }
func (o *SweepOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.uvarint(uint64(o.Limit))
	e.varint(o.PurgeBefore)
	return e.b
}
func (o *SweepOp) decode(d *dec) {
	o.Limit = uint32(d.uvarint())
	o.PurgeBefore = d.varint()
}

// RetryJobOp sends a completed, dead or cancelled job back to pending with
// its attempts reset (its error history kept).
type RetryJobOp struct{ JobID string }

// Code implements Op.
func (*RetryJobOp) Code() OpCode                 { return OpRetryJob }
func (o *RetryJobOp) appendBody(b []byte) []byte { e := enc{b: b}; e.str(o.JobID); return e.b }
func (o *RetryJobOp) decode(d *dec)              { o.JobID = d.str() }

// DeleteJobOp removes a job and everything about it, in any state.
type DeleteJobOp struct{ JobID string }

// Code implements Op.
func (*DeleteJobOp) Code() OpCode                 { return OpDeleteJob }
func (o *DeleteJobOp) appendBody(b []byte) []byte { e := enc{b: b}; e.str(o.JobID); return e.b }
func (o *DeleteJobOp) decode(d *dec)              { o.JobID = d.str() }

// MoveJobOp moves a pending, scheduled, dead or completed job to another
// queue of the same shard (optionally resetting its attempts, and giving
// it another priority).
type MoveJobOp struct {
	JobID        string
	Queue        string
	ResetAttempt bool
	SetPriority  bool // the job takes Priority (else it keeps its own)
	Priority     Priority
}

// Code implements Op.
func (*MoveJobOp) Code() OpCode { return OpMoveJob }
func (o *MoveJobOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	e.str(o.Queue)
	e.boolean(o.ResetAttempt)
	appendMovePriority(&e, o.SetPriority, o.Priority)
	return e.b
}
func (o *MoveJobOp) decode(d *dec) {
	o.JobID = d.str()
	o.Queue = d.str()
	o.ResetAttempt = d.boolean()
	o.SetPriority, o.Priority = decodeMovePriority(d)
}

// appendMovePriority writes the priority fields added to the move ops,
// left out while unset (wire.go, rule 6); decodeMovePriority reads them.
func appendMovePriority(e *enc, set bool, p Priority) {
	if set {
		e.boolean(true)
		e.u8(uint8(p))
	}
}

func decodeMovePriority(d *dec) (bool, Priority) {
	if !d.more() {
		return false, 0
	}
	set := d.boolean()
	return set, Priority(d.u8())
}

// Indexes DropQueueOp walks.
const (
	DropPending  uint8 = 0 // p| (pending)
	DropDue      uint8 = 1 // d| (scheduled, retrying)
	DropActive   uint8 = 2 // l| (active)
	DropFinished uint8 = 3 // t| (completed, dead, cancelled)
	DropConfig   uint8 = 4 // the queue's stats and settings, once it has no job
)

// DropQueueOp deletes a queue's jobs found in one index, examining at most
// Limit keys after After; the result's Cursor says where to go on (nil:
// done). Clearing a queue walks pending and due; deleting it walks all.
type DropQueueOp struct {
	Queue string
	Index uint8
	After []byte
	Limit uint32
}

// Code implements Op.
func (*DropQueueOp) Code() OpCode { return OpDropQueue }
func (o *DropQueueOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Queue)
	e.u8(o.Index)
	e.bytes(o.After)
	e.uvarint(uint64(o.Limit))
	return e.b
}
func (o *DropQueueOp) decode(d *dec) {
	o.Queue = d.str()
	o.Index = d.u8()
	o.After = d.bytes()
	o.Limit = uint32(d.uvarint())
}

// RequeueOp sends a dead job back to pending in its queue, keeping its
// attempt count and history.
type RequeueOp struct{ JobID string }

// Code implements Op.
func (*RequeueOp) Code() OpCode                 { return OpRequeue }
func (o *RequeueOp) appendBody(b []byte) []byte { e := enc{b: b}; e.str(o.JobID); return e.b }
func (o *RequeueOp) decode(d *dec)              { o.JobID = d.str() }

// PriorityOp changes the priority tier of a pending or scheduled job.
type PriorityOp struct {
	JobID    string
	Priority Priority
}

// Code implements Op.
func (*PriorityOp) Code() OpCode { return OpPriority }
func (o *PriorityOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	e.u8(uint8(o.Priority))
	return e.b
}
func (o *PriorityOp) decode(d *dec) {
	o.JobID = d.str()
	o.Priority = Priority(d.u8())
}

// PruneDedupOp forgets the results of entries proposed before Before (ns).
type PruneDedupOp struct{ Before int64 }

// Code implements Op.
func (*PruneDedupOp) Code() OpCode { return OpPruneDedup }
func (o *PruneDedupOp) appendBody(b []byte) []byte {
	return binary.AppendVarint(b, o.Before)
}
func (o *PruneDedupOp) decode(d *dec) { o.Before = d.varint() }

// Status is an op's outcome.
type Status uint8

// Op outcomes. The gateway maps them to HTTP statuses.
const (
	StatusOK       Status = 0
	StatusNotFound Status = 1 // no such job
	StatusConflict Status = 2 // wrong state, or not held under this lease
	StatusInvalid  Status = 3 // rejected by the state machine
	// StatusSchemaRequired: an ack of a job with a result_schema that the
	// gateway did not validate (AckOp.SchemaChecked); nothing changed.
	StatusSchemaRequired Status = 4
)

// HeartbeatStatus is the answer for one job of a heartbeat.
type HeartbeatStatus uint8

// Heartbeat answers.
const (
	HeartbeatOK       HeartbeatStatus = 0
	HeartbeatCancel   HeartbeatStatus = 1 // the job was cancelled: stop working on it
	HeartbeatLost     HeartbeatStatus = 2 // this worker no longer holds the job
	HeartbeatNotFound HeartbeatStatus = 3
	// HeartbeatBudgetExceeded: the lease is extended (as HeartbeatOK), and
	// the job's cost is past a per-job budget that applies to it.
	HeartbeatBudgetExceeded HeartbeatStatus = 4
)

// Result is the outcome of one op.
type Result struct {
	Status            Status
	State             State  // the job's state afterwards (enqueue, ack, fail, cancel)
	NextAttemptAt     int64  // fail → retrying
	AttemptsRemaining uint32 // fail
	Count             uint32 // promote, reclaim, prune: how many were affected
	Message           string // detail for a non-OK status
	Queue             string // the job's queue (ack, fail, cancel), for metrics
	Existing          bool   // enqueue: a live job holds the unique key …
	JobID             string // … and this is it
	Cursor            []byte // DropQueueOp: where to go on (nil: done)
	Jobs              []JobView
	Heartbeats        []HeartbeatStatus
	// Usage is what each usage report the op applied changed (ack, fail,
	// heartbeat): a report, or a heartbeat's report less the one it
	// replaced.
	Usage []UsageRecord
	// CachedFrom: the enqueue found a cached result and the job was
	// created completed with that job's result.
	CachedFrom string
	// Members: a LinkProviderOp's shard's membership of the providers
	// the link changed (or of the one it links to, when linked already).
	Members []ProviderMember
	// Share: a ProviderShareOp's answer (nil for other ops).
	Share *ProviderShareState
}

// encodeResults writes op results. With compact set, fetched jobs are stored
// by ID only (the dedup record); the state machine reloads them on replay.
func encodeResults(b []byte, rs []Result, compact bool) []byte {
	e := enc{b: b}
	e.boolean(compact)
	e.uvarint(uint64(len(rs)))
	for i := range rs {
		r := &rs[i]
		e.u8(uint8(r.Status))
		e.u8(uint8(r.State))
		e.varint(r.NextAttemptAt)
		e.uvarint(uint64(r.AttemptsRemaining))
		e.uvarint(uint64(r.Count))
		e.str(r.Message)
		e.str(r.Queue)
		e.boolean(r.Existing)
		e.str(r.JobID)
		e.bytes(r.Cursor)
		e.uvarint(uint64(len(r.Jobs)))
		for j := range r.Jobs {
			if compact {
				e.str(r.Jobs[j].Job.ID)
			} else {
				e.b = r.Jobs[j].appendTo(e.b)
			}
		}
		e.uvarint(uint64(len(r.Heartbeats)))
		for _, h := range r.Heartbeats {
			e.u8(uint8(h))
		}
	}
	// Appended later (wire.go, rule 5): each result's usage, after every
	// result, left out when none has any.
	// Then each result's CachedFrom, left out when none has one (the
	// usage lists are then written, empty or not).
	// Then each result's Members, left out when none has any (the lists
	// before are then written).
	// Then each result's Share, left out when none has one (the lists
	// before are then written).
	shares := slices.ContainsFunc(rs, func(r Result) bool { return r.Share != nil })
	members := shares || slices.ContainsFunc(rs, func(r Result) bool { return len(r.Members) > 0 })
	cached := members || slices.ContainsFunc(rs, func(r Result) bool { return r.CachedFrom != "" })
	if cached || slices.ContainsFunc(rs, func(r Result) bool { return len(r.Usage) > 0 }) {
		for i := range rs {
			e.uvarint(uint64(len(rs[i].Usage)))
			for k := range rs[i].Usage {
				e.bytes(rs[i].Usage[k].appendTo(nil))
			}
		}
	}
	if cached {
		for i := range rs {
			e.str(rs[i].CachedFrom)
		}
	}
	if members {
		for i := range rs {
			e.uvarint(uint64(len(rs[i].Members)))
			for _, m := range rs[i].Members {
				e.str(m.Name)
				e.uvarint(uint64(m.Shard))
				e.uvarint(m.Gen)
				e.boolean(m.In)
			}
		}
	}
	if shares {
		for i := range rs {
			st := rs[i].Share
			e.boolean(st != nil)
			if st != nil {
				e.uvarint(st.Gen)
				for _, v := range []int64{st.Share.RPM, st.Share.InputTPM, st.Share.OutputTPM, st.Held.RPM, st.Held.InputTPM, st.Held.OutputTPM} {
					e.varint(v)
				}
			}
		}
	}
	return e.b
}

// AppendResults appends the full (non-compact) wire form of op results to
// b, as an entry's Update returns them: fetched jobs travel whole. It is
// how a node that proposed on behalf of another hands the results back;
// DecodeResults reads it.
func AppendResults(b []byte, rs []Result) []byte { return encodeResults(b, rs, false) }

// DecodeResults parses the results an entry's Update returned.
func DecodeResults(b []byte) ([]Result, error) {
	rs, _, err := decodeResults(b)
	return rs, err
}

func decodeResults(b []byte) ([]Result, bool, error) {
	d := dec{b: b}
	compact := d.boolean()
	n := d.uvarint()
	if d.err != nil || n > MaxOpsPerEntry {
		return nil, false, errShort
	}
	rs := make([]Result, n)
	for i := range rs {
		r := &rs[i]
		r.Status = Status(d.u8())
		r.State = State(d.u8())
		r.NextAttemptAt = d.varint()
		r.AttemptsRemaining = uint32(d.uvarint())
		r.Count = uint32(d.uvarint())
		r.Message = d.str()
		r.Queue = d.str()
		r.Existing = d.boolean()
		r.JobID = d.str()
		r.Cursor = cloneBytes(d.bytes())
		nj := d.uvarint()
		if nj > MaxOpsPerEntry {
			return nil, false, errShort
		}
		if nj > 0 {
			r.Jobs = make([]JobView, nj)
		}
		for j := range r.Jobs {
			if compact {
				r.Jobs[j].Job.ID = d.str()
			} else {
				r.Jobs[j].decode(&d)
			}
		}
		nh := d.uvarint()
		if nh > MaxOpsPerEntry {
			return nil, false, errShort
		}
		for k := uint64(0); k < nh; k++ {
			r.Heartbeats = append(r.Heartbeats, HeartbeatStatus(d.u8()))
		}
	}
	for i := 0; i < len(rs) && d.more(); i++ {
		nu := d.uvarint()
		if nu > MaxOpsPerEntry {
			return nil, false, errShort
		}
		for k := uint64(0); k < nu && d.err == nil; k++ {
			var rec UsageRecord
			ud := dec{b: d.bytes()}
			rec.decode(&ud)
			if ud.err != nil {
				return nil, false, errShort
			}
			rs[i].Usage = append(rs[i].Usage, rec)
		}
	}
	for i := 0; i < len(rs) && d.more(); i++ {
		rs[i].CachedFrom = d.str()
	}
	for i := 0; i < len(rs) && d.more(); i++ {
		nm := d.uvarint()
		if nm > MaxOpsPerEntry {
			return nil, false, errShort
		}
		for k := uint64(0); k < nm && d.err == nil; k++ {
			rs[i].Members = append(rs[i].Members, ProviderMember{Name: d.str(), Shard: uint32(d.uvarint()), Gen: d.uvarint(), In: d.boolean()})
		}
	}
	for i := 0; i < len(rs) && d.more(); i++ {
		if d.boolean() {
			rs[i].Share = &ProviderShareState{Gen: d.uvarint(),
				Share: ProviderShare{RPM: d.varint(), InputTPM: d.varint(), OutputTPM: d.varint()},
				Held:  ProviderShare{RPM: d.varint(), InputTPM: d.varint(), OutputTPM: d.varint()}}
		}
	}
	if d.err != nil {
		return nil, false, d.err
	}
	return rs, compact, nil
}
