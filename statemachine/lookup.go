package statemachine

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/corvohq/corvo/router"
)

// Queries accepted by Lookup. Lookups read committed state and run
// concurrently with Update.
type (
	// GetJobQuery reads one job with its errors; the answer is *JobView, nil
	// when there is no such job.
	GetJobQuery struct{ ID string }
	// PeekQuery reads the head of each queue's pending set (paused or not);
	// the answer is []QueueHead in the order asked.
	PeekQuery struct{ Queues []string }
	// ListQueuesQuery reads every queue's stats and config; the answer is
	// []QueueInfo sorted by name.
	ListQueuesQuery struct{}
)

// QueueHead is the first pending job of a queue.
type QueueHead struct {
	Queue     string
	OK        bool // false: nothing pending
	Priority  Priority
	CreatedAt int64
}

// Lookup answers a query from committed state.
func (s *StateMachine) Lookup(q interface{}) (interface{}, error) {
	// Close waits for lookups in flight and refuses later ones (dragonboat
	// may run a stale read while a closing shard closes its state machine).
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	switch q := q.(type) {
	case GetJobQuery:
		return s.getJob(q.ID)
	case PeekQuery:
		return s.peek(q.Queues)
	case ListQueuesQuery:
		return s.listQueues()
	case WorkersQuery:
		return s.listWorkers()
	case OutboxQuery:
		return s.readOutbox(q.Limit)
	case MovedQuery:
		return s.movedTo(q.ID)
	case BatchQuery:
		return s.getBatch(q.ID)
	case SchedulesQuery:
		return s.listSchedules()
	case DeadQuery:
		return s.listDead(q)
	case JobQueuesQuery:
		return s.jobQueues(q.IDs)
	case ScanJobsQuery:
		return s.scanJobs(q)
	case AuditQuery:
		return s.listAudit(q)
	case ExportQuery:
		return s.export(q)
	case UsageDayQuery:
		return s.usageDay(q.Day)
	case BudgetsQuery:
		return s.budgets(q.Day)
	case ProvidersQuery:
		return s.providers(q.Now)
	case AppliedQuery:
		return s.appliedAtomic.Load(), nil
	case OpenedAtQuery:
		return s.openedAt, nil
	}
	return nil, fmt.Errorf("statemachine: unknown query %T", q)
}

func (s *StateMachine) read(k []byte, into func(*dec)) (bool, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	d := dec{b: v}
	into(&d)
	if d.err != nil {
		return false, fmt.Errorf("corrupt record %q: %w", k, d.err)
	}
	return true, nil
}

func (s *StateMachine) getJob(id string) (*JobView, error) {
	v := &JobView{}
	ok, err := s.read(jobKey(id), func(d *dec) { v.Job.decode(d); v.Job = cloneJob(v.Job) })
	if err != nil || !ok {
		return nil, err
	}
	found, err := s.read(stateKey(id), func(d *dec) { v.State.decode(d); v.State = cloneState(v.State) })
	if err != nil {
		return nil, err
	}
	if !found {
		v.State = JobState{State: StatePending}
	}
	pfx := errorPrefix(id)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	v.Errors = []JobError{}
	for it.First(); it.Valid(); it.Next() {
		var je JobError
		d := dec{b: it.Value()}
		je.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("corrupt error record of %s: %w", id, d.err)
		}
		v.Errors = append(v.Errors, je)
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if v.State.UsageKeys > 0 {
		if v.Usage, err = readUsage(s.db, id); err != nil {
			return nil, err
		}
	}
	if v.State.ScoreKeys > 0 {
		if v.Scores, err = readScores(s.db, id); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (s *StateMachine) peek(queues []string) ([]QueueHead, error) {
	out := make([]QueueHead, len(queues))
	for i, q := range queues {
		out[i].Queue = q
		pfx := pendingPrefix(q)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: s.cursor(q), UpperBound: prefixEnd(pfx)})
		if err != nil {
			return nil, err
		}
		if it.First() {
			if p, c, ok := pendingSuffix(it.Key()[len(pfx):]); ok {
				out[i].OK, out[i].Priority, out[i].CreatedAt = true, p, c
			}
		}
		err = it.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *StateMachine) listQueues() ([]QueueInfo, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxQueueSt), UpperBound: prefixEnd([]byte(pfxQueueSt))})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []QueueInfo
	for it.First(); it.Valid(); it.Next() {
		qi := QueueInfo{Name: string(it.Key()[len(pfxQueueSt):])}
		d := dec{b: it.Value()}
		qi.Stats.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("corrupt stats of %s: %w", qi.Name, d.err)
		}
		if _, err := s.read(queueCfgKey(qi.Name), qi.Config.decode); err != nil {
			return nil, err
		}
		out = append(out, qi)
	}
	return out, it.Error()
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// cloneJob copies everything a decoded job shares with its buffer (a Pebble
// value released after the read, or a Raft entry dragonboat reuses): the
// byte slices, the chain with its steps' payloads, the dependency list.
// Strings are already copies.
func cloneJob(j Job) Job {
	j.Payload = cloneBytes(j.Payload)
	j.JobOptions = j.JobOptions.clone()
	if j.Chain != nil {
		c := *j.Chain
		c.Steps = make([]ChainTarget, len(j.Chain.Steps))
		for i, t := range j.Chain.Steps {
			c.Steps[i] = t.clone()
		}
		for _, h := range []**ChainTarget{&c.OnFailure, &c.OnExit} {
			if *h != nil {
				t := (*h).clone()
				*h = &t
			}
		}
		c.Config = cloneBytes(c.Config)
		j.Chain = &c
	}
	if j.DependsOn != nil {
		j.DependsOn = append([]Dep(nil), j.DependsOn...)
	}
	return j
}

func (t ChainTarget) clone() ChainTarget {
	t.Payload = cloneBytes(t.Payload)
	return t
}

func cloneState(s JobState) JobState {
	s.Progress = cloneBytes(s.Progress)
	s.Checkpoint = cloneBytes(s.Checkpoint)
	s.Result = cloneBytes(s.Result)
	return s
}

// JobQueuesQuery reads the queue of each job in IDs (one read for many
// jobs: the namespace check of a bulk action by IDs); the answer is
// []string in the order asked, "" for a job that does not exist.
type JobQueuesQuery struct{ IDs []string }

func (s *StateMachine) jobQueues(ids []string) ([]string, error) {
	out := make([]string, len(ids))
	for i, id := range ids {
		v, err := s.getJob(id)
		if err != nil {
			return nil, err
		}
		if v != nil {
			out[i] = v.Job.Queue
		}
	}
	return out, nil
}

// DeadQuery lists dead jobs, most recently dead first, optionally of one
// queue, starting below the cursor (Before, BeforeID) when set; the answer
// is DeadPage.
type DeadQuery struct {
	Queue string
	// Namespace, when set, keeps only the jobs of that namespace's queues
	// (router.QueueInNamespace).
	Namespace string
	Before    int64
	BeforeID  string
	Limit     int
}

// DeadPage is one page of dead jobs.
type DeadPage struct {
	Jobs []JobView
	More bool
}

func (s *StateMachine) listDead(q DeadQuery) (DeadPage, error) {
	upper := prefixEnd([]byte(pfxDead))
	if q.Before != 0 {
		upper = timeIndexKey(pfxDead, q.Before, q.BeforeID)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxDead), UpperBound: upper})
	if err != nil {
		return DeadPage{}, err
	}
	defer it.Close()
	var page DeadPage
	for ok := it.Last(); ok; ok = it.Prev() {
		_, id, valid := splitTimeIndexKey(pfxDead, it.Key())
		if !valid {
			continue
		}
		// The entry's value is the job's queue (setDead; "" in entries
		// written before): another queue's jobs are skipped unread.
		if qv := it.Value(); len(qv) > 0 && ((q.Queue != "" && string(qv) != q.Queue) ||
			(q.Namespace != "" && !router.QueueInNamespace(string(qv), q.Namespace))) {
			continue
		}
		v, err := s.getJob(id)
		if err != nil {
			return page, err
		}
		if v == nil || v.State.State != StateDead || (q.Queue != "" && v.Job.Queue != q.Queue) ||
			(q.Namespace != "" && !router.QueueInNamespace(v.Job.Queue, q.Namespace)) {
			continue
		}
		if len(page.Jobs) == q.Limit {
			page.More = true
			break
		}
		page.Jobs = append(page.Jobs, *v)
	}
	return page, it.Error()
}

// ScanJobsQuery reads jobs in ID order after After (exclusive), with their
// errors: a mirror rebuild's source. The answer is ScanPage.
type ScanJobsQuery struct {
	After string
	Limit int
}

// ScanPage is one page of a job scan. Index is the applied index read
// before the scan: every change after it reaches the listener.
type ScanPage struct {
	Jobs  []JobView
	Index uint64
	Next  string // "" when done
}

// Missing reports whether a query's answer says the job or batch it asked
// for does not exist on this replica. A follower may trail its leader by a
// heartbeat, so the shard layer confirms such an answer with a
// linearizable read before anyone acts on it.
func Missing(v any) bool {
	switch x := v.(type) {
	case *JobView:
		return x == nil
	case *Batch:
		return x == nil
	}
	return false
}

// AppliedQuery reads the last applied index; the answer is uint64.
type AppliedQuery struct{}

// OpenedAtQuery reads the applied index the state machine found on disk
// when it opened (entries after it were replayed through the listener);
// the answer is uint64.
type OpenedAtQuery struct{}

func (s *StateMachine) scanJobs(q ScanJobsQuery) (ScanPage, error) {
	page := ScanPage{Index: s.appliedAtomic.Load()}
	lower := []byte(pfxJob)
	if q.After != "" {
		lower = append(jobKey(q.After), 0)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd([]byte(pfxJob))})
	if err != nil {
		return page, err
	}
	var ids []string
	for it.First(); it.Valid() && len(ids) < q.Limit; it.Next() {
		ids = append(ids, string(it.Key()[len(pfxJob):]))
	}
	more := it.Valid()
	if err := it.Close(); err != nil {
		return page, err
	}
	for _, id := range ids {
		v, err := s.getJob(id)
		if err != nil {
			return page, err
		}
		if v != nil {
			page.Jobs = append(page.Jobs, *v)
		}
	}
	if more && len(ids) > 0 {
		page.Next = ids[len(ids)-1]
	}
	return page, nil
}
