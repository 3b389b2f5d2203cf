// Package membudget is a node's memory budget (--max-memory): the one
// figure the node sizes its caches from (Plan), and the ledger that bounds
// what grows with load — request bodies, proposal queues, the mirror's
// buffer — by accounting their bytes and refusing new ones past it
// (Account). Watch measures what the process really holds, so writes are
// also refused while it is over the budget, and gives memory back to the
// operating system after a burst.
package membudget

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// Budget is one node's memory budget. Its accounts share a pool of Plan.Pool
// bytes; each has its own cap within it as well. A nil *Budget bounds
// nothing.
type Budget struct {
	plan Plan
	used atomic.Int64 // bytes the accounts hold together
	// over: the process's measured memory is above the budget (Watch).
	over atomic.Bool
	// resident is the last measured process memory (Watch).
	resident atomic.Int64
	// taken counts every byte the activity accounts (request bodies)
	// ever took: how busy the node's clients keep it (Watch's quiet
	// release; the node's own maintenance proposals do not count).
	taken atomic.Int64
}

// releasedTotal counts the times memory was handed back to the OS.
var releasedTotal = metrics.NewCounter(`corvo_memory_released_total`)

// quietReleasedTotal counts the times a quiet node gave back its caches.
var quietReleasedTotal = metrics.NewCounter(`corvo_memory_quiet_releases_total`)

// Account is one consumer's share of the pool. A nil *Account bounds
// nothing: TryAcquire always succeeds.
type Account struct {
	b    *Budget
	name string
	max  int64
	used atomic.Int64
	// activity: what it takes counts as the node being busy (Budget.taken).
	activity bool
	// refused counts refusals (corvo_memory_refused_total{consumer}).
	refused *metrics.Counter
}

// New makes the budget of a plan.
func New(p Plan) *Budget {
	return &Budget{plan: p}
}

// Plan is the plan the budget was made from.
func (b *Budget) Plan() Plan { return b.plan }

// Account opens the named account, which may hold at most max bytes (and
// no more than what the pool has left). name labels its gauges.
func (b *Budget) Account(name string, max int64) *Account {
	return &Account{b: b, name: name, max: max,
		refused: metrics.GetOrCreateCounter(`corvo_memory_refused_total{consumer="` + name + `"}`)}
}

// ActivityAccount is Account for what clients send (request bodies): what
// it takes also says the node is busy, which holds Watch's quiet release
// off.
func (b *Budget) ActivityAccount(name string, max int64) *Account {
	a := b.Account(name, max)
	a.activity = true
	return a
}

// Used is what the accounts hold together.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Over reports whether the process's measured memory is above the budget.
func (b *Budget) Over() bool { return b != nil && b.over.Load() }

// Over reports whether the process's measured memory is above the budget
// (false for a nil account).
func (a *Account) Over() bool { return a != nil && a.b.Over() }

// Refused counts a refusal decided by the caller (Over).
func (a *Account) Refused() {
	if a != nil {
		a.refused.Inc()
	}
}

// TryAcquire takes n bytes if both the account's cap and the pool allow
// them; false leaves nothing taken. A nil account always succeeds.
func (a *Account) TryAcquire(n int64) bool {
	if a == nil || n <= 0 {
		return true
	}
	if a.used.Add(n) > a.max {
		a.used.Add(-n)
		a.refused.Inc()
		return false
	}
	if a.b.used.Add(n) > a.b.plan.Pool {
		a.b.used.Add(-n)
		a.used.Add(-n)
		a.refused.Inc()
		return false
	}
	if a.activity {
		a.b.taken.Add(n)
	}
	return true
}

// Acquire takes n bytes whatever the limits: for what must go through
// (a read's small body) but still counts.
func (a *Account) Acquire(n int64) {
	if a == nil || n <= 0 {
		return
	}
	a.used.Add(n)
	a.b.used.Add(n)
	if a.activity {
		a.b.taken.Add(n)
	}
}

// Release gives back n bytes taken by TryAcquire or Acquire.
func (a *Account) Release(n int64) {
	if a == nil || n <= 0 {
		return
	}
	a.used.Add(-n)
	a.b.used.Add(-n)
}

// Used is what the account holds.
func (a *Account) Used() int64 {
	if a == nil {
		return 0
	}
	return a.used.Load()
}

// Max is the most the account can ever hold: its cap, or the pool when
// that is smaller (0 for a nil account).
func (a *Account) Max() int64 {
	if a == nil {
		return 0
	}
	return min(a.max, a.b.plan.Pool)
}

// Fits reports whether n bytes could ever be held by the account: a
// request larger than that is refused for good, not asked to retry.
func (a *Account) Fits(n int64) bool {
	return a == nil || n <= a.Max()
}

// RegisterGauges exposes the budget in /metrics:
// corvo_memory_budget_bytes, corvo_memory_resident_bytes,
// corvo_memory_over_budget, corvo_memory_pool_used_bytes and, per
// consumer, corvo_memory_used_bytes{consumer} and
// corvo_memory_limit_bytes{consumer}: for the accounts given, and the
// limits of the caches sized from the plan (node-wide totals). extra adds
// what consumers measured elsewhere use (name → bytes now). Gauges are process-wide: the last
// budget registered is the one shown.
func (b *Budget) RegisterGauges(accounts []*Account, extra map[string]func() int64) {
	set(`corvo_memory_budget_bytes`, func() float64 { return float64(b.plan.Total) })
	set(`corvo_memory_pool_used_bytes`, func() float64 { return float64(b.used.Load()) })
	set(`corvo_memory_resident_bytes`, func() float64 { return float64(b.resident.Load()) })
	set(`corvo_memory_over_budget`, func() float64 {
		if b.over.Load() {
			return 1
		}
		return 0
	})
	for _, a := range accounts {
		a := a
		set(consumer("used", a.name), func() float64 { return float64(a.used.Load()) })
		set(consumer("limit", a.name), func() float64 { return float64(a.max) })
	}
	for name, size := range b.plan.caches() {
		size := size
		set(consumer("limit", name), func() float64 { return float64(size) })
	}
	for name, f := range extra {
		f := f
		set(consumer("used", name), func() float64 { return float64(f()) })
	}
}

// gauges holds what each gauge reads now: a gauge is registered once per
// process, and a later budget (a test's second node) takes it over.
var gauges sync.Map // name → *atomic.Pointer[func() float64]

func set(name string, f func() float64) {
	p, loaded := gauges.LoadOrStore(name, new(atomic.Pointer[func() float64]))
	ptr := p.(*atomic.Pointer[func() float64])
	ptr.Store(&f)
	if !loaded {
		metrics.GetOrCreateGauge(name, func() float64 { return (*ptr.Load())() })
	}
}

func consumer(kind, name string) string {
	return fmt.Sprintf(`corvo_memory_%s_bytes{consumer=%q}`, kind, name)
}
