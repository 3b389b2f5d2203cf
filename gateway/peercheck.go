package gateway

import (
	"errors"
	"fmt"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// checkPeerOps validates the ops of an entry another node asks this node to
// propose to shard sh (POST /internal/v1/shards/{n}/propose): the cluster
// credential says who sent it, not that it is sound. Every job ID, queue,
// batch and schedule an op names must belong to shard sh, names must pass
// the same rules the public API applies, and a shard leader's own
// housekeeping (promote, reclaim, sweep, cron ticks, dedup pruning, outbox
// acks) is never taken from outside.
func (s *Server) checkPeerOps(sh int, ops []statemachine.Op) error {
	for i, op := range ops {
		if err := s.checkPeerOp(sh, op); err != nil {
			return fmt.Errorf("op %d (%T): %w", i, op, err)
		}
	}
	return nil
}

func (s *Server) checkPeerOp(sh int, op statemachine.Op) error {
	switch o := op.(type) {
	case *statemachine.EnqueueOp:
		return s.checkPeerJob(sh, &o.Job)
	case *statemachine.MoveInOp:
		return s.checkPeerJob(sh, &o.Job)
	case *statemachine.FetchOp:
		if len(o.Queues) == 0 || len(o.Queues) > defaultFetchQueueMax {
			return fmt.Errorf("a fetch names 1–%d queues, not %d", defaultFetchQueueMax, len(o.Queues))
		}
		for _, q := range o.Queues {
			if err := s.peerQueue(sh, q); err != nil {
				return err
			}
		}
		if o.Count < 1 || o.Count > maxFetchCount {
			return fmt.Errorf("fetch count %d is not 1–%d", o.Count, maxFetchCount)
		}
		if len(o.WorkerID) > maxWorkerIDLen || len(o.Hostname) > maxWorkerIDLen {
			return fmt.Errorf("worker_id and hostname must be at most %d bytes", maxWorkerIDLen)
		}
		return nil
	case *statemachine.AckOp:
		if o.StepStatus != "" && o.StepStatus != "continue" && o.StepStatus != "exit" {
			return fmt.Errorf("unknown step status %q", o.StepStatus)
		}
		return s.peerJob(sh, o.JobID)
	case *statemachine.FailOp:
		return s.peerJob(sh, o.JobID)
	case *statemachine.HeartbeatOp:
		if len(o.Jobs) == 0 || len(o.Jobs) > s.cfg.MaxBatchJobs {
			return fmt.Errorf("a heartbeat holds 1–%d jobs", s.cfg.MaxBatchJobs)
		}
		for i := range o.Jobs {
			if err := s.peerJob(sh, o.Jobs[i].JobID); err != nil {
				return err
			}
		}
		return nil
	case *statemachine.CancelOp:
		return s.peerJob(sh, o.JobID)
	case *statemachine.RetryJobOp:
		return s.peerJob(sh, o.JobID)
	case *statemachine.DeleteJobOp:
		return s.peerJob(sh, o.JobID)
	case *statemachine.RequeueOp:
		return s.peerJob(sh, o.JobID)
	case *statemachine.ReleaseOp:
		return s.peerJob(sh, o.JobID)
	case *statemachine.PriorityOp:
		if o.Priority > statemachine.PriorityNormal {
			return fmt.Errorf("unknown priority tier %d", o.Priority)
		}
		return s.peerJob(sh, o.JobID)
	case *statemachine.MoveJobOp:
		if err := s.peerJob(sh, o.JobID); err != nil {
			return err
		}
		return s.peerQueue(sh, o.Queue)
	case *statemachine.MoveOutOp:
		if err := s.peerJob(sh, o.JobID); err != nil {
			return err
		}
		if o.Target < 0 || o.Target >= s.rt.Shards() {
			return fmt.Errorf("target shard %d out of range", o.Target)
		}
		if err := s.peerQueue(o.Target, o.Queue); err != nil {
			return err
		}
		return s.peerJob(o.Target, o.NewID)
	case *statemachine.PauseQueueOp:
		return s.peerQueue(sh, o.Queue)
	case *statemachine.ResumeQueueOp:
		return s.peerQueue(sh, o.Queue)
	case *statemachine.SetLimitsOp:
		return s.peerQueue(sh, o.Queue)
	case *statemachine.DropQueueOp:
		if o.Index > statemachine.DropConfig {
			return fmt.Errorf("unknown queue index %d", o.Index)
		}
		return s.peerQueue(sh, o.Queue)
	case *statemachine.ScheduleOp:
		if n, ok := s.rt.TaggedShard("sched_", o.Schedule.ID); !ok || n != sh {
			return fmt.Errorf("schedule %q does not belong to shard %d", o.Schedule.ID, sh)
		}
		if o.Delete {
			return nil
		}
		if o.Schedule.Priority > statemachine.PriorityNormal {
			return fmt.Errorf("unknown priority tier %d", o.Schedule.Priority)
		}
		return s.peerQueue(sh, o.Schedule.Queue)
	case *statemachine.BatchCreateOp:
		b := &o.Batch
		if n, ok := s.rt.TaggedShard("batch_", b.ID); !ok || n != sh {
			return fmt.Errorf("batch %q does not belong to shard %d", b.ID, sh)
		}
		if b.CallbackQueue == "" {
			return nil
		}
		if int(b.CallbackShard) != sh {
			return fmt.Errorf("batch callback shard %d is not %d", b.CallbackShard, sh)
		}
		if err := s.peerQueue(sh, b.CallbackQueue); err != nil {
			return err
		}
		return s.peerJob(sh, b.CallbackJobID)
	case *statemachine.BatchDoneOp:
		if n, ok := s.rt.TaggedShard("batch_", o.BatchID); !ok || n != sh {
			return fmt.Errorf("batch %q does not belong to shard %d", o.BatchID, sh)
		}
		_, err := s.rt.ShardForJob(o.JobID)
		return err
	case *statemachine.DepWatchOp:
		if err := s.peerJob(sh, o.Dep); err != nil {
			return err
		}
		return s.peerJob(int(o.DependentShard), o.Dependent)
	case *statemachine.DepDoneOp:
		if err := s.peerJob(sh, o.Dependent); err != nil {
			return err
		}
		_, err := s.rt.ShardForJob(o.Dep)
		return err
	}
	return errors.New("this op is a shard leader's own and is never taken from another node")
}

// checkPeerJob checks a job an enqueue or move-in creates on shard sh.
func (s *Server) checkPeerJob(sh int, j *statemachine.Job) error {
	if err := s.peerJob(sh, j.ID); err != nil {
		return err
	}
	if err := s.peerQueue(sh, j.Queue); err != nil {
		return err
	}
	if j.Priority > statemachine.PriorityNormal {
		return fmt.Errorf("unknown priority tier %d", j.Priority)
	}
	if j.BatchID != "" {
		if n, ok := s.rt.TaggedShard("batch_", j.BatchID); !ok || n != int(j.BatchShard) {
			return fmt.Errorf("batch %q is not on shard %d", j.BatchID, j.BatchShard)
		}
	}
	for _, d := range j.DependsOn {
		if err := s.peerJob(int(d.Shard), d.ID); err != nil {
			return fmt.Errorf("depends_on: %w", err)
		}
	}
	if c := j.Chain; c != nil {
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
			if err := router.ValidateQueueName(t.Queue); err != nil {
				return fmt.Errorf("chain: %w", err)
			}
			if int(t.Shard) != s.rt.ShardForQueue(t.Queue) {
				return fmt.Errorf("chain: queue %q is on shard %d, not %d", t.Queue, s.rt.ShardForQueue(t.Queue), t.Shard)
			}
		}
	}
	return nil
}

// peerJob checks that id is a job ID of shard sh.
func (s *Server) peerJob(sh int, id string) error {
	n, err := s.rt.ShardForJob(id)
	if err != nil {
		return fmt.Errorf("job id %q: %w", id, err)
	}
	if n != sh {
		return fmt.Errorf("job %s is on shard %d, not %d", id, n, sh)
	}
	return nil
}

// peerQueue checks that q is a valid queue name owned by shard sh.
func (s *Server) peerQueue(sh int, q string) error {
	if err := router.ValidateQueueName(q); err != nil {
		return err
	}
	if n := s.rt.ShardForQueue(q); n != sh {
		return fmt.Errorf("queue %q is on shard %d, not %d", q, n, sh)
	}
	return nil
}
