package backup

import (
	"errors"
	"strconv"
	"strings"

	"github.com/corvohq/corvo/router"
)

// Plan rewrites a backup's records for the cluster it is restored into.
// A job's ID carries its shard (job_<shard>_<ULID>), as do a batch's and a
// schedule's: when the target has another shard count, or the queues move
// into another namespace (Into), a record lands on another shard and gets
// a new ID there — the same ULID behind the new shard number, so it stays
// unique — and every reference to it is rewritten: batch membership and
// callbacks, chain IDs and targets, dependencies, reported dependencies,
// counted batch jobs. A restore first shows the Plan every job and batch
// (See, one pass over the file), then rewrites as it imports (second
// pass). The map holds one entry per job: a restore's memory grows with
// the number of jobs (some 100 bytes each), not with their payloads.
type Plan struct {
	rt      *router.Router
	into    string
	jobs    map[string]string // old ID → new ID
	batches map[string]string
}

// NewPlan plans a restore into a cluster of shards shards; into, when not
// "", puts every queue in that namespace (the backup must hold one
// namespace).
func NewPlan(shards int, into string) *Plan {
	return &Plan{rt: router.New(shards), into: into, jobs: map[string]string{}, batches: map[string]string{}}
}

// Queue is the stored name a backed-up queue gets.
func (p *Plan) Queue(stored string) string {
	if p.into == "" {
		return stored
	}
	return router.NamespacedQueue(p.into, router.DisplayQueue(stored))
}

// Namespace is the namespace a backed-up namespace's things go to.
func (p *Plan) Namespace(ns string) string {
	if p.into == "" {
		return ns
	}
	return p.into
}

// retag puts id (<prefix><shard>_<rest>) on shard sh.
func retag(prefix, id string, sh int) (string, error) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return "", errors.New("id " + strconv.Quote(id) + " does not start with " + prefix)
	}
	_, tail, ok := strings.Cut(rest, "_")
	if !ok || tail == "" {
		return "", errors.New("malformed id " + strconv.Quote(id))
	}
	return prefix + strconv.Itoa(sh) + "_" + tail, nil
}

// oldShard is the shard number an ID carries, folded into the target's.
func (p *Plan) oldShard(prefix, id string) int {
	rest, _ := strings.CutPrefix(id, prefix)
	num, _, _ := strings.Cut(rest, "_")
	n, _ := strconv.Atoi(num)
	if n < 0 {
		n = 0
	}
	return n % p.rt.Shards()
}

// See records a job's or batch's new ID (first pass).
func (p *Plan) See(r *Record) error {
	switch {
	case r.Job != nil:
		if _, err := router.ParseJobID(r.Job.ID); err != nil {
			return errors.New("job id " + strconv.Quote(r.Job.ID) + ": " + err.Error())
		}
		if err := router.ValidateStoredQueue(r.Job.Queue); err != nil {
			return errors.New("job " + r.Job.ID + ": " + err.Error())
		}
		id, err := retag(router.JobIDPrefix, r.Job.ID, p.rt.ShardForQueue(p.Queue(r.Job.Queue)))
		if err != nil {
			return err
		}
		p.jobs[r.Job.ID] = id
	case r.Batch != nil:
		sh := p.oldShard("batch_", r.Batch.ID)
		if r.Batch.CallbackQueue != "" {
			sh = p.rt.ShardForQueue(p.Queue(r.Batch.CallbackQueue))
		}
		id, err := retag("batch_", r.Batch.ID, sh)
		if err != nil {
			return err
		}
		p.batches[r.Batch.ID] = id
	}
	return nil
}

// JobID is the new ID of a job: its mapped ID when the backup holds it,
// else the same ID on the shard its number folds to (a job that no longer
// existed: the reference stays one to a missing job).
func (p *Plan) JobID(old string) string {
	if id, ok := p.jobs[old]; ok {
		return id
	}
	id, err := retag(router.JobIDPrefix, old, p.oldShard(router.JobIDPrefix, old))
	if err != nil {
		return old
	}
	return id
}

// BatchID is the new ID of a batch (see JobID).
func (p *Plan) BatchID(old string) string {
	if id, ok := p.batches[old]; ok {
		return id
	}
	id, err := retag("batch_", old, p.oldShard("batch_", old))
	if err != nil {
		return old
	}
	return id
}

// Remapped counts the jobs and batches whose ID changes.
func (p *Plan) Remapped() int {
	n := 0
	for old, id := range p.jobs {
		if old != id {
			n++
		}
	}
	for old, id := range p.batches {
		if old != id {
			n++
		}
	}
	return n
}

// Shard is the shard a rewritten record goes to.
func (p *Plan) Shard(r *Record) int {
	switch {
	case r.Job != nil:
		n, _ := p.rt.ShardForJob(r.Job.ID)
		return n
	case r.Batch != nil:
		n, _ := p.rt.TaggedShard("batch_", r.Batch.ID)
		return n
	case r.Schedule != nil:
		return p.rt.ShardForQueue(r.Schedule.Queue)
	case r.Queue != nil:
		return p.rt.ShardForQueue(r.Queue.Name)
	case r.Cache != nil:
		return p.rt.ShardForQueue(r.Cache.Queue)
	case r.UsageDay != nil:
		return p.rt.ShardForQueue(r.UsageDay.Queue)
	case r.Budget != nil:
		// Every shard gets the budget; this one its spend: a queue's
		// budget the queue's shard, any other shard 0 (what counts is
		// the sum over the shards).
		if r.Budget.Queue != "" {
			return p.rt.ShardForQueue(r.Budget.Queue)
		}
	}
	return 0
}

func (p *Plan) target(t *ChainTarget) {
	if t != nil {
		t.Queue = p.Queue(t.Queue)
		t.Shard = uint32(p.rt.ShardForQueue(t.Queue))
	}
}

// Rewrite gives a record (second pass) its new IDs, queue names and the
// references that follow them.
func (p *Plan) Rewrite(r *Record) error {
	switch {
	case r.Job != nil:
		j := r.Job
		j.ID, j.Queue = p.JobID(j.ID), p.Queue(j.Queue)
		if j.BatchID != "" {
			j.BatchID = p.BatchID(j.BatchID)
			n, _ := p.rt.TaggedShard("batch_", j.BatchID)
			j.BatchShard = uint32(n)
		}
		if c := j.Chain; c != nil {
			c.ID = p.JobID(c.ID)
			for i := range c.Steps {
				p.target(&c.Steps[i])
			}
			p.target(c.OnFailure)
			p.target(c.OnExit)
		}
		for i := range j.DependsOn {
			d := &j.DependsOn[i]
			d.ID = p.JobID(d.ID)
			n, _ := p.rt.ShardForJob(d.ID)
			d.Shard = uint32(n)
		}
		for i := range j.Resolved {
			j.Resolved[i] = p.JobID(j.Resolved[i])
		}
		if j.CachedFrom != "" {
			j.CachedFrom = p.JobID(j.CachedFrom)
		}
		for i := range j.Usage {
			j.Usage[i].Queue = p.Queue(j.Usage[i].Queue)
		}
		for i := range j.Scores {
			j.Scores[i].Queue = p.Queue(j.Scores[i].Queue)
		}
	case r.Batch != nil:
		b := r.Batch
		b.ID = p.BatchID(b.ID)
		if b.CallbackQueue != "" {
			b.CallbackQueue = p.Queue(b.CallbackQueue)
			b.CallbackShard = uint32(p.rt.ShardForQueue(b.CallbackQueue))
			if id, ok := p.jobs[b.CallbackJobID]; ok {
				b.CallbackJobID = id
			} else if id, err := retag(router.JobIDPrefix, b.CallbackJobID, int(b.CallbackShard)); err == nil {
				b.CallbackJobID = id // the callback has not run yet
			}
		}
		for i := range b.Counted {
			b.Counted[i] = p.JobID(b.Counted[i])
		}
	case r.Schedule != nil:
		s := r.Schedule
		s.Queue = p.Queue(s.Queue)
		id, err := retag("sched_", s.ID, p.rt.ShardForQueue(s.Queue))
		if err != nil {
			return err
		}
		s.ID = id
		if s.LastJobID != "" {
			s.LastJobID = p.JobID(s.LastJobID)
		}
	case r.Queue != nil:
		r.Queue.Name = p.Queue(r.Queue.Name)
	case r.Cache != nil:
		r.Cache.Queue, r.Cache.JobID = p.Queue(r.Cache.Queue), p.JobID(r.Cache.JobID)
	case r.UsageDay != nil:
		r.UsageDay.Queue = p.Queue(r.UsageDay.Queue)
	case r.Budget != nil:
		r.Budget.Namespace = p.Namespace(r.Budget.Namespace)
		if r.Budget.Queue != "" {
			r.Budget.Queue = p.Queue(r.Budget.Queue)
		}
	case r.Provider != nil:
		r.Provider.Namespace = p.Namespace(r.Provider.Namespace)
	case r.Key != nil:
		r.Key.Namespace = p.Namespace(r.Key.Namespace)
	case r.Namespace != nil:
		r.Namespace.Name = p.Namespace(r.Namespace.Name)
	}
	return nil
}
