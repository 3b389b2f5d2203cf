package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// Export: what a backup reads of one shard (corvo backup). One ExportQuery
// reads everything it hands out from one Pebble snapshot, so a shard's part
// of a backup is consistent: a job never appears in two states, and its
// error history, state and queue settings are those of one applied index.
// Records are handed to Emit one at a time as the iterators reach them,
// never collected: memory stays that of one job, however large the shard.

// ExportQuery streams a shard's queue settings, schedules, jobs (each with
// its usage and score records), result-cache entries and daily usage
// totals — or, with Batches, its batches; with Budgets, its budgets, each
// with what this shard's jobs spent under it per UTC day — to Emit, from
// one snapshot. Queue, when not nil, picks the queues whose settings,
// schedules, jobs, cache entries and daily totals are included; Namespace,
// when not nil, the budgets by their namespace ("" is the default one).
// Emit's error stops the export and is the query's. The answer is
// ExportCounts.
//
// The query holds the state machine open (Close waits for it) until Emit
// returns for the last record: a caller streaming to a slow client must
// make Emit fail when it gives up (the gateway's writes fail once its
// connection closes, and a node closes its gateway before its shards).
type ExportQuery struct {
	Queue     func(queue string) bool
	Namespace func(ns string) bool
	Batches   bool
	Budgets   bool
	Emit      func(ExportRecord) error
}

// ExportRecord is one thing an export hands out: exactly one field is set.
type ExportRecord struct {
	Queue    *QueueExport
	Schedule *Schedule
	Job      *JobExport
	Batch    *BatchExport
	Budget   *BudgetExport
	Cache    *CacheExport
	UsageDay *UsageDayExport
}

// QueueExport is a queue's settings.
type QueueExport struct {
	Name   string
	Config QueueConfig
}

// JobExport is a job as stored: its record, state, error history, usage
// records (View.Usage) and scores (View.Scores), and the dependencies
// (depends_on) already reported to it.
type JobExport struct {
	View     JobView
	Resolved []string
}

// BatchExport is a batch record with the jobs whose end it has counted.
type BatchExport struct {
	Batch   Batch
	Counted []string
}

// BudgetExport is a budget with what this shard's jobs spent under it,
// per UTC day (oldest first).
type BudgetExport struct {
	Budget Budget
	Spend  []DaySpend
}

// DaySpend is a budget's spend on one UTC day (UsageDay), in 1e-9 USD.
type DaySpend struct {
	Day   int64
	Nanos int64
}

// CacheExport is a queue's result-cache entry for one key.
type CacheExport struct {
	Queue string
	Key   string
	Entry CacheEntry
}

// UsageDayExport is a queue's usage totals of one UTC day (UsageDay).
type UsageDayExport struct {
	Day int64
	QueueUsage
}

// ExportCounts says how many records an export handed out.
type ExportCounts struct {
	Queues, Schedules, Jobs, Batches, Budgets, Caches, UsageDays int
}

func (s *StateMachine) export(q ExportQuery) (ExportCounts, error) {
	var n ExportCounts
	if q.Emit == nil {
		return n, fmt.Errorf("statemachine: an export needs Emit")
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	want := func(queue string) bool { return q.Queue == nil || q.Queue(queue) }
	if q.Budgets {
		return n, exportBudgets(snap, q, &n)
	}
	if q.Batches {
		err := scanPrefix(snap, []byte(pfxBatch), func(k, v []byte) error {
			var b BatchExport
			d := dec{b: v}
			b.Batch.decode(&d)
			if d.err != nil {
				return fmt.Errorf("corrupt batch %q: %w", k, d.err)
			}
			pfx := append(append([]byte(pfxBatchJob), b.Batch.ID...), 0)
			if err := scanPrefix(snap, pfx, func(k, _ []byte) error {
				b.Counted = append(b.Counted, string(k[len(pfx):]))
				return nil
			}); err != nil {
				return err
			}
			n.Batches++
			return q.Emit(ExportRecord{Batch: &b})
		})
		return n, err
	}
	// Queue settings: a queue's config key exists once a setting was made.
	if err := scanPrefix(snap, []byte(pfxQueueCfg), func(k, v []byte) error {
		qe := QueueExport{Name: string(k[len(pfxQueueCfg):])}
		if !want(qe.Name) {
			return nil
		}
		d := dec{b: v}
		qe.Config.decode(&d)
		if d.err != nil {
			return fmt.Errorf("corrupt config of %s: %w", qe.Name, d.err)
		}
		n.Queues++
		return q.Emit(ExportRecord{Queue: &qe})
	}); err != nil {
		return n, err
	}
	if err := scanPrefix(snap, []byte(pfxSchedule), func(_, v []byte) error {
		sc := &Schedule{}
		d := dec{b: v}
		sc.decode(&d)
		if d.err != nil {
			return d.err
		}
		if !want(sc.Queue) {
			return nil
		}
		sc.Payload = cloneBytes(sc.Payload)
		n.Schedules++
		return q.Emit(ExportRecord{Schedule: sc})
	}); err != nil {
		return n, err
	}
	err := scanPrefix(snap, []byte(pfxJob), func(_, v []byte) error {
		var je JobExport
		d := dec{b: v}
		je.View.Job.decode(&d)
		if d.err != nil {
			return fmt.Errorf("corrupt job record: %w", d.err)
		}
		if !want(je.View.Job.Queue) {
			return nil
		}
		je.View.Job = cloneJob(je.View.Job)
		if err := readJobRest(snap, &je); err != nil {
			return err
		}
		n.Jobs++
		return q.Emit(ExportRecord{Job: &je})
	})
	if err != nil {
		return n, err
	}
	if err := scanPrefix(snap, []byte(pfxCache), func(k, v []byte) error {
		queue, key, ok := strings.Cut(string(k[len(pfxCache):]), "\x00")
		if !ok {
			return fmt.Errorf("corrupt cache key %q", k)
		}
		if !want(queue) {
			return nil
		}
		ce := CacheExport{Queue: queue, Key: key}
		d := dec{b: v}
		ce.Entry.decode(&d)
		if d.err != nil {
			return fmt.Errorf("corrupt cache entry %q: %w", k, d.err)
		}
		n.Caches++
		return q.Emit(ExportRecord{Cache: &ce})
	}); err != nil {
		return n, err
	}
	err = scanPrefix(snap, []byte(pfxUsageDay), func(k, v []byte) error {
		if len(k) < len(pfxUsageDay)+4 {
			return fmt.Errorf("corrupt usage totals key %q", k)
		}
		ud := UsageDayExport{Day: int64(binary.BigEndian.Uint32(k[len(pfxUsageDay):]))}
		ud.Queue = string(k[len(pfxUsageDay)+4:])
		if !want(ud.Queue) {
			return nil
		}
		d := dec{b: v}
		ud.UsageTotals.decode(&d)
		if d.err != nil {
			return fmt.Errorf("corrupt usage totals %q: %w", k, d.err)
		}
		n.UsageDays++
		return q.Emit(ExportRecord{UsageDay: &ud})
	})
	return n, err
}

// exportBudgets hands out the budgets of the namespaces asked for, each
// with this shard's daily spends under it.
func exportBudgets(snap *pebble.Snapshot, q ExportQuery, n *ExportCounts) error {
	spend := map[string][]DaySpend{} // budget ID → its days, oldest first
	if err := scanPrefix(snap, []byte(pfxBudgetDay), func(k, v []byte) error {
		if len(k) < len(pfxBudgetDay)+4 {
			return fmt.Errorf("corrupt budget spend key %q", k)
		}
		id := string(k[len(pfxBudgetDay)+4:])
		d := dec{b: v}
		s := DaySpend{Day: int64(binary.BigEndian.Uint32(k[len(pfxBudgetDay):])), Nanos: d.varint()}
		if d.err != nil {
			return fmt.Errorf("corrupt budget spend %q: %w", k, d.err)
		}
		spend[id] = append(spend[id], s)
		return nil
	}); err != nil {
		return err
	}
	return scanPrefix(snap, []byte(pfxBudget), func(k, v []byte) error {
		var be BudgetExport
		d := dec{b: v}
		be.Budget.decode(&d)
		if d.err != nil {
			return fmt.Errorf("corrupt budget %q: %w", k, d.err)
		}
		if q.Namespace != nil && !q.Namespace(be.Budget.Namespace) {
			return nil
		}
		be.Spend = spend[be.Budget.ID()]
		n.Budgets++
		return q.Emit(ExportRecord{Budget: &be})
	})
}

// readJobRest reads a job's state, errors and reported dependencies from
// the snapshot.
func readJobRest(snap *pebble.Snapshot, je *JobExport) error {
	id := je.View.Job.ID
	je.View.State = JobState{State: StatePending}
	v, closer, err := snap.Get(stateKey(id))
	switch {
	case err == nil:
		d := dec{b: v}
		je.View.State.decode(&d)
		je.View.State = cloneState(je.View.State)
		closer.Close()
		if d.err != nil {
			return fmt.Errorf("corrupt state of %s: %w", id, d.err)
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	}
	je.View.Errors = []JobError{}
	if err := scanPrefix(snap, errorPrefix(id), func(_, v []byte) error {
		var e JobError
		d := dec{b: v}
		e.decode(&d)
		if d.err != nil {
			return fmt.Errorf("corrupt error record of %s: %w", id, d.err)
		}
		je.View.Errors = append(je.View.Errors, e)
		return nil
	}); err != nil {
		return err
	}
	if je.View.State.UsageKeys > 0 {
		if je.View.Usage, err = readUsage(snap, id); err != nil {
			return err
		}
	}
	if je.View.State.ScoreKeys > 0 {
		if je.View.Scores, err = readScores(snap, id); err != nil {
			return err
		}
	}
	if len(je.View.Job.DependsOn) == 0 {
		return nil
	}
	pfx := append(append([]byte(pfxDepDone), id...), 0)
	return scanPrefix(snap, pfx, func(k, _ []byte) error {
		je.Resolved = append(je.Resolved, string(k[len(pfx):]))
		return nil
	})
}

// scanPrefix calls fn for every key with prefix pfx in the snapshot, in
// order. fn's slices are valid only during the call.
func scanPrefix(snap *pebble.Snapshot, pfx []byte, fn func(k, v []byte) error) error {
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}
