package peer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Limits are the public API's bounds an op from another node must respect
// too (the gateway's).
type Limits struct {
	FetchQueues   int // most queues one fetch names
	FetchCount    int // most jobs one fetch claims
	WorkerIDLen   int // longest worker_id and hostname
	HeartbeatJobs int // most jobs one heartbeat names
}

// validator checks entries other nodes propose through this one.
type validator struct {
	rt  *router.Router
	lim Limits
}

// ops validates the ops of an entry another node asks this node to
// propose to shard sh (POST /internal/v1/shards/{n}/propose): the cluster
// credential says who sent it, not that it is sound. Every job ID, queue,
// batch and schedule an op names must belong to shard sh, names must pass
// the same rules the public API applies, and a shard leader's own
// housekeeping (promote, reclaim, sweep, cron ticks, dedup and audit
// pruning, outbox acks) is never taken from outside.
func (v *validator) ops(sh int, ops []statemachine.Op) error {
	for i, op := range ops {
		if err := v.op(sh, op); err != nil {
			return fmt.Errorf("op %d (%T): %w", i, op, err)
		}
	}
	return nil
}

func (v *validator) op(sh int, op statemachine.Op) error {
	switch o := op.(type) {
	case *statemachine.EnqueueOp:
		return v.newJob(sh, &o.Job)
	case *statemachine.MoveInOp:
		return v.newJob(sh, &o.Job)
	case *statemachine.FetchOp:
		if len(o.Queues) == 0 || len(o.Queues) > v.lim.FetchQueues {
			return fmt.Errorf("a fetch names 1–%d queues, not %d", v.lim.FetchQueues, len(o.Queues))
		}
		for _, q := range o.Queues {
			if err := v.queue(sh, q); err != nil {
				return err
			}
		}
		if o.Count < 1 || int(o.Count) > v.lim.FetchCount {
			return fmt.Errorf("fetch count %d is not 1–%d", o.Count, v.lim.FetchCount)
		}
		if len(o.WorkerID) > v.lim.WorkerIDLen || len(o.Hostname) > v.lim.WorkerIDLen {
			return fmt.Errorf("worker_id and hostname must be at most %d bytes", v.lim.WorkerIDLen)
		}
		return nil
	case *statemachine.AckOp:
		if o.StepStatus != "" && o.StepStatus != "continue" && o.StepStatus != "exit" {
			return fmt.Errorf("unknown step status %q", o.StepStatus)
		}
		if err := checkUsage(o.Usage); err != nil {
			return err
		}
		return v.job(sh, o.JobID)
	case *statemachine.AckFetchOp:
		if err := v.op(sh, &o.Ack); err != nil {
			return err
		}
		return v.op(sh, &o.Fetch)
	case *statemachine.AcksFetchOp:
		return v.op(sh, &o.Fetch)
	case *statemachine.FailOp:
		if err := checkUsage(o.Usage); err != nil {
			return err
		}
		return v.job(sh, o.JobID)
	case *statemachine.UnclaimOp:
		return v.job(sh, o.JobID)
	case *statemachine.ScoreOp:
		if err := o.Score.Check(); err != nil {
			return err
		}
		return v.job(sh, o.JobID)
	case *statemachine.HeartbeatOp:
		if len(o.Jobs) == 0 || len(o.Jobs) > v.lim.HeartbeatJobs {
			return fmt.Errorf("a heartbeat holds 1–%d jobs", v.lim.HeartbeatJobs)
		}
		for i := range o.Jobs {
			if err := v.job(sh, o.Jobs[i].JobID); err != nil {
				return err
			}
			if err := checkUsage(o.Jobs[i].Usage); err != nil {
				return err
			}
		}
		return nil
	case *statemachine.CancelOp:
		return v.job(sh, o.JobID)
	case *statemachine.RetryJobOp:
		return v.job(sh, o.JobID)
	case *statemachine.DeleteJobOp:
		return v.job(sh, o.JobID)
	case *statemachine.RequeueOp:
		return v.job(sh, o.JobID)
	case *statemachine.ReleaseOp:
		return v.job(sh, o.JobID)
	case *statemachine.PriorityOp:
		if o.Priority > statemachine.PriorityNormal {
			return fmt.Errorf("unknown priority tier %d", o.Priority)
		}
		return v.job(sh, o.JobID)
	case *statemachine.MoveJobOp:
		if err := v.job(sh, o.JobID); err != nil {
			return err
		}
		return v.queue(sh, o.Queue)
	case *statemachine.MoveOutOp:
		if err := v.job(sh, o.JobID); err != nil {
			return err
		}
		if o.Target < 0 || o.Target >= v.rt.Shards() {
			return fmt.Errorf("target shard %d out of range", o.Target)
		}
		if err := v.queue(o.Target, o.Queue); err != nil {
			return err
		}
		return v.job(o.Target, o.NewID)
	case *statemachine.PauseQueueOp:
		return v.queue(sh, o.Queue)
	case *statemachine.ResumeQueueOp:
		return v.queue(sh, o.Queue)
	case *statemachine.SetLimitsOp:
		return v.queue(sh, o.Queue)
	case *statemachine.DropQueueOp:
		if o.Index > statemachine.DropConfig {
			return fmt.Errorf("unknown queue index %d", o.Index)
		}
		return v.queue(sh, o.Queue)
	case *statemachine.ScheduleOp:
		if n, ok := v.rt.TaggedShard("sched_", o.Schedule.ID); !ok || n != sh {
			return fmt.Errorf("schedule %q does not belong to shard %d", o.Schedule.ID, sh)
		}
		if o.Delete {
			return nil
		}
		if o.Schedule.Priority > statemachine.PriorityNormal {
			return fmt.Errorf("unknown priority tier %d", o.Schedule.Priority)
		}
		return v.queue(sh, o.Schedule.Queue)
	case *statemachine.BatchCreateOp:
		b := &o.Batch
		if n, ok := v.rt.TaggedShard("batch_", b.ID); !ok || n != sh {
			return fmt.Errorf("batch %q does not belong to shard %d", b.ID, sh)
		}
		if b.Namespace != "" {
			if err := router.ValidateNamespace(b.Namespace); err != nil || b.Namespace == router.DefaultNamespace {
				return fmt.Errorf("batch namespace %q is not a namespace's stored name", b.Namespace)
			}
			if b.CallbackQueue != "" && !router.QueueInNamespace(b.CallbackQueue, b.Namespace) {
				return fmt.Errorf("batch callback queue %q is not of namespace %q", b.CallbackQueue, b.Namespace)
			}
		}
		if b.CallbackQueue == "" {
			return nil
		}
		if int(b.CallbackShard) != sh {
			return fmt.Errorf("batch callback shard %d is not %d", b.CallbackShard, sh)
		}
		if err := v.queue(sh, b.CallbackQueue); err != nil {
			return err
		}
		return v.job(sh, b.CallbackJobID)
	case *statemachine.BatchDoneOp:
		if n, ok := v.rt.TaggedShard("batch_", o.BatchID); !ok || n != sh {
			return fmt.Errorf("batch %q does not belong to shard %d", o.BatchID, sh)
		}
		_, err := v.rt.ShardForJob(o.JobID)
		return err
	case *statemachine.DepWatchOp:
		if err := v.job(sh, o.Dep); err != nil {
			return err
		}
		return v.job(int(o.DependentShard), o.Dependent)
	case *statemachine.AuditOp:
		// A gateway records a call on the shard its namespace hashes to,
		// through this node when it does not host that shard.
		ns := o.Record.Namespace
		if err := router.ValidateNamespace(ns); err != nil {
			return fmt.Errorf("audit namespace: %w", err)
		}
		if n := v.rt.ShardForQueue(ns); n != sh {
			return fmt.Errorf("namespace %q is audited on shard %d, not %d", ns, n, sh)
		}
		return nil
	case *statemachine.ImportOp:
		return v.importOp(sh, o)
	case *statemachine.SetBudgetOp:
		// Every shard holds every budget.
		if ns := o.Budget.Namespace; ns != "" {
			if err := router.ValidateNamespace(ns); err != nil || ns == router.DefaultNamespace {
				return fmt.Errorf("budget namespace %q is not a namespace's stored name", ns)
			}
		}
		if o.Delete {
			return nil
		}
		return o.Budget.Check()
	case *statemachine.SetProviderOp:
		// Every shard holds every provider.
		if o.Delete {
			p := o.Provider
			p.RPM = 1 // a delete names the provider only
			return p.Check()
		}
		return o.Provider.Check()
	case *statemachine.LinkProviderOp:
		if o.Provider != "" {
			if err := statemachine.CheckProviderName(o.Provider); err != nil {
				return err
			}
		}
		return v.queue(sh, o.Queue)
	case *statemachine.ProviderMemberOp:
		if ns := o.Namespace; ns != "" {
			if err := router.ValidateNamespace(ns); err != nil || ns == router.DefaultNamespace {
				return fmt.Errorf("provider namespace %q is not a namespace's stored name", ns)
			}
		}
		if int(o.Member.Shard) >= v.rt.Shards() {
			return fmt.Errorf("member shard %d out of range", o.Member.Shard)
		}
		return statemachine.CheckProviderName(o.Member.Name)
	case *statemachine.ProviderShareOp:
		// The rebalancer's, proposed on the node leading the meta group.
		if ns := o.Namespace; ns != "" {
			if err := router.ValidateNamespace(ns); err != nil || ns == router.DefaultNamespace {
				return fmt.Errorf("provider namespace %q is not a namespace's stored name", ns)
			}
		}
		if !slices.Contains(o.Members, uint32(sh)) {
			return fmt.Errorf("a share for shard %d must name it among the members", sh)
		}
		for _, m := range o.Members {
			if int(m) >= v.rt.Shards() {
				return fmt.Errorf("member shard %d out of range", m)
			}
		}
		return statemachine.CheckProviderName(o.Name)
	case *statemachine.DepDoneOp:
		if err := v.job(sh, o.Dependent); err != nil {
			return err
		}
		_, err := v.rt.ShardForJob(o.Dep)
		return err
	}
	return errors.New("this op is a shard leader's own and is never taken from another node")
}

// newJob checks a job an enqueue or move-in creates on shard sh.
func (v *validator) newJob(sh int, j *statemachine.Job) error {
	if err := v.job(sh, j.ID); err != nil {
		return err
	}
	if err := v.queue(sh, j.Queue); err != nil {
		return err
	}
	if j.Priority > statemachine.PriorityNormal {
		return fmt.Errorf("unknown priority tier %d", j.Priority)
	}
	if j.BatchID != "" {
		if n, ok := v.rt.TaggedShard("batch_", j.BatchID); !ok || n != int(j.BatchShard) {
			return fmt.Errorf("batch %q is not on shard %d", j.BatchID, j.BatchShard)
		}
	}
	for _, d := range j.DependsOn {
		if err := v.job(int(d.Shard), d.ID); err != nil {
			return fmt.Errorf("depends_on: %w", err)
		}
	}
	return v.chain(j.Chain)
}

// chain checks a job's chain (nil: none): its step, and every target's
// queue on the shard the target names.
func (v *validator) chain(c *statemachine.Chain) error {
	if c == nil {
		return nil
	}
	if c.Step >= uint32(len(c.Steps)) {
		return fmt.Errorf("chain step %d of %d", c.Step, len(c.Steps))
	}
	targets := append([]statemachine.ChainTarget(nil), c.Steps...)
	for _, t := range []*statemachine.ChainTarget{c.OnFailure, c.OnExit} {
		if t != nil {
			targets = append(targets, *t)
		}
	}
	for _, t := range targets {
		if err := v.queue(int(t.Shard), t.Queue); err != nil {
			return fmt.Errorf("chain: %w", err)
		}
	}
	return nil
}

// job checks that id is a job ID of shard sh.
func (v *validator) job(sh int, id string) error {
	n, err := v.rt.ShardForJob(id)
	if err != nil {
		return fmt.Errorf("job id %q: %w", id, err)
	}
	if n != sh {
		return fmt.Errorf("job %s is on shard %d, not %d", id, n, sh)
	}
	return nil
}

// queue checks that q is a valid stored queue name (router.NamespacedQueue)
// owned by shard sh.
func (v *validator) queue(sh int, q string) error {
	if err := router.ValidateStoredQueue(q); err != nil {
		return err
	}
	if n := v.rt.ShardForQueue(q); n != sh {
		return fmt.Errorf("queue %q is on shard %d, not %d", q, n, sh)
	}
	return nil
}

// importOp checks a restored record (exactly one) written on shard sh: its
// ID carries sh, its queues are valid stored names (a namespace's queue
// included) owned by the shards the record says, and every job it names
// has a valid ID.
func (v *validator) importOp(sh int, o *statemachine.ImportOp) error {
	set := 0
	for _, p := range []bool{o.Job != nil, o.Batch != nil, o.Schedule != nil} {
		if p {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("an import holds %d records, not 1", set)
	}
	switch {
	case o.Job != nil:
		j := &o.Job.View.Job
		if err := v.job(sh, j.ID); err != nil {
			return err
		}
		if err := v.queue(sh, j.Queue); err != nil {
			return err
		}
		if j.Priority > statemachine.PriorityNormal {
			return fmt.Errorf("unknown priority tier %d", j.Priority)
		}
		if st := o.Job.View.State.State; st < statemachine.StatePending || st > statemachine.StateHeld {
			return fmt.Errorf("unknown job state %d", st)
		}
		if j.BatchID != "" {
			if n, ok := v.rt.TaggedShard("batch_", j.BatchID); !ok || n != int(j.BatchShard) {
				return fmt.Errorf("batch %q is not on shard %d", j.BatchID, j.BatchShard)
			}
		}
		for _, d := range j.DependsOn {
			if err := v.job(int(d.Shard), d.ID); err != nil {
				return fmt.Errorf("depends_on: %w", err)
			}
		}
		for _, id := range o.Job.Resolved {
			if _, err := v.rt.ShardForJob(id); err != nil {
				return fmt.Errorf("resolved dependency %q: %w", id, err)
			}
		}
		return v.chain(j.Chain)
	case o.Batch != nil:
		b := &o.Batch.Batch
		if n, ok := v.rt.TaggedShard("batch_", b.ID); !ok || n != sh {
			return fmt.Errorf("batch %q does not belong to shard %d", b.ID, sh)
		}
		for _, id := range o.Batch.Counted {
			if _, err := v.rt.ShardForJob(id); err != nil {
				return fmt.Errorf("batch job %q: %w", id, err)
			}
		}
		if b.CallbackQueue == "" {
			return nil
		}
		if int(b.CallbackShard) != sh {
			return fmt.Errorf("batch callback shard %d is not %d", b.CallbackShard, sh)
		}
		if err := v.queue(sh, b.CallbackQueue); err != nil {
			return err
		}
		return v.job(sh, b.CallbackJobID)
	default:
		sc := o.Schedule
		if n, ok := v.rt.TaggedShard("sched_", sc.ID); !ok || n != sh {
			return fmt.Errorf("schedule %q does not belong to shard %d", sc.ID, sh)
		}
		if sc.Priority > statemachine.PriorityNormal {
			return fmt.Errorf("unknown priority tier %d", sc.Priority)
		}
		return v.queue(sh, sc.Queue)
	}
}

// checkUsage applies the public API's bounds to a usage report (nil: none).
func checkUsage(u *statemachine.Usage) error {
	if u == nil {
		return nil
	}
	return u.Check()
}
