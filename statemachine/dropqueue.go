package statemachine

import "github.com/cockroachdb/pebble/v2"

// Queue management: dropping a queue, one index a bounded step at a time,
// then its config and stats.

// dropQueue deletes the queue's jobs in one index, a bounded step at a time.
func (a *applier) dropQueue(o *DropQueueOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 2000
	}
	if o.Index == DropConfig {
		st := a.stats(o.Queue)
		for _, n := range st.Counts {
			if n != 0 {
				return Result{Status: StatusConflict, Message: "the queue still has jobs"}
			}
		}
		a.unlinkDropped(o.Queue)
		a.del(queueCfgKey(o.Queue))
		a.del(queueStatsKey(o.Queue))
		delete(a.s.stats, o.Queue)
		delete(a.s.configs, o.Queue)
		delete(a.dirty, o.Queue)
		pfx := ratePrefix(o.Queue)
		if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
			a.fail(err)
		}
		delete(a.s.rates, o.Queue)
		return Result{}
	}
	var lower, upper []byte
	switch o.Index {
	case DropPending:
		lower = pendingPrefix(o.Queue)
	case DropDue:
		lower = []byte(pfxDue)
	case DropActive:
		lower = []byte(pfxLease)
	case DropFinished:
		lower = []byte(pfxFinished)
	default:
		return Result{Status: StatusInvalid, Message: "unknown index"}
	}
	upper = prefixEnd(lower)
	if o.After != nil {
		lower = append(append([]byte(nil), o.After...), 0) // the next key after After
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		a.fail(err)
		return Result{}
	}
	type hit struct {
		key []byte
		id  string
	}
	var hits []hit
	var last []byte
	examined := 0
	for it.First(); it.Valid() && examined < limit; it.Next() {
		examined++
		last = append(last[:0], it.Key()...)
		var id string
		if o.Index == DropPending {
			id = string(it.Value())
		} else {
			pfx := pfxDue
			if o.Index == DropActive {
				pfx = pfxLease
			} else if o.Index == DropFinished {
				pfx = pfxFinished
			}
			_, id, _ = splitTimeIndexKey(pfx, it.Key())
		}
		hits = append(hits, hit{key: append([]byte(nil), it.Key()...), id: id})
	}
	more := it.Valid()
	if err := it.Close(); err != nil {
		a.fail(err)
		return Result{}
	}
	n := 0
	for _, h := range hits {
		j, ok := a.loadJob(h.id)
		if !ok || j.Queue != o.Queue {
			continue
		}
		st := a.loadState(h.id)
		switch o.Index {
		case DropPending:
			if st.State != StatePending {
				continue
			}
			a.delPending(j)
		case DropDue:
			if (st.State != StateScheduled && st.State != StateRetrying) || timeIndexKeyMismatch(pfxDue, h.key, st.DueAt) {
				continue
			}
			a.del(h.key)
		case DropActive:
			if st.State != StateActive || timeIndexKeyMismatch(pfxLease, h.key, st.LeaseExpiresAt) {
				continue
			}
			a.del(h.key)
		case DropFinished:
			if !st.State.Terminal() || timeIndexKeyMismatch(pfxFinished, h.key, st.CompletedAt) {
				continue
			}
			a.del(h.key)
		}
		a.forgetFromBatch(j, &st)
		a.dropJob(j, &st)
		n++
	}
	r := Result{Count: uint32(n), Queue: o.Queue}
	if more {
		r.Cursor = last
	}
	return r
}

// timeIndexKeyMismatch reports a stale index key: its time is not the
// job's current one.
func timeIndexKeyMismatch(pfx string, k []byte, at int64) bool {
	t, _, ok := splitTimeIndexKey(pfx, k)
	return !ok || t != at
}
