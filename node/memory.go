package node

import (
	"cmp"
	"fmt"
	"time"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/shard"
)

// memoryPlan is the split of the node's memory budget for its shard
// count, and where the budget came from: MaxMemory, else
// membudget.DefaultFraction of what sys reads (the cgroup limit or the
// RAM).
func (c Config) memoryPlan(shards int, sys membudget.System) (membudget.Plan, string, error) {
	if c.MaxMemory > 0 {
		return membudget.NewPlan(c.MaxMemory, shards), "--max-memory", nil
	}
	total, from, err := sys.Default()
	if err != nil {
		return membudget.Plan{}, "", fmt.Errorf("--max-memory is not set and the default cannot be computed: %w", err)
	}
	return membudget.NewPlan(total, shards), fmt.Sprintf("%g%% of %s", membudget.DefaultFraction*100, from), nil
}

// nodeMemory is the node's budget and the accounts it hands out.
type nodeMemory struct {
	budget                     *membudget.Budget
	bodies, proposals, mirrorQ *membudget.Account
	stop, done                 chan struct{}
}

func newNodeMemory(plan membudget.Plan) *nodeMemory {
	b := membudget.New(plan)
	return &nodeMemory{budget: b,
		bodies:    b.ActivityAccount("request_bodies", plan.Bodies),
		proposals: b.Account("proposals", plan.Proposals),
		mirrorQ:   b.Account("mirror_buffer", plan.Mirror),
		stop:      make(chan struct{}), done: make(chan struct{})}
}

// size fills the shard host's cache sizes and proposal account from the
// plan (an explicit CacheBytes wins).
func (m *nodeMemory) size(h *shard.Config, cacheBytes int64) {
	p := m.budget.Plan()
	h.CacheBytes = cmp.Or(cacheBytes, p.BlockCache)
	h.MemTableBytes, h.JobCacheBytes, h.InMemLogBytes = p.MemTable, p.JobCache, p.RaftLog
	h.Proposals = m.proposals
}

// start registers the gauges and watches the process's memory until
// stopped; quiet empties the node's caches when it has been quiet.
func (m *nodeMemory) start(host *shard.Host, hub *events.Hub, quiet func()) {
	usage := func(pick func(b, mt, j int64) int64) func() int64 {
		return func() int64 { return pick(host.MemoryUsage()) }
	}
	extra := map[string]func() int64{
		"block_cache":  usage(func(b, _, _ int64) int64 { return b }),
		"memtables":    usage(func(_, mt, _ int64) int64 { return mt }),
		"job_cache":    usage(func(_, _, j int64) int64 { return j }),
		"sqlite_cache": mirror.SQLiteMemory,
		"filters":      host.FilterBytes,
	}
	if hub != nil {
		extra["event_ring"] = hub.Held
	}
	m.budget.RegisterGauges([]*membudget.Account{m.bodies, m.proposals, m.mirrorQ}, extra)
	go func() {
		defer close(m.done)
		m.budget.Watch(membudget.WatchConfig{QuietRelease: quiet}, m.stop)
	}()
}

// releaseCaches gives back what the node caches for speed once it has been
// quiet (membudget.WatchConfig.QuietRelease): the shards' job caches,
// memtables and block cache, and the mirror's SQLite caches. They refill
// from disk as the load comes back; what the SSE ring keeps stays.
func (n *Node) releaseCaches() {
	start := time.Now()
	if err := n.host.ReleaseMemory(); err != nil {
		n.log.Warn().Err(err).Msg("releasing the shards' caches failed")
	}
	if n.mir != nil {
		n.mir.ReleaseMemory()
	}
	n.log.Info().Dur("took", time.Since(start)).Msg("quiet: the caches were given back")
}

// close stops the watch (after start).
func (m *nodeMemory) close() {
	close(m.stop)
	<-m.done
}
