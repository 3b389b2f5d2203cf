package gateway

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Usage and cost (issue 20): the "usage" object of ack, ack batch items,
// fail and heartbeat jobs, its place in the job document, its Prometheus
// counters, and GET /api/v1/usage/summary.

// usageRequest is a usage report as a worker sends it.
type usageRequest struct {
	InputTokens         int64   `json:"input_tokens"`
	OutputTokens        int64   `json:"output_tokens"`
	CacheCreationTokens int64   `json:"cache_creation_tokens"`
	CacheReadTokens     int64   `json:"cache_read_tokens"`
	Model               string  `json:"model"`
	Provider            string  `json:"provider"`
	CostUSD             float64 `json:"cost_usd"`
	LatencyMs           int64   `json:"latency_ms"`
}

// toUsage validates a report (nil: none) and converts its cost to
// nano-dollars, rounded to the nearest, so that the state machine adds
// integers.
func (u *usageRequest) toUsage(what itemName) (*statemachine.Usage, *apiError) {
	if u == nil {
		return nil, nil
	}
	if u.CostUSD < 0 || u.CostUSD > statemachine.MaxUsageCostNanos/statemachine.NanosPerUSD || math.IsNaN(u.CostUSD) {
		return nil, invalid("%s: field \"usage.cost_usd\" must be 0–%d", what, statemachine.MaxUsageCostNanos/statemachine.NanosPerUSD)
	}
	out := &statemachine.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheCreationTokens: u.CacheCreationTokens,
		CacheReadTokens: u.CacheReadTokens, Model: u.Model, Provider: u.Provider,
		CostNanos: int64(math.Round(u.CostUSD * statemachine.NanosPerUSD)), LatencyMs: u.LatencyMs}
	if err := out.Check(); err != nil {
		return nil, invalid("%s: %v", what, err)
	}
	return out, nil
}

// appendUSD writes nano-dollars as an exact decimal JSON number.
func appendUSD(b []byte, nanos int64) []byte {
	if nanos < 0 {
		b = append(b, '-')
		nanos = -nanos
	}
	b = strconv.AppendInt(b, nanos/statemachine.NanosPerUSD, 10)
	frac := nanos % statemachine.NanosPerUSD
	if frac == 0 {
		return b
	}
	var digits [9]byte
	for i := 8; i >= 0; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	end := 9
	for digits[end-1] == '0' {
		end--
	}
	b = append(b, '.')
	return append(b, digits[:end]...)
}

func appendUsageCounts(b []byte, in, out, cc, cr, cost int64) []byte {
	b = append(b, `"input_tokens":`...)
	b = appendInt(b, in)
	b = append(b, `,"output_tokens":`...)
	b = appendInt(b, out)
	b = append(b, `,"cache_creation_tokens":`...)
	b = appendInt(b, cc)
	b = append(b, `,"cache_read_tokens":`...)
	b = appendInt(b, cr)
	b = append(b, `,"cost_usd":`...)
	return appendUSD(b, cost)
}

// appendJobUsage writes a job document's "usage": its totals and every
// report (null when it has none).
func appendJobUsage(b []byte, recs []statemachine.UsageRecord) []byte {
	if len(recs) == 0 {
		return append(b, "null"...)
	}
	t := statemachine.Sum(recs)
	b = append(b, '{')
	b = appendUsageCounts(b, t.InputTokens, t.OutputTokens, t.CacheCreationTokens, t.CacheReadTokens, t.CostNanos)
	b = append(b, `,"reports":[`...)
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"attempt":`...)
		b = appendInt(b, int64(r.Attempt))
		b = append(b, `,"phase":`...)
		b = appendString(b, r.Phase.String())
		b = append(b, ',')
		b = appendUsageCounts(b, r.InputTokens, r.OutputTokens, r.CacheCreationTokens, r.CacheReadTokens, r.CostNanos)
		b = append(b, `,"model":`...)
		b = appendNullableString(b, r.Model)
		b = append(b, `,"provider":`...)
		b = appendNullableString(b, r.Provider)
		b = append(b, `,"latency_ms":`...)
		b = appendInt(b, r.LatencyMs)
		b = append(b, `,"at":`...)
		b = appendTime(b, r.At)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// ---- Prometheus counters ----

// usageCounters are one (queue, model, provider)'s counters.
type usageCounters struct {
	input, output, cacheCreation, cacheRead, reports *metrics.Counter
	cost                                             *metrics.FloatCounter
}

// maxUsageSeries bounds the label sets the usage counters create: models
// and providers are the workers' words, and a label set per typo would
// grow /metrics without end. Past it, new ones count as model and
// provider "other".
const maxUsageSeries = 2000

var (
	usageSeries  sync.Map // label string → *usageCounters
	usageSeriesN atomic.Int64
)

// escapeLabel escapes a Prometheus label value.
func escapeLabel(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func usageCountersFor(queue, model, provider string) *usageCounters {
	l := `{queue="` + queue + `"`
	if ns, q := router.SplitQueue(queue); ns != router.DefaultNamespace {
		l = `{namespace="` + ns + `",queue="` + q + `"`
	}
	labels := l + `,model="` + escapeLabel(model) + `",provider="` + escapeLabel(provider) + `"}`
	if c, ok := usageSeries.Load(labels); ok {
		return c.(*usageCounters)
	}
	if usageSeriesN.Load() >= maxUsageSeries {
		labels = l + `,model="other",provider="other"}`
		if c, ok := usageSeries.Load(labels); ok {
			return c.(*usageCounters)
		}
	}
	c := &usageCounters{
		input:         metrics.GetOrCreateCounter(`corvo_usage_input_tokens_total` + labels),
		output:        metrics.GetOrCreateCounter(`corvo_usage_output_tokens_total` + labels),
		cacheCreation: metrics.GetOrCreateCounter(`corvo_usage_cache_creation_tokens_total` + labels),
		cacheRead:     metrics.GetOrCreateCounter(`corvo_usage_cache_read_tokens_total` + labels),
		reports:       metrics.GetOrCreateCounter(`corvo_usage_reports_total` + labels),
		cost:          metrics.GetOrCreateFloatCounter(`corvo_usage_cost_usd_total` + labels),
	}
	v, loaded := usageSeries.LoadOrStore(labels, c)
	if !loaded {
		usageSeriesN.Add(1)
	}
	return v.(*usageCounters)
}

// countUsage adds what the usage reports an op applied changed (its
// result's Usage), and counts the reports. A heartbeat report lower than
// the one it replaced adds nothing: counters only grow.
func countUsage(recs []statemachine.UsageRecord) {
	for i := range recs {
		r := &recs[i]
		c := usageCountersFor(r.Queue, r.Model, r.Provider)
		add := func(c *metrics.Counter, v int64) {
			if v > 0 {
				c.Add(int(v))
			}
		}
		add(c.input, r.InputTokens)
		add(c.output, r.OutputTokens)
		add(c.cacheCreation, r.CacheCreationTokens)
		add(c.cacheRead, r.CacheReadTokens)
		if r.CostNanos > 0 {
			c.cost.Add(float64(r.CostNanos) / statemachine.NanosPerUSD)
		}
		if r.CostNanos != 0 {
			usageCostSeq.Add(1) // budget.go: spend moved
		}
		c.reports.Inc()
	}
}

// ---- GET /api/v1/usage/summary ----

// usagePeriods are the summary's periods.
var usagePeriods = map[string]time.Duration{"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// GET /api/v1/usage/summary?period=24h|7d|30d&group_by=queue|model|provider|tag:<key>|hour|day
// — the usage reported in the period, by group and in total, over this
// node's mirror for the shards it holds and other nodes' for the others
// (a part: ?shards=, with exact nano-dollar costs).
func (s *Server) handleUsageSummary(ctx *fasthttp.RequestCtx) {
	if s.cfg.Mirror == nil {
		writeError(ctx, codeUnavailable.err("the usage summary needs the mirror, which this server runs without"))
		return
	}
	if principal(ctx).Scoped() {
		// Its sums cover every queue of the namespace (by model, by tag):
		// not for a key limited to some.
		writeError(ctx, codeForbidden.err("a key limited to some queues cannot read the usage summary"))
		return
	}
	args := ctx.QueryArgs()
	period := string(args.Peek("period"))
	if period == "" {
		period = "24h"
	}
	d, ok := usagePeriods[period]
	if !ok {
		writeError(ctx, invalid("period: unknown value %q (use 24h, 7d or 30d)", period))
		return
	}
	groupBy := string(args.Peek("group_by"))
	f := mirror.UsageFilter{Since: s.clock.Now().Add(-d).UnixNano(), Namespace: s.searchNamespace(ctx)}
	switch {
	case groupBy == "", groupBy == "queue", groupBy == "model", groupBy == "provider", mirror.TimeGroupBy(groupBy):
		f.GroupBy = groupBy
	case strings.HasPrefix(groupBy, "tag:"):
		f.GroupBy, f.TagKey = "tag", groupBy[len("tag:"):]
	default:
		writeError(ctx, invalid("group_by: unknown value %q (use queue, model, provider, tag:<key>, hour or day)", groupBy))
		return
	}
	since, ok := sinceParam(ctx) // a part carries the asking node's bound
	if !ok {
		return
	}
	if since != 0 {
		f.Since = since
	}
	local, remote, part, ok := s.splitShards(ctx, s.searchable, "is not held by this node's mirror")
	if !ok {
		return
	}
	rctx, cancel := s.readContext(ctx)
	defer cancel()
	// Read your writes, on every node a part runs on too: a report
	// acknowledged before the summary was asked is in it.
	s.awaitMirror(rctx, nil)
	f.Shards = local
	sum, err := s.cfg.Mirror.UsageSummary(rctx, f)
	if errors.Is(err, mirror.ErrBadFilter) {
		writeError(ctx, invalid("%v", err))
		return
	}
	if err != nil {
		writeError(ctx, codeInternal.err(err.Error()))
		return
	}
	if f.GroupBy == "queue" {
		for i := range sum.Groups {
			if k := sum.Groups[i].Key; k != nil {
				dq := router.DisplayQueue(*k)
				sum.Groups[i].Key = &dq
			}
		}
	}
	if part {
		b, _ := json.Marshal(partOf(sum))
		writeJSON(ctx, 200, b)
		return
	}
	if len(remote) > 0 {
		q := "/api/v1/usage/summary?period=" + period + "&since=" + strconv.FormatInt(f.Since, 10)
		if groupBy != "" {
			q += "&group_by=" + string(fasthttp.AppendQuotedArg(nil, []byte(groupBy)))
		}
		bodies, perr := s.peer.GetShards(principal(ctx).Namespace, q, remote, time.Now().Add(s.cfg.RequestTimeout))
		if perr != nil {
			writeError(ctx, engineError(perr))
			return
		}
		for _, body := range bodies {
			var p usagePart
			if err := json.Unmarshal(body, &p); err != nil {
				writeError(ctx, codeUnavailable.err("another node answered a malformed usage summary"))
				return
			}
			mergeUsage(sum, &p, mirror.TimeGroupBy(f.GroupBy))
		}
	}
	writeJSON(ctx, 200, appendUsageSummary(nil, period, f.GroupBy, groupBy, sum))
}

// usagePart is a node's answer to a part of a summary (?shards=): the
// mirror's sums as they are, costs in nano-dollars.
type usagePart struct {
	Groups []usagePartGroup `json:"groups"`
	Totals usagePartGroup   `json:"totals"`
	Cache  struct {
		Hits       int64 `json:"hits"`
		Misses     int64 `json:"misses"`
		SavedNanos int64 `json:"saved_nanos"`
	} `json:"cache"`
}

type usagePartGroup struct {
	Key                 *string `json:"key"`
	InputTokens         int64   `json:"input_tokens"`
	OutputTokens        int64   `json:"output_tokens"`
	CacheCreationTokens int64   `json:"cache_creation_tokens"`
	CacheReadTokens     int64   `json:"cache_read_tokens"`
	CostNanos           int64   `json:"cost_nanos"`
	Jobs                int64   `json:"jobs"`
	Reports             int64   `json:"reports"`
}

func partGroup(g *mirror.UsageGroup) usagePartGroup {
	return usagePartGroup{Key: g.Key, InputTokens: g.InputTokens, OutputTokens: g.OutputTokens, CacheCreationTokens: g.CacheCreationTokens,
		CacheReadTokens: g.CacheReadTokens, CostNanos: g.CostNanos, Jobs: g.Jobs, Reports: g.Reports}
}

func partOf(s *mirror.UsageSummary) *usagePart {
	p := &usagePart{Groups: make([]usagePartGroup, len(s.Groups)), Totals: partGroup(&s.Totals)}
	p.Cache.Hits, p.Cache.Misses, p.Cache.SavedNanos = s.Cache.Hits, s.Cache.Misses, s.Cache.SavedNanos
	for i := range s.Groups {
		p.Groups[i] = partGroup(&s.Groups[i])
	}
	return p
}

func addGroup(g *mirror.UsageGroup, p *usagePartGroup) {
	g.InputTokens += p.InputTokens
	g.OutputTokens += p.OutputTokens
	g.CacheCreationTokens += p.CacheCreationTokens
	g.CacheReadTokens += p.CacheReadTokens
	g.CostNanos += p.CostNanos
	g.Jobs += p.Jobs // a job lives on one shard: distinct counts add
	g.Reports += p.Reports
}

// mergeUsage adds another node's part to s, group by group, and keeps the
// groups ordered by cost, then key (byTime: by key alone, the buckets'
// starts, oldest first).
func mergeUsage(s *mirror.UsageSummary, p *usagePart, byTime bool) {
	addGroup(&s.Totals, &p.Totals)
	s.Cache.Hits += p.Cache.Hits
	s.Cache.Misses += p.Cache.Misses
	s.Cache.SavedNanos += p.Cache.SavedNanos
	for i := range p.Groups {
		pg := &p.Groups[i]
		at := slices.IndexFunc(s.Groups, func(g mirror.UsageGroup) bool {
			return (g.Key == nil && pg.Key == nil) || (g.Key != nil && pg.Key != nil && *g.Key == *pg.Key)
		})
		if at < 0 {
			s.Groups = append(s.Groups, mirror.UsageGroup{Key: pg.Key})
			at = len(s.Groups) - 1
		}
		addGroup(&s.Groups[at], pg)
	}
	slices.SortStableFunc(s.Groups, func(a, b mirror.UsageGroup) int {
		if !byTime && a.CostNanos != b.CostNanos {
			if a.CostNanos > b.CostNanos {
				return -1
			}
			return 1
		}
		switch {
		case a.Key == nil && b.Key == nil:
			return 0
		case a.Key == nil:
			return 1
		case b.Key == nil:
			return -1
		}
		return strings.Compare(*a.Key, *b.Key)
	})
}

func appendUsageGroup(b []byte, g *mirror.UsageGroup) []byte {
	b = appendUsageCounts(b, g.InputTokens, g.OutputTokens, g.CacheCreationTokens, g.CacheReadTokens, g.CostNanos)
	b = append(b, `,"jobs":`...)
	b = appendInt(b, g.Jobs)
	b = append(b, `,"reports":`...)
	b = appendInt(b, g.Reports)
	b = append(b, `,"cost_per_job_usd":`...)
	if g.Jobs == 0 {
		return append(b, '0')
	}
	return appendUSD(b, (g.CostNanos+g.Jobs/2)/g.Jobs)
}

func appendUsageSummary(b []byte, period, groupBy, groupBySent string, s *mirror.UsageSummary) []byte {
	b = append(b, `{"period":`...)
	b = appendString(b, period)
	b = append(b, `,"group_by":`...)
	b = appendNullableString(b, groupBySent)
	b = append(b, `,"groups":[`...)
	if groupBy == "" {
		s.Groups = nil
	}
	for i := range s.Groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		if k := s.Groups[i].Key; k != nil {
			b = appendString(b, *k)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, ',')
		b = appendUsageGroup(b, &s.Groups[i])
		b = append(b, '}')
	}
	b = append(b, `],"totals":{`...)
	b = appendUsageGroup(b, &s.Totals)
	c := &s.Cache
	b = append(b, `},"cache":{"hits":`...)
	b = appendInt(b, c.Hits)
	b = append(b, `,"misses":`...)
	b = appendInt(b, c.Misses)
	b = append(b, `,"hit_rate":`...)
	if c.Hits+c.Misses == 0 {
		b = append(b, '0')
	} else {
		b = strconv.AppendFloat(b, float64(c.Hits)/float64(c.Hits+c.Misses), 'f', 4, 64)
	}
	b = append(b, `,"estimated_savings_usd":`...)
	b = appendUSD(b, c.SavedNanos)
	return append(b, "}}"...)
}
