package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/history"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/statemachine"
)

// The queues' history (history.Recorder, one per node): the gateway
// samples the queue counters of the shards this node hosts every bucket,
// serves GET /api/v1/queues/history, the latency of GET /api/v1/queues and
// the latency gauges of /metrics. A shard this node does not host is asked
// of a node that does (peer.Client.GetShards, ?shards=), so each shard is
// counted once.

// historyMaxPoints bounds the points of one series in an answer (24 h at
// 10 s).
const historyMaxPoints = 8640

// historyLoop samples at each bucket's end until the server closes.
func (s *Server) historyLoop() {
	for {
		now := time.Now()
		t := time.NewTimer(now.Truncate(history.Step).Add(history.Step).Sub(now))
		select {
		case <-s.closed:
			t.Stop()
			return
		case <-t.C:
		}
		s.sampleHistory()
	}
}

// sampleHistory records the queues of every shard hosted here, now.
func (s *Server) sampleHistory() {
	h := s.cfg.History
	at := h.Now()
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if !s.hosted(sh) {
			continue
		}
		v, err := s.eng.Read(sh, statemachine.ListQueuesQuery{})
		infos, ok := v.([]statemachine.QueueInfo)
		if err != nil || !ok {
			continue
		}
		h.Sample(sh, at, history.SampleFrom(infos, s.eng.Head))
	}
}

// historyParams are a history request's queries.
type historyParams struct {
	names []string // as asked (the namespace's view)
	want  map[string]bool
	since time.Duration
	step  time.Duration
	until time.Time
}

func (s *Server) parseHistory(ctx *fasthttp.RequestCtx) (*historyParams, *apiError) {
	args := ctx.QueryArgs()
	p := &historyParams{since: time.Hour, step: history.Step, until: s.cfg.History.Now()}
	for _, v := range args.PeekMulti("queue") {
		name := string(v)
		if err := router.ValidateQueueName(name); err != nil {
			return nil, invalid("queue: %v", err)
		}
		if p.want == nil {
			p.want = map[string]bool{}
		}
		p.names = append(p.names, name)
		p.want[storedQueue(ctx, name)] = true
	}
	dur := func(key string, into *time.Duration) *apiError {
		if !args.Has(key) {
			return nil
		}
		d, err := time.ParseDuration(string(args.Peek(key)))
		if err != nil || d < 0 {
			return invalid("%s: %q is not a duration (e.g. 30m, 10s)", key, args.Peek(key))
		}
		*into = d
		return nil
	}
	if e := dur("since", &p.since); e != nil {
		return nil, e
	}
	if e := dur("step", &p.step); e != nil {
		return nil, e
	}
	if p.step < history.Step || p.step%history.Step != 0 {
		return nil, invalid("step must be a multiple of %s, got %s", history.Step, p.step)
	}
	if p.since > history.KeepDefault {
		return nil, invalid("since: the history holds %s, asked for %s", history.KeepDefault, p.since)
	}
	if p.since/p.step > historyMaxPoints {
		return nil, invalid("since/step is over %d points", historyMaxPoints)
	}
	if args.Has("until") {
		u, err := strconv.ParseInt(string(args.Peek("until")), 10, 64)
		if err != nil || u <= 0 {
			return nil, invalid("until: %q is not a Unix time in seconds", args.Peek("until"))
		}
		p.until = time.Unix(u, 0)
	}
	return p, nil
}

// rangeOf is the points of p: the last one holds until, each step long.
func (p *historyParams) rangeOf() history.Range {
	step := int64(p.step / history.Step)
	n := int64((p.since + p.step - 1) / p.step)
	to := history.BucketOf(p.until)
	return history.Range{From: to - n*step + 1, To: to, Step: step}
}

// query is p as another node is asked it.
func (p *historyParams) query() string {
	q := url.Values{}
	for _, n := range p.names {
		q.Add("queue", n)
	}
	q.Set("since", p.since.String())
	q.Set("step", p.step.String())
	q.Set("until", strconv.FormatInt(p.until.Unix(), 10))
	return "/api/v1/queues/history?" + q.Encode()
}

// keepFor selects the stored queue names the request may see (and asked
// for).
func keepFor(ctx *fasthttp.RequestCtx, want map[string]bool) func(string) bool {
	p := principal(ctx)
	return func(stored string) bool {
		return (want == nil || want[stored]) && inNamespace(ctx, stored) && p.AllowsQueue(stored)
	}
}

// GET /api/v1/queues/history?queue=…&since=1h&step=10s — the queues'
// rates and counts per step (one point per bucket of 10 s by default) and
// their latency now; every queue when none is named, and the total.
func (s *Server) handleQueueHistory(ctx *fasthttp.RequestCtx) {
	h := s.cfg.History
	if h == nil {
		writeError(ctx, codeUnavailable.err("this server keeps no history"))
		return
	}
	p, aerr := s.parseHistory(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if !requireQueues(ctx, `"queue"`, p.names...) {
		return
	}
	local, remote, part, ok := s.splitShards(ctx, s.hosted, "is not hosted on this node")
	if !ok {
		return
	}
	rg := p.rangeOf()
	keep := keepFor(ctx, p.want)
	qs, sampled := h.History(local, keep, rg)
	lat := h.Latency(local, keep)
	ans := corvo.QueueHistory{StepS: int(p.step / time.Second), T: make([]int64, rg.Points())}
	for i := range ans.T {
		ans.T[i] = (rg.From + int64(i)*rg.Step) * int64(history.Step/time.Second)
	}
	names := slices.Sorted(maps.Keys(qs))
	for name := range lat {
		if _, ok := qs[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		q := corvo.QueueHistorySeries{Name: router.DisplayQueue(name), HistorySeries: seriesOf(qs[name], rg.Points())}
		if l, ok := lat[name]; ok {
			q.Latency = latencyOf(l, h.Window())
		}
		ans.Queues = append(ans.Queues, q)
	}
	if part {
		ans.Sampled = sampled
		writeHistory(ctx, &ans)
		return
	}
	if len(remote) > 0 {
		deadline := time.Now().Add(s.cfg.RequestTimeout)
		bodies, perr := s.peer.GetShards(principal(ctx).Namespace, p.query(), remote, deadline)
		if perr != nil {
			writeError(ctx, engineError(perr))
			return
		}
		for _, b := range bodies {
			var part corvo.QueueHistory
			if err := json.Unmarshal(b, &part); err != nil || len(part.Sampled) != len(sampled) || len(part.T) != len(ans.T) {
				writeError(ctx, codeUnavailable.err("another node answered a malformed history"))
				return
			}
			for i, v := range part.Sampled {
				sampled[i] = sampled[i] || v
			}
			for _, q := range part.Queues {
				if keep(storedQueue(ctx, q.Name)) {
					ans.Queues = append(ans.Queues, q)
				}
			}
		}
		slices.SortFunc(ans.Queues, func(a, b corvo.QueueHistorySeries) int { return strings.Compare(a.Name, b.Name) })
	}
	ans.Total = totalOf(ans.Queues, sampled)
	writeHistory(ctx, &ans)
}

func writeHistory(ctx *fasthttp.RequestCtx, ans *corvo.QueueHistory) {
	if ans.Queues == nil {
		ans.Queues = []corvo.QueueHistorySeries{}
	}
	b, err := json.Marshal(ans)
	if err != nil {
		writeError(ctx, codeInternal.err(err.Error()))
		return
	}
	writeJSON(ctx, 200, b)
}

// seriesOf turns a queue's points into columns (n nulls when it has none).
func seriesOf(pts []history.Point, n int) corvo.HistorySeries {
	out := corvo.HistorySeries{
		EnqueuedPerS: make([]*float64, n), CompletedPerS: make([]*float64, n), FailedPerS: make([]*float64, n),
		Pending: make([]*int64, n), Active: make([]*int64, n), Waiting: make([]*int64, n), OldestPendingS: make([]*int64, n)}
	for i := range pts {
		p := &pts[i]
		out.EnqueuedPerS[i], out.CompletedPerS[i], out.FailedPerS[i] = p.Enqueued, p.Completed, p.Failed
		out.Pending[i], out.Active[i], out.Waiting[i], out.OldestPendingS[i] = p.Pending, p.Active, p.Waiting, p.OldestPendingS
	}
	return out
}

// totalOf adds the queues up per point: counts and rates add (the oldest
// wait is the longest); a point no shard was sampled in is null.
func totalOf(qs []corvo.QueueHistorySeries, sampled []bool) corvo.HistorySeries {
	n := len(sampled)
	pts := make([]history.Point, n)
	for i := range pts {
		if !sampled[i] {
			continue
		}
		zero, zerof := int64(0), 0.0
		pts[i] = history.Point{Pending: &zero, Active: &zero, Waiting: &zero, OldestPendingS: &zero}
		if len(qs) == 0 {
			pts[i].Enqueued, pts[i].Completed, pts[i].Failed = &zerof, &zerof, &zerof
		}
		for _, q := range qs {
			if i >= len(q.Pending) {
				continue
			}
			pts[i] = history.Sum(pts[i], history.Point{Enqueued: q.EnqueuedPerS[i], Completed: q.CompletedPerS[i], Failed: q.FailedPerS[i],
				Pending: q.Pending[i], Active: q.Active[i], Waiting: q.Waiting[i], OldestPendingS: q.OldestPendingS[i]})
		}
	}
	return seriesOf(pts, n)
}

func latencyOf(l history.Latency, window time.Duration) *corvo.QueueLatency {
	q := func(x *history.Quantiles) *corvo.Quantiles {
		if x == nil {
			return nil
		}
		return &corvo.Quantiles{P50: x.P50, P95: x.P95, P99: x.P99, Samples: x.N}
	}
	return &corvo.QueueLatency{WaitMs: q(l.Wait), RunMs: q(l.Run), WindowS: int(window / time.Second)}
}

// queueLatencies is the latency of every queue the request may see, by
// stored name: this node's shards from its recorder, the others asked of
// nodes hosting them (a failure leaves their queues without one).
func (s *Server) queueLatencies(ctx *fasthttp.RequestCtx) map[string]*corvo.QueueLatency {
	h := s.cfg.History
	out := map[string]*corvo.QueueLatency{}
	if h == nil {
		return out
	}
	var local, remote []int
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if s.hosted(sh) {
			local = append(local, sh)
		} else {
			remote = append(remote, sh)
		}
	}
	for name, l := range h.Latency(local, nil) {
		out[name] = latencyOf(l, h.Window())
	}
	if len(remote) == 0 || peer.Forwarded(ctx) {
		return out
	}
	bodies, perr := s.peer.GetShards(principal(ctx).Namespace, "/api/v1/queues/history?since=0s", remote, time.Now().Add(s.cfg.RequestTimeout))
	if perr != nil {
		s.log.Warn().Str("error", perr.Msg).Msg("the latency of queues hosted elsewhere is unknown")
	}
	for _, b := range bodies {
		var part corvo.QueueHistory
		if json.Unmarshal(b, &part) != nil {
			continue
		}
		for _, q := range part.Queues {
			if q.Latency != nil {
				out[storedQueue(ctx, q.Name)] = q.Latency
			}
		}
	}
	return out
}

// appendLatency renders a queue's latency (null when none).
func appendLatency(b []byte, l *corvo.QueueLatency) []byte {
	if l == nil {
		return append(b, "null"...)
	}
	q := func(b []byte, x *corvo.Quantiles) []byte {
		if x == nil {
			return append(b, "null"...)
		}
		b = append(b, `{"p50":`...)
		b = strconv.AppendFloat(b, x.P50, 'f', -1, 64)
		b = append(b, `,"p95":`...)
		b = strconv.AppendFloat(b, x.P95, 'f', -1, 64)
		b = append(b, `,"p99":`...)
		b = strconv.AppendFloat(b, x.P99, 'f', -1, 64)
		b = append(b, `,"samples":`...)
		b = strconv.AppendUint(b, x.Samples, 10)
		return append(b, '}')
	}
	b = append(b, `{"wait_ms":`...)
	b = q(b, l.WaitMs)
	b = append(b, `,"run_ms":`...)
	b = q(b, l.RunMs)
	b = append(b, `,"window_s":`...)
	b = strconv.AppendInt(b, int64(l.WindowS), 10)
	return append(b, '}')
}

// writeLatencyMetrics writes the wait and run quantiles of the queues of
// the shards this node leads (each queue on exactly one node's /metrics),
// in seconds: corvo_queue_wait_seconds{queue,quantile} and
// corvo_queue_run_seconds; the same figures as GET /api/v1/queues.
func (s *Server) writeLatencyMetrics(w io.Writer) {
	h := s.cfg.History
	if h == nil {
		return
	}
	var led []int
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if s.eng.IsLeader(sh) {
			led = append(led, sh)
		}
	}
	lat := h.Latency(led, nil)
	names := slices.Sorted(maps.Keys(lat))
	for _, kind := range []string{"wait", "run"} {
		name := "corvo_queue_" + kind + "_seconds"
		wrote := false
		for _, q := range names {
			x := lat[q].Wait
			if kind == "run" {
				x = lat[q].Run
			}
			if x == nil {
				continue
			}
			if !wrote {
				metrics.WriteMetadataIfNeeded(w, name, "gauge")
				wrote = true
			}
			l := `queue="` + q + `"`
			if ns, dq := router.SplitQueue(q); ns != router.DefaultNamespace {
				l = `namespace="` + ns + `",queue="` + dq + `"`
			}
			for _, v := range []struct {
				q  string
				ms float64
			}{{"0.5", x.P50}, {"0.95", x.P95}, {"0.99", x.P99}} {
				fmt.Fprintf(w, "%s{%s,quantile=%q} %g\n", name, l, v.q, v.ms/1e3)
			}
		}
	}
}

// splitShards reads the request's ?shards= (a part of another node's
// fan-out) and splits the shards it covers, or every shard, into those
// have says this node can answer and the rest; part says the request is
// one. A part naming a shard this
// node cannot answer is answered 503 ("shard N <missing>") here, and ok
// is false.
func (s *Server) splitShards(ctx *fasthttp.RequestCtx, have func(int) bool, missing string) (local, remote []int, part, ok bool) {
	only, aerr := s.shardsParam(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return nil, nil, false, false
	}
	for sh := 0; sh < s.eng.Shards(); sh++ {
		switch {
		case only != nil && !slices.Contains(only, sh):
		case have(sh):
			local = append(local, sh)
		default:
			remote = append(remote, sh)
		}
	}
	if only != nil && len(remote) > 0 {
		writeError(ctx, codeUnavailable.err("shard "+itoa(remote[0])+" "+missing))
		return nil, nil, false, false
	}
	return local, remote, only != nil, true
}

// sinceParam reads ?since= (Unix ns: the asking node's lower bound, sent
// with a part); 0 when absent. A bad value is answered 400 and ok is false.
func sinceParam(ctx *fasthttp.RequestCtx) (since int64, ok bool) {
	v := ctx.QueryArgs().Peek("since")
	if len(v) == 0 {
		return 0, true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		writeError(ctx, invalid("since: %q is not a Unix time in ns", v))
		return 0, false
	}
	return n, true
}
