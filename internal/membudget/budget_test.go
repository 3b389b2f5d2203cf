package membudget

import (
	"bytes"
	"io/fs"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
)

func files(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if v, ok := m[name]; ok {
			return []byte(v), nil
		}
		return nil, fs.ErrNotExist
	}
}

const meminfo24G = "MemTotal:       25165824 kB\nMemFree:        16000000 kB\n"

func TestSystemDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		from  string
	}{
		{"ram only", map[string]string{"/proc/meminfo": meminfo24G}, 12 << 30, "/proc/meminfo"},
		{"cgroup v2 of the namespace root", map[string]string{"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "0::/\n",
			"/sys/fs/cgroup/memory.max": "4294967296\n"}, 2 << 30, "/sys/fs/cgroup/memory.max"},
		{"cgroup v2 own path", map[string]string{"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "0::/kubepods/pod1\n",
			"/sys/fs/cgroup/kubepods/pod1/memory.max": "2147483648\n", "/sys/fs/cgroup/memory.max": "max\n"},
			1 << 30, "/sys/fs/cgroup/kubepods/pod1/memory.max"},
		{"cgroup v2 without a limit", map[string]string{"/proc/meminfo": meminfo24G, "/sys/fs/cgroup/memory.max": "max\n"},
			12 << 30, "/proc/meminfo"},
		{"cgroup v1", map[string]string{"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "4:memory:/docker/abc\n3:cpu:/docker/abc\n",
			"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "1073741824\n"}, 512 << 20,
			"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"},
		{"cgroup v1 without a limit", map[string]string{"/proc/meminfo": meminfo24G,
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 12 << 30, "/proc/meminfo"},
		{"a limit above the RAM", map[string]string{"/proc/meminfo": meminfo24G, "/sys/fs/cgroup/memory.max": "68719476736\n"},
			12 << 30, "/proc/meminfo"},
		{"a tiny limit", map[string]string{"/sys/fs/cgroup/memory.max": "104857600\n"}, MinTotal, "/sys/fs/cgroup/memory.max"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, err := System{ReadFile: files(tc.files)}.Default()
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.from, from)
		})
	}
	_, _, err := System{ReadFile: files(nil)}.Default()
	require.Error(t, err)
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "2G": 2 << 30, "1.5GiB": 3 << 29,
		"1073741824": 1 << 30, "1GB": 1e9, "64 KiB": 64 << 10, "100b": 100} {
		got, err := ParseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "GiB", "1XB", "-1GiB", "1e30", "99999999TiB"} {
		_, err := ParseBytes(in)
		require.Error(t, err, in)
	}
	require.Equal(t, "1GiB", FormatBytes(1<<30))
	require.Equal(t, "1.5GiB", FormatBytes(3<<29))
}

func TestNewPlan(t *testing.T) {
	t.Parallel()
	// A large budget keeps the caches at their old sizes.
	p := NewPlan(12<<30, 4)
	require.Equal(t, Plan{Total: 12 << 30, Shards: 4, BlockCache: BlockCacheCap, MemTable: MemTableCap, JobCache: JobCacheCap,
		RaftLog: RaftLogCap, SQLite: SQLiteCap, Pool: 3 << 30, Bodies: 3 << 30, Proposals: 3 << 30, Mirror: 3 << 29,
		GoLimit: 12<<30 - BlockCacheCap - 8*MemTableCap - 13*SQLiteCap/8 - 12<<30/16}, p)
	// 1 GiB over 4 shards.
	p = NewPlan(1<<30, 4)
	require.Equal(t, Plan{Total: 1 << 30, Shards: 4, BlockCache: 128 << 20, MemTable: 16 << 20, JobCache: 16 << 20,
		RaftLog: 32 << 20, SQLite: 32 << 20, Pool: 256 << 20, Bodies: 256 << 20, Proposals: 256 << 20, Mirror: 128 << 20,
		GoLimit: 1<<30 - 128<<20 - 8*16<<20 - 52<<20 - 64<<20}, p)
	// Below the floor: the floor; what is set aside never passes the total.
	p = NewPlan(1, 64)
	require.Equal(t, int64(MinTotal), p.Total)
	require.Positive(t, p.GoLimit)
}

func TestAccount(t *testing.T) {
	t.Parallel()
	b := New(Plan{Total: 1000, Pool: 100})
	bodies, mirror := b.Account("test_bodies", 100), b.Account("test_mirror", 50)
	require.True(t, bodies.TryAcquire(60))
	require.False(t, mirror.TryAcquire(41), "the pool has 40 left")
	require.Zero(t, mirror.Used())
	require.True(t, mirror.TryAcquire(40))
	require.False(t, bodies.TryAcquire(1))
	bodies.Release(60)
	require.False(t, mirror.TryAcquire(11), "over the mirror's own cap")
	require.True(t, bodies.TryAcquire(60))
	require.Equal(t, int64(100), b.Used())
	bodies.Acquire(10) // forced: counts past the pool
	require.Equal(t, int64(110), b.Used())
	bodies.Release(70)
	mirror.Release(40)
	require.Zero(t, b.Used())
	require.True(t, bodies.Fits(100))
	require.False(t, bodies.Fits(101))
	require.False(t, mirror.Fits(51))
	require.Equal(t, int64(50), mirror.Max())
	require.Equal(t, int64(100), b.Account("test_large", 1000).Max(), "no more than the pool")
	// Over the budget (measured): the callers decide what to refuse.
	require.False(t, bodies.Over())
	b.over.Store(true)
	require.True(t, bodies.Over())
	var none *Account
	require.True(t, none.TryAcquire(1<<40))
	none.Release(5)
	require.True(t, none.Fits(1<<40))
	require.False(t, none.Over())
}

func TestWatcherStep(t *testing.T) {
	t.Parallel()
	b := New(NewPlan(1<<30, 4))
	var resident, idle int64
	now := time.Unix(1000, 0)
	releases := 0
	w := &watcher{b: b, cfg: WatchConfig{Resident: func() int64 { return resident }, Reclaimable: func() int64 { return idle },
		Release: func() { releases++ }, Now: func() time.Time { return now }}.withDefaults()}
	resident, idle = 500<<20, 10<<20
	w.step()
	require.False(t, b.Over())
	require.Zero(t, releases)
	// Over the budget: over, and memory is released at once.
	resident = 1<<30 + 1
	w.step()
	require.True(t, b.Over())
	require.Equal(t, 1, releases)
	// Still over a second later: not released again before ReleaseEvery.
	now = now.Add(time.Second)
	w.step()
	require.Equal(t, 1, releases)
	// Just under the budget: still over (hysteresis), released again
	// after ReleaseEvery.
	resident = 1<<30 - 1<<20
	now = now.Add(ReleaseEveryDefault)
	w.step()
	require.True(t, b.Over())
	require.Equal(t, 2, releases)
	// Well under: writes admitted again; a small idle heap is kept.
	resident = 600 << 20
	now = now.Add(ReleaseEveryDefault)
	w.step()
	require.False(t, b.Over())
	require.Equal(t, 2, releases)
	// A burst left much of the heap reclaimable: handed back; a little
	// is not worth a collection.
	idle = ReleaseFloor
	now = now.Add(ReleaseEveryDefault)
	w.step()
	require.Equal(t, 2, releases)
	idle = ReleaseFloor + 1
	w.step()
	require.Equal(t, 3, releases)
	require.Equal(t, int64(600<<20), b.resident.Load())
}

func TestGauges(t *testing.T) {
	b := New(NewPlan(1<<30, 4))
	a := b.Account("gauge_test", 1<<20)
	require.True(t, a.TryAcquire(4096))
	b.RegisterGauges([]*Account{a}, map[string]func() int64{"gauge_ring": func() int64 { return 77 }})
	var out bytes.Buffer
	metrics.WritePrometheus(&out, false)
	for _, line := range []string{
		"corvo_memory_budget_bytes 1073741824",
		`corvo_memory_used_bytes{consumer="gauge_test"} 4096`,
		`corvo_memory_limit_bytes{consumer="gauge_test"} 1048576`,
		`corvo_memory_used_bytes{consumer="gauge_ring"} 77`,
		`corvo_memory_limit_bytes{consumer="block_cache"} 134217728`,
		`corvo_memory_limit_bytes{consumer="memtables"} 134217728`,
		`corvo_memory_limit_bytes{consumer="job_cache"} 67108864`,
		`corvo_memory_limit_bytes{consumer="raft_log"} 134217728`,
		`corvo_memory_limit_bytes{consumer="sqlite_cache"} 54525952`,
		"corvo_memory_over_budget 0",
		"corvo_memory_pool_used_bytes 4096",
	} {
		require.Contains(t, out.String(), line+"\n")
	}
	// A second budget takes the gauges over.
	New(NewPlan(2<<30, 4)).RegisterGauges(nil, nil)
	out.Reset()
	metrics.WritePrometheus(&out, false)
	require.Contains(t, out.String(), "corvo_memory_budget_bytes 2147483648\n")
}

func TestWatcherQuietRelease(t *testing.T) {
	t.Parallel()
	quiet, releases := 0, 0
	b, acct, step := quietWatcher(WatchConfig{Release: func() { releases++ }, QuietRelease: func() { quiet++ }})
	// Busy: a megabyte taken every 10 s keeps the caches.
	for range 10 {
		require.True(t, acct.TryAcquire(QuietBytesDefault))
		acct.Release(QuietBytesDefault)
		step(10 * time.Second)
	}
	require.Zero(t, quiet)
	// Quiet (a little taken, less than QuietBytes): released once,
	// QuietAfter after the last busy step, with the memory given back
	// at once (not held back by ReleaseEvery).
	acct.Acquire(QuietBytesDefault / 2)
	step(QuietAfterDefault - time.Millisecond)
	require.Zero(t, quiet)
	step(time.Millisecond)
	require.Equal(t, 1, quiet)
	require.Equal(t, 1, releases)
	// Still quiet, whatever the node's own proposals take: not again.
	proposals := b.Account("proposals", 1<<30)
	proposals.Acquire(10 * QuietBytesDefault)
	proposals.Release(10 * QuietBytesDefault)
	step(QuietAfterDefault)
	step(QuietAfterDefault)
	require.Equal(t, 1, quiet)
	// Work in hand (bytes held, not new) holds the release off like new
	// bytes do.
	held := b.Account("mirror_buffer", 1<<30)
	held.Acquire(QuietBytesDefault)
	step(QuietAfterDefault)
	step(QuietAfterDefault)
	require.Equal(t, 1, quiet)
	held.Release(QuietBytesDefault)
	step(QuietAfterDefault - time.Millisecond)
	require.Equal(t, 1, quiet)
	step(time.Millisecond)
	require.Equal(t, 2, quiet)
	// Busy again, then quiet: released again.
	acct.Acquire(QuietBytesDefault)
	acct.Release(QuietBytesDefault)
	step(time.Second)
	require.Equal(t, 2, quiet)
	step(QuietAfterDefault)
	require.Equal(t, 3, quiet)
	require.Equal(t, 3, releases)
}

// release frees what sync.Pools hold, not only what no one references: a
// pooled buffer survives one collection in the pool's victim cache.
func TestReleaseEmptiesPools(t *testing.T) {
	var pool sync.Pool
	b := new([1 << 20]byte)
	w := weak.Make(b)
	pool.Put(b)
	b = nil
	release()
	require.Nil(t, w.Value(), "a pooled buffer survived the release")
	runtime.KeepAlive(&pool)
}

// While quiet, the heap is kept near its live objects: a few MiB of
// garbage are released (at most every ReleaseEvery), not ReleaseFloor;
// busy again, the floor is ReleaseFloor once more.
func TestWatcherQuietKeepsHeapSmall(t *testing.T) {
	t.Parallel()
	var spare int64
	releases := 0
	_, acct, step := quietWatcher(WatchConfig{Reclaimable: func() int64 { return spare }, Release: func() { releases++ }, QuietRelease: func() {}})
	busyOnce(acct)
	spare = QuietReleaseFloor + 1
	step(ReleaseEveryDefault)
	require.Zero(t, releases, "busy: a few MiB of garbage are kept")
	step(QuietAfterDefault)
	require.Equal(t, 1, releases, "the quiet release")
	step(time.Second)
	require.Equal(t, 1, releases, "not again before ReleaseEvery")
	step(ReleaseEveryDefault)
	require.Equal(t, 2, releases, "quiet: released at QuietReleaseFloor")
	spare = QuietReleaseFloor
	step(ReleaseEveryDefault)
	require.Equal(t, 2, releases, "less is not worth a collection")
	busyOnce(acct)
	spare = QuietReleaseFloor + 1
	step(ReleaseEveryDefault)
	require.Equal(t, 2, releases, "busy again: back to ReleaseFloor")
}

// While quiet, the C heap is trimmed every ReleaseEvery whatever the Go
// heap holds (a release trims it too, and restarts the count); while
// busy, only releases trim it.
func TestWatcherQuietTrimsTheCHeap(t *testing.T) {
	t.Parallel()
	releases, trims := 0, 0
	_, acct, step := quietWatcher(WatchConfig{Release: func() { releases++ }, Trim: func() { trims++ }, QuietRelease: func() {}})
	busyOnce(acct)
	step(ReleaseEveryDefault)
	step(ReleaseEveryDefault)
	require.Zero(t, trims, "busy")
	step(QuietAfterDefault)
	require.Equal(t, 1, releases, "the quiet release")
	require.Zero(t, trims)
	step(ReleaseEveryDefault - time.Millisecond)
	require.Zero(t, trims, "the release trimmed it just now")
	step(time.Millisecond)
	require.Equal(t, 1, trims)
	step(time.Second)
	require.Equal(t, 1, trims, "not before ReleaseEvery")
	step(ReleaseEveryDefault)
	require.Equal(t, 2, trims)
	require.Equal(t, 1, releases, "a trim is not a release: no collection")
	busyOnce(acct)
	step(ReleaseEveryDefault)
	step(ReleaseEveryDefault)
	require.Equal(t, 2, trims, "busy again")
}

// quietWatcher is a watcher of a fresh 1 GiB budget over cfg (resident
// 100 MiB and nothing reclaimable unless cfg says otherwise), its node
// last busy now: acct is its clients' request bodies, step advances its
// clock by d and measures once.
func quietWatcher(cfg WatchConfig) (b *Budget, acct *Account, step func(d time.Duration)) {
	b = New(NewPlan(1<<30, 4))
	acct = b.ActivityAccount("bodies", 1<<30)
	now := time.Unix(1000, 0)
	if cfg.Resident == nil {
		cfg.Resident = func() int64 { return 100 << 20 }
	}
	if cfg.Reclaimable == nil {
		cfg.Reclaimable = func() int64 { return 0 }
	}
	cfg.Now = func() time.Time { return now }
	w := &watcher{b: b, busyAt: now, cfg: cfg.withDefaults()}
	return b, acct, func(d time.Duration) { now = now.Add(d); w.step() }
}

// busyOnce has the clients send QuietBytes: the node is busy.
func busyOnce(acct *Account) {
	acct.Acquire(QuietBytesDefault)
	acct.Release(QuietBytesDefault)
}
