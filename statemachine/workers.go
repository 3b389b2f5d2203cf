package statemachine

import (
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Worker is what a shard knows of a worker process (key w|{id}), fed by its
// fetches and heartbeats.
type Worker struct {
	ID        string
	Hostname  string
	Queues    []string // the queues it last fetched from (this shard's)
	FirstSeen int64
	LastSeen  int64
}

func (w *Worker) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(1)
	e.str(w.ID)
	e.str(w.Hostname)
	e.uvarint(uint64(len(w.Queues)))
	for _, q := range w.Queues {
		e.str(q)
	}
	e.varint(w.FirstSeen)
	e.varint(w.LastSeen)
	return e.b
}

func (w *Worker) decode(d *dec) {
	if d.u8() != 1 {
		d.fail()
		return
	}
	w.ID = d.str()
	w.Hostname = d.str()
	n := d.uvarint()
	if n > 1024 {
		d.fail()
		return
	}
	w.Queues = make([]string, 0, n)
	for i := uint64(0); i < n; i++ {
		w.Queues = append(w.Queues, d.str())
	}
	w.FirstSeen = d.varint()
	w.LastSeen = d.varint()
}

const (
	// workerTouchEvery bounds registry writes: a worker's record is
	// rewritten at most this often unless its queues or host change.
	workerTouchEvery = int64(1e9)
	// WorkerForgetAfter is how long a silent worker stays listed.
	WorkerForgetAfter = int64(24 * 3600 * 1e9)
)

func workerKey(id string) []byte { return append([]byte(pfxWorker), id...) }

// touchWorker records that a worker fetched (queues set) or heartbeated.
func (a *applier) touchWorker(id, hostname string, queues []string) {
	if id == "" {
		return
	}
	w, ok := a.s.workers[id]
	if !ok {
		w = &Worker{ID: id}
		if v, found := a.get(workerKey(id)); found {
			d := dec{b: v}
			w.decode(&d)
			if d.err != nil {
				a.fail(d.err)
				return
			}
		}
		a.s.workers[id] = w
	}
	changed := w.LastSeen == 0 || a.now-w.LastSeen >= workerTouchEvery
	if hostname != "" && hostname != w.Hostname {
		w.Hostname, changed = hostname, true
	}
	if queues != nil && !sameQueues(queues, w.Queues) {
		w.Queues, changed = slices.Clone(queues), true
	}
	if !changed {
		return
	}
	if w.FirstSeen == 0 {
		w.FirstSeen = a.now
	}
	if w.LastSeen != 0 {
		a.del(timeIndexKey(pfxWorkerX, w.LastSeen, id))
	}
	w.LastSeen = a.now
	a.set(workerKey(id), w.appendTo(nil))
	a.set(timeIndexKey(pfxWorkerX, w.LastSeen, id), nil)
}

// sameQueues reports whether a and b list the same queues in any order: a
// worker that polls its queues in rotating order (the SDKs' fairness) is
// not rewritten on every fetch. A rotation, the usual case, is found
// without allocating; any other order is compared sorted.
func sameQueues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	if i := slices.Index(b, a[0]); i >= 0 && slices.Equal(a[:len(a)-i], b[i:]) && slices.Equal(a[len(a)-i:], b[:i]) {
		return true
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// forgetWorkers drops workers silent for WorkerForgetAfter.
func (a *applier) forgetWorkers(limit int) int {
	n := 0
	for _, k := range a.scanTimeIndexUntil(pfxWorkerX, &a.s.workerCursor, a.now-WorkerForgetAfter, limit) {
		a.del(k)
		at, id, _ := splitTimeIndexKey(pfxWorkerX, k)
		v, ok := a.get(workerKey(id))
		if !ok {
			continue
		}
		var w Worker
		d := dec{b: v}
		w.decode(&d)
		if d.err != nil || w.LastSeen != at {
			continue // seen since
		}
		a.del(workerKey(id))
		delete(a.s.workers, id)
		n++
	}
	return n
}

// WorkerInfo is a worker with the jobs it holds on this shard.
type WorkerInfo struct {
	Worker
	ActiveJobs []string
}

// WorkersQuery lists the shard's workers; the answer is []WorkerInfo.
type WorkersQuery struct{}

func (s *StateMachine) listWorkers() ([]WorkerInfo, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxWorker), UpperBound: prefixEnd([]byte(pfxWorker))})
	if err != nil {
		return nil, err
	}
	var out []WorkerInfo
	byID := map[string]int{}
	for it.First(); it.Valid(); it.Next() {
		var w WorkerInfo
		d := dec{b: it.Value()}
		w.decode(&d)
		if d.err != nil {
			it.Close()
			return nil, d.err
		}
		w.ActiveJobs = []string{}
		byID[w.ID] = len(out)
		out = append(out, w)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	// Active jobs: the lease index holds exactly the active ones.
	lit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxLease), UpperBound: prefixEnd([]byte(pfxLease))})
	if err != nil {
		return nil, err
	}
	defer lit.Close()
	for lit.First(); lit.Valid(); lit.Next() {
		_, id, ok := splitTimeIndexKey(pfxLease, lit.Key())
		if !ok {
			continue
		}
		var st JobState
		found, err := s.read(stateKey(id), st.decode)
		if err != nil {
			return nil, err
		}
		if i, ok := byID[st.WorkerID]; found && ok && st.State == StateActive {
			out[i].ActiveJobs = append(out[i].ActiveJobs, id)
		}
	}
	return out, lit.Error()
}
