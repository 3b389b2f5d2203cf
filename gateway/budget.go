package gateway

import (
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Budgets (issue 20): /api/v1/budgets, and the check every enqueue makes.
//
// Every shard holds every budget and what its own jobs spent under each
// on each UTC day (statemachine/budget.go); a budget's spend is the sum
// over the shards. The gateway keeps that sum in a budget view, read
// from every shard (BudgetsQuery, through other nodes for shards it does
// not host) when the view is older than Config.BudgetRefresh, when the
// UTC day has changed, when this node has changed a budget, or when a
// usage report with a cost has passed through this node since: one
// node's own reports count at once, other nodes' within BudgetRefresh.
// The enqueue decides with the view and puts its verdict in the op, so
// the shard's replicas carry out one decision.

// BudgetRefreshDefault is how old the budget view may grow before an
// enqueue reads every shard's spend again.
const BudgetRefreshDefault = time.Second

// usageCostSeq counts the usage reports with a cost this process has seen
// (countUsage): a budget view older than the last one is read again.
var usageCostSeq atomic.Uint64

// budgetView is the budgets and their summed spend of one UTC day: the
// current snapshot, read without a lock by every enqueue, and the lock a
// refresh takes.
type budgetView struct {
	mu  sync.Mutex
	cur atomic.Pointer[budgetSnap]
}

type budgetSnap struct {
	at      time.Time
	day     int64
	costSeq uint64 // usageCostSeq when read
	gen     uint64 // budgetGen when read
	list    []statemachine.BudgetSpend
}

// fresh reports whether the snapshot may still be used at now.
func (s *Server) fresh(v *budgetSnap, now time.Time) bool {
	return v != nil && statemachine.UsageDay(now.UnixNano()) == v.day && s.budgetGen.Load() == v.gen &&
		(len(v.list) == 0 || usageCostSeq.Load() == v.costSeq) &&
		(s.cfg.BudgetRefresh < 0 || now.Sub(v.at) < s.cfg.BudgetRefresh)
}

// budgets is the current view (nil: none), read again when stale, by one
// caller at a time. While one reads, the others wait for its answer when
// this node hosts every shard (a local read), else go on with the view
// they have, so a slow node delays one enqueue, not all. A failed read
// keeps the previous view until the next refresh: budgets never stop
// enqueues because a shard could not be asked.
func (s *Server) budgets() []statemachine.BudgetSpend {
	now := s.clock.Now()
	v := s.budgetView.cur.Load()
	if s.fresh(v, now) {
		return v.list
	}
	if !s.budgetView.mu.TryLock() {
		if v != nil && !s.hostsEveryShard() {
			return v.list
		}
		s.budgetView.mu.Lock()
	}
	defer s.budgetView.mu.Unlock()
	now = s.clock.Now()
	old := s.budgetView.cur.Load()
	if s.fresh(old, now) {
		return old.list // read by the caller before us
	}
	// What the read will reflect: taken before it, so a report during
	// it makes the next enqueue read again.
	next := &budgetSnap{at: now, day: statemachine.UsageDay(now.UnixNano()), costSeq: usageCostSeq.Load(), gen: s.budgetGen.Load()}
	list, err := s.readBudgets(next.day)
	if err != nil {
		s.cfg.Logger.Warn().Err(err).Msg("gateway: reading the budgets' spend")
		if old != nil {
			next.list = old.list
		}
		s.budgetView.cur.Store(next)
		return next.list
	}
	next.list = list
	s.budgetView.cur.Store(next)
	return list
}

func (s *Server) hostsEveryShard() bool {
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if !s.hosted(sh) {
			return false
		}
	}
	return true
}

// readBudgets reads every shard's budgets and spend on day and sums them
// by budget. Budgets a shard lacks (a set that reached it later) count
// with what the others say.
func (s *Server) readBudgets(day int64) ([]statemachine.BudgetSpend, error) {
	parts, err := s.readEach(func(int) any { return statemachine.BudgetsQuery{Day: day} })
	if err != nil {
		return nil, err
	}
	var out []statemachine.BudgetSpend
	at := map[string]int{}
	for _, p := range parts {
		list, _ := p.([]statemachine.BudgetSpend)
		for _, b := range list {
			if i, ok := at[b.ID()]; ok {
				out[i].SpentNanos += b.SpentNanos
				continue
			}
			at[b.ID()] = len(out)
			out = append(out, b)
		}
	}
	return out, nil
}

// budgetVerdict is what the budgets say of a new job of queue with the
// raw tags: the op's verdict, and the budget to name when the job is
// refused (reject). Of several spent budgets the strictest wins (reject,
// then hold, then alert_only); each spent one counts in
// corvo_budget_exceeded_total.
func (s *Server) budgetVerdict(queue string, tags []byte) (statemachine.BudgetVerdict, *statemachine.BudgetSpend) {
	list := s.budgets()
	if len(list) == 0 {
		return statemachine.BudgetOK, nil
	}
	verdict := statemachine.BudgetOK
	var reject *statemachine.BudgetSpend
	for i := range list {
		b := &list[i]
		if b.DailyNanos == 0 || b.SpentNanos < b.DailyNanos || !b.Covers(queue, tags) {
			continue
		}
		budgetExceededCounter(b).Inc()
		switch b.OnExceed {
		case statemachine.BudgetActionReject:
			if reject == nil {
				reject = b
			}
		case statemachine.BudgetActionHold:
			verdict = statemachine.BudgetHold
		case statemachine.BudgetActionAlertOnly:
			if verdict == statemachine.BudgetOK {
				verdict = statemachine.BudgetAlert
			}
		}
	}
	return verdict, reject
}

// budgetLabel names a budget in metrics: its scope, behind its namespace
// outside the default one.
func budgetLabel(b *statemachine.Budget) string {
	if b.Namespace == "" {
		return b.Scope()
	}
	return b.Namespace + "/" + b.Scope()
}

func budgetExceededCounter(b *statemachine.BudgetSpend) *metrics.Counter {
	return metrics.GetOrCreateCounter(`corvo_budget_exceeded_total{budget="` + escapeLabel(budgetLabel(&b.Budget)) +
		`",action="` + b.OnExceed.String() + `"}`)
}

// budgetRejected is the 429 of an enqueue a spent reject budget refuses:
// the error, the budget's scope and resets_at, the next UTC midnight,
// when its day rolls over. Retry-After stays the usual 1 s (clients that
// retry every 429 would otherwise sleep until midnight; the SDKs do not
// retry this code).
func (s *Server) budgetRejected(ctx *fasthttp.RequestCtx, b *statemachine.BudgetSpend, what string) {
	now := s.clock.Now().UTC()
	next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	msg := "budget " + b.Scope() + " has spent " + string(appendUSD(nil, b.SpentNanos)) + " of its " +
		string(appendUSD(nil, b.DailyNanos)) + " USD daily limit"
	if what != "" {
		msg = what + ": " + msg
	}
	ctx.Response.Header.Set("Retry-After", "1")
	out := append([]byte(`{"error":`), appendString(nil, msg)...)
	out = append(out, `,"code":`...)
	out = appendString(out, codeBudgetExceeded.Code)
	out = append(out, `,"budget":`...)
	out = appendString(out, b.Scope())
	out = append(out, `,"resets_at":`...)
	out = appendTime(out, next.UnixNano())
	writeJSON(ctx, codeBudgetExceeded.Status, append(out, '}'))
}

// ---- /api/v1/budgets ----

// budgetRequest is PUT or POST /api/v1/budgets.
type budgetRequest struct {
	Scope     string   `json:"scope"`
	DailyUSD  *float64 `json:"daily_usd"`
	PerJobUSD *float64 `json:"per_job_usd"`
	OnExceed  string   `json:"on_exceed"`
}

// parseBudgetScope reads queue:<name>, tag:<key>=<value> or global into a
// budget of the caller's namespace, checking a scoped key may name it.
func parseBudgetScope(ctx *fasthttp.RequestCtx, scope string) (statemachine.Budget, *apiError) {
	var b statemachine.Budget
	ns := principal(ctx).Namespace
	if ns != router.DefaultNamespace {
		b.Namespace = ns
	}
	switch {
	case scope == "global":
	case strings.HasPrefix(scope, "queue:"):
		q := scope[len("queue:"):]
		if err := router.ValidateQueueName(q); err != nil {
			return b, invalid("scope: %v", err)
		}
		b.Queue = router.NamespacedQueue(ns, q)
		if !principal(ctx).AllowsQueue(b.Queue) {
			return b, codeForbidden.err("the API key may not use queue " + q)
		}
		return b, nil
	case strings.HasPrefix(scope, "tag:"):
		k, v, ok := strings.Cut(scope[len("tag:"):], "=")
		if !ok || k == "" {
			return b, invalid("scope: a tag budget is tag:<key>=<value>")
		}
		b.TagKey, b.TagValue = k, v
	default:
		return b, invalid("scope: unknown scope %q (use queue:<name>, tag:<key>=<value> or global)", scope)
	}
	if principal(ctx).Scoped() {
		return b, codeForbidden.err("a key limited to some queues can only manage queue budgets")
	}
	return b, nil
}

func usdToNanos(field string, v *float64) (int64, *apiError) {
	if v == nil {
		return 0, nil
	}
	const most = statemachine.MaxUsageCostNanos / statemachine.NanosPerUSD
	if math.IsNaN(*v) || *v < 0 || *v > most {
		return 0, invalid("field %q must be 0–%d", field, most)
	}
	return int64(math.Round(*v * statemachine.NanosPerUSD)), nil
}

// PUT|POST /api/v1/budgets — create or replace the budget of a scope.
func (s *Server) handleSetBudget(ctx *fasthttp.RequestCtx) {
	var req budgetRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	b, aerr := parseBudgetScope(ctx, req.Scope)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if b.DailyNanos, aerr = usdToNanos("daily_usd", req.DailyUSD); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if b.PerJobNanos, aerr = usdToNanos("per_job_usd", req.PerJobUSD); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if req.OnExceed == "" {
		req.OnExceed = "hold"
	}
	act, ok := statemachine.ParseBudgetAction(req.OnExceed)
	if !ok {
		writeError(ctx, invalid("field \"on_exceed\": unknown value %q (use hold, reject or alert_only)", req.OnExceed))
		return
	}
	b.OnExceed = act
	if err := b.Check(); err != nil {
		writeError(ctx, invalid("%v", err))
		return
	}
	if _, aerr := s.proposeBudget(&statemachine.SetBudgetOp{Budget: b}); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	writeJSON(ctx, 200, appendBudget(nil, &statemachine.BudgetSpend{Budget: b}, statemachine.UsageDay(s.clock.Now().UnixNano())))
}

// DELETE /api/v1/budgets/{scope}
func (s *Server) handleDeleteBudget(ctx *fasthttp.RequestCtx) {
	scope, _ := ctx.UserValue("scope").(string)
	if u, err := url.PathUnescape(scope); err == nil {
		scope = u
	}
	b, aerr := parseBudgetScope(ctx, scope)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	found, aerr := s.proposeBudget(&statemachine.SetBudgetOp{Budget: b, Delete: true})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if !found {
		writeError(ctx, codeNotFound.err("no budget "+scope))
		return
	}
	writeJSON(ctx, 200, append(append([]byte(`{"deleted":`), appendString(nil, scope)...), '}'))
}

// proposeBudget proposes op to every shard at once; found says whether a
// shard had the budget (a delete of one no shard has is not found). An
// error names the first shard that failed; the op is idempotent, so the
// caller may send it again.
func (s *Server) proposeBudget(op *statemachine.SetBudgetOp) (found bool, aerr *apiError) {
	found, aerr = s.proposeEveryShard(op)
	s.budgetGen.Add(1)
	return found, aerr
}

// GET /api/v1/budgets — the namespace's budgets with today's spend (a key
// limited to some queues sees the budgets of those).
func (s *Server) handleListBudgets(ctx *fasthttp.RequestCtx) {
	day := statemachine.UsageDay(s.clock.Now().UnixNano())
	list, err := s.readBudgets(day)
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	ns := principal(ctx).Namespace
	if ns == router.DefaultNamespace {
		ns = ""
	}
	b := []byte(`{"budgets":[`)
	first := true
	for i := range list {
		bs := &list[i]
		if bs.Namespace != ns || principal(ctx).Scoped() && (bs.Queue == "" || !principal(ctx).AllowsQueue(bs.Queue)) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendBudget(b, bs, day)
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// appendBudget writes a budget with its spend on day.
func appendBudget(b []byte, bs *statemachine.BudgetSpend, day int64) []byte {
	usd := func(b []byte, n int64) []byte {
		if n == 0 {
			return append(b, "null"...)
		}
		return appendUSD(b, n)
	}
	b = append(b, `{"scope":`...)
	b = appendString(b, bs.Scope())
	b = append(b, `,"daily_usd":`...)
	b = usd(b, bs.DailyNanos)
	b = append(b, `,"per_job_usd":`...)
	b = usd(b, bs.PerJobNanos)
	b = append(b, `,"on_exceed":`...)
	b = appendString(b, bs.OnExceed.String())
	b = append(b, `,"day":`...)
	b = appendString(b, time.Unix(day*86400, 0).UTC().Format(time.DateOnly))
	b = append(b, `,"spent_usd":`...)
	b = appendUSD(b, bs.SpentNanos)
	b = append(b, `,"exceeded":`...)
	b = appendBool(b, bs.DailyNanos > 0 && bs.SpentNanos >= bs.DailyNanos)
	return append(b, '}')
}
