package statemachine

import (
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
)

// Job dependencies (depends_on) and the held state. A job with
// dependencies is enqueued held; it asks each dependency's shard to tell it
// when that job finishes (DepWatchOp, via the outbox when remote). When all
// completed it becomes pending; when one dies, is cancelled or is deleted
// it goes dead — nothing waits forever. Approve/reject release any held
// job by hand.

// Hold reasons.
const (
	HoldDependencies = "dependencies"
)

func watchPrefix(dep string) []byte {
	k := append([]byte(pfxDepWatch), dep...)
	return append(k, 0)
}

func watchKey(dep, dependent string) []byte { return append(watchPrefix(dep), dependent...) }

func resolvedKey(dependent, dep string) []byte {
	k := append([]byte(pfxDepDone), dependent...)
	k = append(k, 0)
	return append(k, dep...)
}

// DepWatchOp asks a dependency's shard to report when Dep finishes.
type DepWatchOp struct {
	Dep            string
	Dependent      string
	DependentShard uint32
}

// Code implements Op.
func (*DepWatchOp) Code() OpCode { return OpDepWatch }
func (o *DepWatchOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Dep)
	e.str(o.Dependent)
	e.uvarint(uint64(o.DependentShard))
	return e.b
}
func (o *DepWatchOp) decode(d *dec) {
	o.Dep = d.str()
	o.Dependent = d.str()
	o.DependentShard = uint32(d.uvarint())
}

// DepDoneOp tells a held job that one of its dependencies finished.
type DepDoneOp struct {
	Dependent string
	Dep       string
	OK        bool   // completed
	Reason    string // otherwise: "dead", "cancelled", "deleted"
}

// Code implements Op.
func (*DepDoneOp) Code() OpCode { return OpDepDone }
func (o *DepDoneOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Dependent)
	e.str(o.Dep)
	e.boolean(o.OK)
	e.str(o.Reason)
	return e.b
}
func (o *DepDoneOp) decode(d *dec) {
	o.Dependent = d.str()
	o.Dep = d.str()
	o.OK = d.boolean()
	o.Reason = d.str()
}

// ReleaseOp approves (to pending) or rejects (to dead) a held job.
type ReleaseOp struct {
	JobID   string
	Approve bool
}

// Code implements Op.
func (*ReleaseOp) Code() OpCode { return OpRelease }
func (o *ReleaseOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	e.boolean(o.Approve)
	return e.b
}
func (o *ReleaseOp) decode(d *dec) {
	o.JobID = d.str()
	o.Approve = d.boolean()
}

func finishedHow(st State) (bool, string) {
	switch st {
	case StateCompleted:
		return true, ""
	case StateDead:
		return false, "dead"
	default:
		return false, "cancelled"
	}
}

func (a *applier) depWatch(o *DepWatchOp) Result {
	j, ok := a.loadJob(o.Dep)
	if !ok {
		a.send(o.DependentShard, &DepDoneOp{Dependent: o.Dependent, Dep: o.Dep, Reason: "deleted"})
		return Result{}
	}
	if st := a.loadState(j.ID); st.State.Terminal() {
		okDone, reason := finishedHow(st.State)
		a.send(o.DependentShard, &DepDoneOp{Dependent: o.Dependent, Dep: o.Dep, OK: okDone, Reason: reason})
		return Result{}
	}
	k := watchKey(o.Dep, o.Dependent)
	if _, dup := a.get(k); !dup {
		a.s.watched[o.Dep]++
	}
	a.set(k, binary.AppendUvarint(nil, uint64(o.DependentShard)))
	return Result{}
}

// notifyWatchers reports a job's end to every job waiting on it. Most jobs
// have no watchers: the in-memory set skips the seek for them.
func (a *applier) notifyWatchers(dep string, ok bool, reason string) {
	if a.s.watched[dep] == 0 {
		return
	}
	delete(a.s.watched, dep)
	pfx := watchPrefix(dep)
	type w struct {
		key       []byte
		dependent string
		shard     uint32
	}
	var ws []w
	a.eachKey(pfx, func(k, v []byte) bool {
		shard, _ := binary.Uvarint(v)
		ws = append(ws, w{key: append([]byte(nil), k...), dependent: string(k[len(pfx):]), shard: uint32(shard)})
		return true
	})
	if a.err != nil {
		return
	}
	for _, x := range ws {
		a.del(x.key)
		a.send(x.shard, &DepDoneOp{Dependent: x.dependent, Dep: dep, OK: ok, Reason: reason})
	}
}

// hasWatchers reports whether jobs wait on this one.
func (a *applier) hasWatchers(id string) bool { return a.s.watched[id] > 0 }

// loadWatched rebuilds the set of watched jobs from the dw| keys.
func (s *StateMachine) loadWatched() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxDepWatch), UpperBound: prefixEnd([]byte(pfxDepWatch))})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(pfxDepWatch):]
		for i, c := range k {
			if c == 0 {
				s.watched[string(k[:i])]++
				break
			}
		}
	}
	return it.Error()
}

func (a *applier) depDone(o *DepDoneOp) Result {
	rk := resolvedKey(o.Dependent, o.Dep)
	if _, seen := a.get(rk); seen {
		return Result{}
	}
	j, ok := a.loadJob(o.Dependent)
	if !ok {
		return Result{}
	}
	st := a.loadState(j.ID)
	if st.State != StateHeld || st.Reason != HoldDependencies {
		return Result{} // released by hand, cancelled or deleted meanwhile
	}
	a.set(rk, nil)
	if !o.OK {
		st.State, st.Reason, st.CompletedAt = StateDead, "dependency "+o.Dep+" "+o.Reason, a.now
		a.finish(j, &st)
		a.move(j.Queue, StateHeld, StateDead)
		return Result{}
	}
	st.DepsDone++
	if int(st.DepsDone) < len(j.DependsOn) {
		a.putState(j, &st)
		return Result{}
	}
	st.State, st.Reason = StatePending, ""
	a.putState(j, &st)
	a.addPending(j)
	a.move(j.Queue, StateHeld, StatePending)
	a.event(EventEnqueued, j, &st)
	return Result{}
}

func (a *applier) release(o *ReleaseOp) Result {
	j, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j.ID)
	if st.State != StateHeld {
		return Result{Status: StatusConflict, State: st.State, Message: "job is " + st.State.String() + ", not held"}
	}
	if o.Approve {
		st.State, st.Reason = StatePending, ""
		a.putState(j, &st)
		a.addPending(j)
		a.move(j.Queue, StateHeld, StatePending)
		a.event(EventEnqueued, j, &st)
		return Result{State: StatePending, Queue: j.Queue}
	}
	st.State, st.Reason, st.CompletedAt = StateDead, "rejected", a.now
	a.finish(j, &st)
	a.move(j.Queue, StateHeld, StateDead)
	return Result{State: StateDead, Queue: j.Queue}
}
