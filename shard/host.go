// Package shard hosts Corvo's Raft groups: one dragonboat NodeHost per
// process, one on-disk state machine per shard. It proposes ops with
// deadlines through a coalescing proposer per shard, serves local reads,
// tracks leadership, runs the leader-only tickers and raises per-queue
// "has pending" signals for long-polls. It knows nothing of HTTP.
package shard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	pebblelog "github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/statemachine"
)

// logDBMemTableBytes is the Raft log database's memtable size (dragonboat's
// tiny LogDB config).
const logDBMemTableBytes = 4 << 20

// Defaults for Config.
const (
	ShardsDefault         = 4 // measured best on 2 cores (ARCHITECTURE.md)
	RTTMillisecondDefault = 50
	ElectionRTTDefault    = 20 // 1 s: shorter timeouts churned under load
	MaxOpsPerEntryDefault = 4096
	// MaxEntryBytesDefault: an entry holds up to twice this (shard's
	// proposer), which keeps it under the Raft log database's large-batch
	// threshold, half its memtable (logDBMemTableBytes). Pebble turns a
	// larger write into a memtable of its own, and after its flush the
	// memtable queue's old backing array still points at it: a burst of 1
	// MiB payloads left an 8 MiB batch held until the log's memtable next
	// filled, an hour or more on an idle node (measured with
	// scripts/overload.sh: idle RSS 77-85 -> 70-76 MiB; 8 MiB entries also
	// accepted fewer payload bytes). A single request larger than this is
	// still one entry.
	MaxEntryBytesDefault     = 768 << 10
	MaxQueuedRequestsDefault = 16384
	ProposalTimeoutDefault   = 3 * time.Second
	ProposalDeadlineDefault  = 10 * time.Second
	TickIntervalDefault      = 250 * time.Millisecond
	DedupRetentionDefault    = 5 * time.Minute
	CacheBytesDefault        = 256 << 20
	InMemLogBytesDefault     = 256 << 20
	RetentionDefault         = 7 * 24 * time.Hour
	AuditRetentionDefault    = 90 * 24 * time.Hour
	SweepIntervalDefault     = time.Second
	SnapshotEntriesDefault   = 100000
	SnapshotBytesDefault     = 32 << 20
)

// Clock is the wall clock; tests inject their own.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures a Host.
type Config struct {
	DataDir     string // holds raft/ and shards/<n>/
	RaftAddress string // host:port other nodes reach this node's Raft on
	RaftListen  string // host:port to listen on; empty: RaftAddress
	Shards      int
	// TLSCAFile, TLSCertFile and TLSKeyFile, when set, make the Raft
	// transport mutual TLS: this node presents the certificate and
	// accepts only peers whose certificate verifies against the CA.
	TLSCAFile, TLSCertFile, TLSKeyFile string

	// Cluster membership. NodeID is this node's replica ID in every Raft
	// group (1 on a single node). A node either founded its cluster (it
	// starts every group with itself as the initial member; dragonboat
	// ignores that once the group exists) or joined one (Join: the
	// cluster added its replicas first, see AddNode, and they catch up
	// from the leaders). Join stays true on every later start.
	NodeID      uint64
	NodeName    string
	HTTPAddress string // recorded in the meta group for other nodes
	Join        bool
	// Learner: the cluster added this node as a non-voting replica of
	// every group (AddNode). Open starts its replicas non-voting, waits
	// until every shard has caught up, then promotes it to a voter where
	// it is not one yet. It stays set on every later start: dragonboat
	// replays the log's "add non-voting" for this replica, which panics in
	// a replica started as a voter; one started non-voting becomes a
	// follower as soon as the membership (snapshot or replayed promotion)
	// says it votes.
	Learner  bool
	Replicas int // replicas per shard the cluster aims for
	// SnapshotEntries is how many Raft entries a shard applies between
	// snapshots; the log is then compacted to the last fifth of that, so
	// a replica further behind catches up from a streamed snapshot.
	SnapshotEntries uint64
	// SnapshotBytes is how many bytes of Raft entries a shard applies
	// between snapshots, whatever their count (logsize.go): the log then
	// keeps between a quarter and a half of it. Negative: by count only.
	SnapshotBytes int64
	Logger        zerolog.Logger
	Clock         Clock // nil: the real clock

	RTTMillisecond    uint64
	ElectionRTT       uint64
	MaxOpsPerEntry    int
	MaxEntryBytes     int
	MaxQueuedRequests int
	ProposalTimeout   time.Duration // one SyncPropose attempt
	ProposalDeadline  time.Duration // all attempts of one entry
	TickInterval      time.Duration // how often leaders look for due work
	DedupRetention    time.Duration
	CacheBytes        int64 // Pebble block cache shared by every shard
	// MemTableBytes is each shard's Pebble memtable size, JobCacheBytes
	// its cache of live jobs, InMemLogBytes its in-memory Raft log
	// (dragonboat's MaxInMemLogSize: past it proposals get ErrBusy). 0:
	// the state machine's defaults, InMemLogBytesDefault.
	MemTableBytes, JobCacheBytes, InMemLogBytes int64
	// Proposals accounts the bytes of queued proposals against the
	// node's memory budget: a proposal that does not fit gets ErrBusy.
	// nil: bounded only by MaxQueuedRequests.
	Proposals *membudget.Account
	// Retention is how long completed, dead and cancelled jobs are kept
	// (negative: forever).
	Retention     time.Duration
	SweepInterval time.Duration // expiry, unique-lock and retention sweeps
	// AuditRetention is how long audit records are kept (negative:
	// forever); pruned every SweepInterval.
	AuditRetention time.Duration
	// HoldOutbox keeps the relay from delivering (tests use it to crash a
	// node between an outbox write and its delivery).
	HoldOutbox bool
	// Remote proposes to shards this node does not host, through a node
	// that does (the peer layer's client); the outbox relay delivers
	// cross-shard effects to them with it. nil: such deliveries wait
	// (ErrUnavailable) until the shard is hosted here.
	Remote RemoteProposer
	// OnApplied, when set, hears every committed Update. It must not
	// block.
	OnApplied func(*statemachine.AppliedInfo)
	// JobChanges fills AppliedInfo.Changes (the mirror's feed); JobEvents
	// fills AppliedInfo.Events (the event stream's feed).
	JobChanges, JobEvents bool
	// OnShardRemoved, when set, hears that this node stopped hosting
	// shard i (its replica moved to another node and was deleted here).
	OnShardRemoved func(i int)
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	setDefault(&c.Shards, ShardsDefault)
	setDefault(&c.MaxOpsPerEntry, MaxOpsPerEntryDefault)
	setDefault(&c.MaxEntryBytes, MaxEntryBytesDefault)
	setDefault(&c.MaxQueuedRequests, MaxQueuedRequestsDefault)
	setDefault(&c.RTTMillisecond, RTTMillisecondDefault)
	setDefault(&c.ElectionRTT, ElectionRTTDefault)
	setDefault(&c.ProposalTimeout, ProposalTimeoutDefault)
	setDefault(&c.ProposalDeadline, ProposalDeadlineDefault)
	setDefault(&c.TickInterval, TickIntervalDefault)
	setDefault(&c.DedupRetention, DedupRetentionDefault)
	setDefault(&c.CacheBytes, CacheBytesDefault)
	setDefault(&c.InMemLogBytes, InMemLogBytesDefault)
	setDefault(&c.Retention, RetentionDefault)
	setDefault(&c.SweepInterval, SweepIntervalDefault)
	setDefault(&c.AuditRetention, AuditRetentionDefault)
	setDefault(&c.NodeID, 1)
	setDefault(&c.Replicas, 3)
	setDefault(&c.SnapshotEntries, SnapshotEntriesDefault)
	setDefault(&c.SnapshotBytes, SnapshotBytesDefault)
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return c
}

// setDefault sets *v to d when *v is the zero value.
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate checks a defaulted config.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("data dir is required")
	case c.RaftAddress == "":
		return errors.New("raft address is required")
	case c.Shards < 1 || c.Shards > 1024:
		return fmt.Errorf("shards must be 1–1024, got %d", c.Shards)
	case c.MaxOpsPerEntry < 1 || c.MaxOpsPerEntry > statemachine.MaxOpsPerEntry:
		return fmt.Errorf("max ops per entry must be 1–%d", statemachine.MaxOpsPerEntry)
	case c.ProposalTimeout > c.ProposalDeadline:
		return errors.New("proposal timeout must not exceed the proposal deadline")
	}
	return nil
}

// Host runs every shard of this node.
type Host struct {
	cfg   Config
	log   zerolog.Logger
	clock Clock
	nh    *dragonboat.NodeHost
	cache *pebble.Cache

	proposers []*proposer
	sms       []atomic.Pointer[statemachine.StateMachine] // by shard index
	// handoffs take each shard's results from its state machine to its
	// proposer (statemachine.Handoff), by shard index.
	handoffs []*statemachine.Handoff
	// rep[i] is the replica ID this node runs for shard i (0: none);
	// ready[i] is set once it has caught up (Hosts); starting[i] while a
	// placed replica is being started.
	rep       []atomic.Uint64
	ready     []atomic.Bool
	starting  []atomic.Bool
	localMu   sync.Mutex
	local     map[int]localReplica // the replicas file, guarded by localMu
	signals   *signals
	relayWake []chan struct{}
	// leaderNode[i] is the node this node's replica of shard i hears as
	// its leader (0: none known, or not hosted); this node leads shard i
	// when it is this node.
	leaderNode []atomic.Uint64
	// transferred[i] is when (Unix ns) this node last asked to hand shard
	// i's leadership to another replica (cluster.go, transferCooldown).
	transferred []atomic.Int64
	// balanceApplied[i] is shard i's applied index here (+1) at the last
	// BalanceLeaders, which the next one asks a new leader to have reached.
	balanceApplied []atomic.Uint64
	balancedAt     atomic.Int64 // when (Unix ns) they were taken
	// leaderChange[i] is closed (and replaced) when shard i's leader changes.
	leaderChange []atomic.Pointer[chan struct{}]
	// keys is the meta group's API key table as this replica applied it.
	keys atomic.Pointer[auth.State]
	// logSizes counts each shard's applied bytes; snapshotReqs carries
	// the snapshots by size they ask for (logsize.go).
	logSizes     []logSize
	snapshotReqs chan snapshotReq

	// logDBs are the Raft log's Pebble DBs (logdb_memory.go), nil once
	// the host closes; logDBMu orders flushes before the close.
	logDBMu sync.Mutex
	logDBs  []*pebblelog.DB

	closing       chan struct{}
	stopProposers chan struct{}
	wg            sync.WaitGroup
	closeOnce     sync.Once
}

// ShardID maps a shard index to its dragonboat shard ID (IDs start at 1).
func ShardID(index int) uint64 { return uint64(index) + 1 }

// Open starts (or restarts) every shard and returns once each has a leader
// or ctx ends.
func Open(ctx context.Context, cfg Config) (*Host, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	setupDragonboatLogging(cfg.Logger)
	h := &Host{
		cfg:            cfg,
		log:            cfg.Logger.With().Str("component", "shard").Logger(),
		clock:          cfg.Clock,
		signals:        newSignals(cfg.Shards),
		leaderNode:     make([]atomic.Uint64, cfg.Shards),
		transferred:    make([]atomic.Int64, cfg.Shards),
		balanceApplied: make([]atomic.Uint64, cfg.Shards),
		leaderChange:   make([]atomic.Pointer[chan struct{}], cfg.Shards),
		sms:            make([]atomic.Pointer[statemachine.StateMachine], cfg.Shards),
		handoffs:       make([]*statemachine.Handoff, cfg.Shards),
		rep:            make([]atomic.Uint64, cfg.Shards),
		ready:          make([]atomic.Bool, cfg.Shards),
		starting:       make([]atomic.Bool, cfg.Shards),
		closing:        make(chan struct{}),
		stopProposers:  make(chan struct{}),
		cache:          pebble.NewCache(cfg.CacheBytes),
		logSizes:       make([]logSize, cfg.Shards),
		snapshotReqs:   make(chan snapshotReq, cfg.Shards),
	}
	for i := range h.handoffs {
		h.handoffs[i] = statemachine.NewHandoff()
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "shards"), 0o755); err != nil {
		return nil, err
	}
	logdb := config.GetTinyMemLogDBConfig()
	logdb.KVWriteBufferSize = logDBMemTableBytes
	logdb.Shards = 1 // fsyncs of all shards share one WAL
	// Each of dragonboat's step workers keeps the buffer it encoded its
	// largest entry into, up to MaxSaveBufferSize (64 MiB by default): a
	// burst of 1 MiB payloads left 8 MiB held for good. Entries above
	// this size get a buffer of their own, which the GC takes back.
	logdb.MaxSaveBufferSize = 256 << 10
	nhc := config.NodeHostConfig{
		NodeHostDir:       filepath.Join(cfg.DataDir, "raft"),
		RTTMillisecond:    cfg.RTTMillisecond,
		RaftAddress:       cfg.RaftAddress,
		ListenAddress:     cfg.RaftListen,
		RaftEventListener: h,
		Expert:            config.ExpertConfig{LogDB: logdb},
		MutualTLS:         cfg.TLSCAFile != "",
		CAFile:            cfg.TLSCAFile,
		CertFile:          cfg.TLSCertFile,
		KeyFile:           cfg.TLSKeyFile,
	}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		h.cache.Unref()
		return nil, fmt.Errorf("start raft node host: %w", err)
	}
	h.nh = nh
	if h.logDBs, err = logDBs(nh); err != nil {
		h.log.Warn().Err(err).Msg("the raft log's Pebble DBs were not found: its memtable is not given back when the node is quiet")
	}
	var members map[uint64]dragonboat.Target
	if !cfg.Join {
		members = map[uint64]dragonboat.Target{cfg.NodeID: cfg.RaftAddress}
	}
	fail := func(err error) (*Host, error) {
		nh.Close()
		h.cache.Unref()
		return nil, err
	}
	mc := h.raftConfig(MetaShardID, cfg.NodeID, cfg.Learner)
	mc.SnapshotEntries, mc.CompactionOverhead = 1000, 100
	if err := nh.StartReplica(members, cfg.Join, newMetaSM(&h.keys), mc); err != nil {
		return fail(fmt.Errorf("start the meta group: %w", err))
	}
	if h.local, err = h.loadReplicas(); err != nil {
		return fail(err)
	}
	for i := 0; i < cfg.Shards; i++ {
		if r, ok := h.local[i]; ok {
			if err := h.startReplica(i, r); err != nil {
				return fail(err)
			}
		}
	}
	for i := 0; i < cfg.Shards; i++ {
		p := newProposer(h, ShardID(i))
		h.proposers = append(h.proposers, p)
		h.wg.Add(1)
		go p.run()
	}
	if err := h.waitReady(ctx); err != nil {
		h.Close()
		return nil, err
	}
	// Caught up (waitReady read every group through its leader): only
	// now do this node's non-voting replicas count towards a quorum.
	if err := h.promoteSelf(ctx); err != nil {
		h.Close()
		return nil, fmt.Errorf("become a voting member: %w", err)
	}
	h.relayWake = h.signals.relayWake
	for i := 0; i < cfg.Shards; i++ {
		h.wg.Add(2)
		go h.tick(i)
		go h.relay(i)
	}
	h.wg.Add(3)
	go h.registerSelf()
	go h.placementLoop()
	go h.snapshotLoop()
	return h, nil
}

func (h *Host) raftConfig(shardID, replicaID uint64, nonVoting bool) config.Config {
	return config.Config{
		ReplicaID:    replicaID,
		ShardID:      shardID,
		ElectionRTT:  h.cfg.ElectionRTT,
		IsNonVoting:  nonVoting,
		HeartbeatRTT: 2,
		CheckQuorum:  true,
		// A replica cut off from its group campaigns only after a
		// pre-vote a quorum grants, so it does not inflate its term while
		// partitioned and cannot depose the group's leader when the link
		// heals (without it, healing stalled every shard for seconds:
		// TestClusterPartition). Every replica of a group must agree on
		// PreVote: dragonboat panics on a pre-vote message otherwise.
		PreVote:            true,
		SnapshotEntries:    h.cfg.SnapshotEntries,
		CompactionOverhead: max(h.cfg.SnapshotEntries/5, 1),
		MaxInMemLogSize:    uint64(h.cfg.InMemLogBytes),
	}
}

// MemoryUsage is what this node's shards hold in memory: Pebble's block
// cache, the memtables and the caches of live jobs.
func (h *Host) MemoryUsage() (blockCache, memtables, jobCache int64) {
	for i := range h.sms {
		if s := h.sms[i].Load(); s != nil {
			m, j := s.MemoryUsage()
			memtables += m
			jobCache += j
		}
	}
	return h.cache.Size(), memtables, jobCache
}

// FilterBytes is what the shards' dedup and job-ID filters hold
// (statemachine.StateMachine.FilterBytes).
func (h *Host) FilterBytes() int64 {
	var n int64
	for i := range h.sms {
		if s := h.sms[i].Load(); s != nil {
			n += s.FilterBytes()
		}
	}
	return n
}

// ReleaseMemory gives back what the node's shards cache for speed (the
// node's idle release): each state machine's cache of live jobs and its
// memtable (flushed), the Raft log's memtable (flushed), then the blocks
// in the shared block cache. The
// caches refill from Pebble as the load comes back.
func (h *Host) ReleaseMemory() error {
	var errs []error
	for i := range h.sms {
		if s := h.sms[i].Load(); s != nil {
			if err := s.ReleaseMemory(); err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
			}
		}
	}
	if err := h.flushLogDB(); err != nil {
		errs = append(errs, err)
	}
	// A reservation of the whole cache evicts every block no reader
	// holds; releasing it gives the cache its size back.
	h.cache.Reserve(int(h.cache.MaxSize()))()
	return errors.Join(errs...)
}

func (h *Host) newStateMachine(index int) sm.CreateOnDiskStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IOnDiskStateMachine {
		s := statemachine.New(statemachine.Config{
			ShardID:       shardID,
			Dir:           filepath.Join(h.cfg.DataDir, "shards", fmt.Sprint(index)),
			Cache:         h.cache,
			MemTableBytes: h.cfg.MemTableBytes,
			JobCacheBytes: h.cfg.JobCacheBytes,
			Listener:      h,
			Logger:        h.cfg.Logger.With().Uint64("shard", shardID).Logger(),
			EmitChanges:   h.cfg.OnApplied != nil && h.cfg.JobChanges,
			EmitEvents:    h.cfg.OnApplied != nil && h.cfg.JobEvents,
			Handoff:       h.handoffs[index],
		})
		h.sms[index].Store(s)
		return s
	}
}

// waitReady waits until the meta group has a leader and every shard this
// node runs has caught up (waitShard).
func (h *Host) waitReady(ctx context.Context) error {
	for {
		if _, _, ok, _ := h.nh.GetLeaderID(MetaShardID); ok {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the meta group has no leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	// A linearizable read of the meta group: a replica this node still
	// runs but that the placement moved away while the node was down will
	// never catch up (its group deleted it); the placement loop stops it.
	var st MetaState
	if err := retryTemp(ctx, h.closing, func(ctx context.Context) error {
		v, err := h.nh.SyncRead(ctx, MetaShardID, metaQuery{})
		if err == nil {
			st = v.(MetaState)
		}
		return err
	}); err != nil {
		return fmt.Errorf("read the meta group: %w", err)
	}
	for i := 0; i < h.cfg.Shards; i++ {
		if h.rep[i].Load() == 0 {
			continue
		}
		if _, placed := st.ReplicaOf(i, h.cfg.NodeID); st.Placement != nil && !placed && st.Placement[i].Settled == st.Placement[i].Version {
			continue
		}
		if err := h.waitShard(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// appliedQuery is the cheapest linearizable read.
var appliedQuery = statemachine.AppliedQuery{}

// Applied implements statemachine.Listener.
func (h *Host) Applied(info *statemachine.AppliedInfo) {
	if info.Reset {
		// A snapshot replaced the shard's state: counts and heads are
		// re-read rather than patched.
		snapshotsRecovered.Inc()
		h.log.Info().Uint64("shard", info.ShardID).Uint64("index", info.Index).Msg("replica recovered from a snapshot")
		if i := int(info.ShardID) - 1; i >= 0 && i < h.cfg.Shards {
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				h.reseed(i)
			}()
		}
	} else {
		h.signals.applied(info)
		h.countLog(int(info.ShardID)-1, info.Index, info.Bytes)
	}
	if h.cfg.OnApplied != nil {
		h.cfg.OnApplied(info)
	}
}

// snapshotsRecovered counts snapshots this node's replicas recovered from
// (they had fallen behind the leader's compacted log).
var snapshotsRecovered = metrics.NewCounter("corvo_snapshots_recovered_total")

// missesConfirmed counts reads whose "not found" this node's replica gave
// and a linearizable read then answered (found or confirmed missing).
var missesConfirmed = metrics.NewCounter("corvo_read_misses_confirmed_total")

// missesUnconfirmed counts the misses a linearizable read could not
// confirm in time: answered as unavailable.
var missesUnconfirmed = metrics.NewCounter("corvo_read_misses_unconfirmed_total")

// reseed re-reads shard i's queue counts and heads into the signals.
func (h *Host) reseed(i int) {
	v, err := h.nh.StaleRead(ShardID(i), statemachine.ListQueuesQuery{})
	if err != nil {
		h.log.Warn().Err(err).Int("shard", i).Msg("re-reading queue counts after a snapshot failed")
		return
	}
	infos := v.([]statemachine.QueueInfo)
	names := make([]string, len(infos))
	for k := range infos {
		names[k] = infos[k].Name
	}
	heads, err := h.nh.StaleRead(ShardID(i), statemachine.PeekQuery{Queues: names})
	if err != nil {
		h.log.Warn().Err(err).Int("shard", i).Msg("re-reading queue heads after a snapshot failed")
		return
	}
	h.signals.seed(i, infos, heads.([]statemachine.QueueHead))
}

// LeaderUpdated implements raftio.IRaftEventListener.
func (h *Host) LeaderUpdated(info raftio.LeaderInfo) {
	i := int(info.ShardID) - 1
	if info.ShardID == MetaShardID || i < 0 || i >= len(h.leaderNode) {
		return
	}
	h.leaderNode[i].Store(NodeOf(info.LeaderID))
	// Wake proposals waiting on the old leader: they retry at once.
	next := make(chan struct{})
	if old := h.leaderChange[i].Swap(&next); old != nil {
		close(*old)
	}
}

// leaderChanged is closed at shard i's next leader change.
func (h *Host) leaderChanged(i int) <-chan struct{} {
	for {
		if ch := h.leaderChange[i].Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if h.leaderChange[i].CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// Shards is the number of shards.
func (h *Host) Shards() int { return h.cfg.Shards }

// Hosts reports whether this node runs a caught-up replica of shard i, so
// its local reads, signals, mirror rows and events can be used (the
// gateway sends requests for other shards to a node that hosts them).
func (h *Host) Hosts(i int) bool { return i >= 0 && i < h.cfg.Shards && h.ready[i].Load() }

// IsLeader reports whether this node leads shard index i.
func (h *Host) IsLeader(i int) bool {
	n := h.leaderNode[i].Load()
	return n != 0 && n == h.cfg.NodeID
}

// Replica is what this node's replica of shard i hears and has done: the
// node it hears as the shard's leader (0: none known — an election, a
// partition — or the shard not hosted here) and its applied index.
func (h *Host) Replica(i int) (leader, applied uint64) {
	if s := h.sms[i].Load(); s != nil {
		applied = s.Applied()
	}
	return h.leaderNode[i].Load(), applied
}

// Propose commits ops to shard i in one entry and returns one result per op.
func (h *Host) Propose(ctx context.Context, i int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if i < 0 || i >= len(h.proposers) {
		return nil, fmt.Errorf("no shard %d", i)
	}
	return h.proposers[i].submit(ctx, ops)
}

// ProposeWithin is Propose with a timeout in place of a context (cheaper:
// no context or timer of its own).
func (h *Host) ProposeWithin(timeout time.Duration, i int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if i < 0 || i >= len(h.proposers) {
		return nil, fmt.Errorf("no shard %d", i)
	}
	return h.proposers[i].submitWithin(timeout, ops)
}

// Read answers a statemachine query from this node's replica of shard i.
// After a Propose on this node returns, Read sees its effects. An answer
// that says a job or batch does not exist (statemachine.Missing) is
// confirmed with a linearizable read, so a job acknowledged through any
// node is found through every node: a follower may not have applied the
// entry yet. When the shard has no leader to confirm with (a partition),
// the local answer stands.
func (h *Host) Read(i int, query interface{}) (interface{}, error) {
	if i < 0 || i >= h.cfg.Shards {
		return nil, fmt.Errorf("no shard %d", i)
	}
	v, err := h.nh.StaleRead(ShardID(i), query)
	if errors.Is(err, dragonboat.ErrShardNotFound) {
		// Removed from the cluster: another node must answer.
		return nil, fmt.Errorf("%w: this node no longer hosts shard %d", ErrUnavailable, ShardID(i))
	}
	if err == nil && statemachine.Missing(v) {
		ctx, cancel := context.WithTimeout(context.Background(), MissConfirmTimeout)
		sv, serr := h.nh.SyncRead(ctx, ShardID(i), query)
		cancel()
		if serr == nil {
			missesConfirmed.Inc()
			return sv, nil
		}
		// Not confirmed (no leader yet, or this replica is behind and
		// cannot catch up in time): what this replica misses may have
		// been acknowledged through another node. Unavailable (503,
		// retry), never a "not found" that may be false.
		missesUnconfirmed.Inc()
		return nil, fmt.Errorf("%w: shard %d could not confirm a miss: %v", ErrUnavailable, ShardID(i), serr)
	}
	return v, err
}

// MissConfirmTimeout bounds the linearizable read that confirms a miss.
const MissConfirmTimeout = 2 * time.Second

// Fetchable reports whether queue has pending jobs that no claim in
// flight from this node reserved (Reserve), and is not paused or blocked,
// as far as this node's replica knows.
func (h *Host) Fetchable(queue string) bool {
	return h.signals.fetchable(queue, h.clock.Now().UnixNano())
}

// Reserve reserves up to n of the pending jobs of queues (all on one
// shard) that no claim in flight from this node reserved, for a claim of
// Reservation.N jobs about to be proposed (N 0: nothing to claim; park
// instead). Release it when the claim answers.
func (h *Host) Reserve(queues []string, n int) Reservation {
	return h.signals.reserve(queues, n, h.clock.Now().UnixNano())
}

// Release returns a reservation when its claim answered; wake: the claim
// failed or got jobs, so long-polls that parked may look again if jobs
// are left that no claim reserved.
func (h *Host) Release(r Reservation, wake bool) {
	h.signals.release(r, wake, h.clock.Now().UnixNano())
}

// ThrottledUntil is when a throttled queue may hand out jobs again (Unix
// ns; 0 when it is not waiting on a throttle window).
func (h *Host) ThrottledUntil(queue string) int64 { return h.signals.blockedUntil(queue) }

// Pending is the queue's pending count on this node's replica.
func (h *Host) Pending(queue string) int64 { return h.signals.pending(queue) }

// Head is the queue's first pending job (priority, age) as this node's
// replica last saw it; OK is false when nothing is pending.
func (h *Host) Head(queue string) statemachine.QueueHead { return h.signals.headOf(queue) }

// Watch returns a channel closed when queue next gains fetchable jobs.
func (h *Host) Watch(queue string) <-chan struct{} { return h.signals.watch(queue) }

// Closing is closed when the host starts shutting down.
func (h *Host) Closing() <-chan struct{} { return h.closing }

// Close stops the tickers and proposers (queued requests fail with
// ErrClosed; the entry in flight completes), then closes dragonboat and
// every Pebble DB.
func (h *Host) Close() {
	h.closeOnce.Do(func() {
		close(h.closing)
		close(h.stopProposers)
		h.wg.Wait()
		h.logDBMu.Lock()
		h.logDBs = nil
		h.logDBMu.Unlock()
		if h.nh != nil {
			h.nh.Close()
		}
		h.cache.Unref()
	})
}
