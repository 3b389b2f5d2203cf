package gateway

import (
	"sort"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Providers (issue 20): /api/v1/providers and a queue's link to one.
//
// Every shard holds every provider (proposeEveryShard); a link goes to
// the queue's shard, which answers its own membership of the provider's
// pool when the link changed it, and the gateway proposes that to every
// shard (ProviderMemberOp), so each shard knows which shards share the
// pool and takes its share of each limit (statemachine/provider.go): the
// equal split, or what the rebalancer handed it (providershare.go).

// providerRequest is PUT or POST /api/v1/providers.
type providerRequest struct {
	Name           string `json:"name"`
	RPMLimit       *int64 `json:"rpm_limit"`
	InputTPMLimit  *int64 `json:"input_tpm_limit"`
	OutputTPMLimit *int64 `json:"output_tpm_limit"`
}

// providerNamespace is the stored namespace of the caller's providers.
func providerNamespace(ctx *fasthttp.RequestCtx) string {
	if ns := principal(ctx).Namespace; ns != router.DefaultNamespace {
		return ns
	}
	return ""
}

func providerLimit(field string, v *int64) (int64, *apiError) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 || *v > statemachine.MaxProviderLimit {
		return 0, invalid("field %q must be 0–%d (0 or null: no limit)", field, int64(statemachine.MaxProviderLimit))
	}
	return *v, nil
}

// PUT|POST /api/v1/providers — create a provider or change its limits.
func (s *Server) handleSetProvider(ctx *fasthttp.RequestCtx) {
	if principal(ctx).Scoped() {
		writeError(ctx, codeForbidden.err("a key limited to some queues cannot manage providers"))
		return
	}
	var req providerRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	p := statemachine.Provider{Namespace: providerNamespace(ctx), Name: req.Name}
	var aerr *apiError
	if p.RPM, aerr = providerLimit("rpm_limit", req.RPMLimit); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if p.InputTPM, aerr = providerLimit("input_tpm_limit", req.InputTPMLimit); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if p.OutputTPM, aerr = providerLimit("output_tpm_limit", req.OutputTPMLimit); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if err := p.Check(); err != nil {
		writeError(ctx, invalid("%v", err))
		return
	}
	if _, aerr := s.proposeEveryShard(&statemachine.SetProviderOp{Provider: p}); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"name":`), appendString(nil, p.Name)...)
	b = appendProviderLimits(b, &p)
	writeJSON(ctx, 200, append(b, '}'))
}

// DELETE /api/v1/providers/{name} — the provider goes from every shard,
// and the queues linked to it are unlinked.
func (s *Server) handleDeleteProvider(ctx *fasthttp.RequestCtx) {
	if principal(ctx).Scoped() {
		writeError(ctx, codeForbidden.err("a key limited to some queues cannot manage providers"))
		return
	}
	name, _ := ctx.UserValue("name").(string)
	if err := statemachine.CheckProviderName(name); err != nil {
		writeError(ctx, invalid("%v", err))
		return
	}
	found, aerr := s.proposeEveryShard(&statemachine.SetProviderOp{Provider: statemachine.Provider{Namespace: providerNamespace(ctx), Name: name}, Delete: true})
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if !found {
		writeError(ctx, codeNotFound.err("no provider "+name))
		return
	}
	writeJSON(ctx, 200, append(append([]byte(`{"deleted":`), appendString(nil, name)...), '}'))
}

// proposeEveryShard proposes op to every shard at once; found says
// whether a shard answered OK (a delete no shard could apply is not
// found). An error names the first shard that failed; the ops it is used
// with are idempotent, so the caller may send them again.
func (s *Server) proposeEveryShard(op statemachine.Op) (found bool, aerr *apiError) {
	n := s.eng.Shards()
	errs := make([]*apiError, n)
	rs := make([]statemachine.Result, n)
	var wg sync.WaitGroup
	for sh := 0; sh < n; sh++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, e := s.propose(sh, op)
			if e == nil {
				rs[sh] = r[0]
			}
			errs[sh] = e
		}()
	}
	wg.Wait()
	for sh := 0; sh < n; sh++ {
		if errs[sh] != nil {
			return false, errs[sh]
		}
		switch rs[sh].Status {
		case statemachine.StatusOK:
			found = true
		case statemachine.StatusNotFound:
		default:
			return false, resultError(&rs[sh])
		}
	}
	return found, nil
}

type linkRequest struct {
	Provider *string `json:"provider"`
}

// POST /api/v1/queues/{name}/provider {"provider": "anthropic"} — link the
// queue to a provider of its namespace (null or "": unlink); DELETE
// unlinks it.
func (s *Server) handleQueueProvider(ctx *fasthttp.RequestCtx) {
	name, ok := s.queueParam(ctx)
	if !ok {
		return
	}
	op := &statemachine.LinkProviderOp{Queue: name}
	if string(ctx.Method()) == fasthttp.MethodPost {
		var req linkRequest
		if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
			writeError(ctx, err)
			return
		}
		if req.Provider != nil && *req.Provider != "" {
			if err := statemachine.CheckProviderName(*req.Provider); err != nil {
				writeError(ctx, invalid("field \"provider\": %v", err))
				return
			}
			op.Provider = *req.Provider
		}
	}
	if aerr := s.linkProvider(op); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"queue":`), appendQueueName(nil, name)...)
	b = append(b, `,"provider":`...)
	if op.Provider == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, op.Provider)
	}
	writeJSON(ctx, 200, append(b, '}'))
}

// linkProvider proposes a link (or an unlink) to the queue's shard, then
// the shard's membership of the pools the link changed to every shard,
// so that each takes its share. Linking again what is linked proposes the
// membership again: a retry completes a link whose propagation failed.
func (s *Server) linkProvider(op *statemachine.LinkProviderOp) *apiError {
	rs, aerr := s.propose(s.rt.ShardForQueue(op.Queue), op)
	if aerr == nil {
		aerr = resultError(&rs[0])
	}
	if aerr != nil {
		return aerr
	}
	ns, _ := router.SplitQueue(op.Queue)
	if ns == router.DefaultNamespace {
		ns = ""
	}
	for _, m := range rs[0].Members {
		if _, aerr := s.proposeEveryShard(&statemachine.ProviderMemberOp{Namespace: ns, Member: m}); aerr != nil {
			return aerr
		}
	}
	return nil
}

// GET /api/v1/providers — the namespace's providers: limits, linked
// queues, and what each shard sharing the pool may use and has used in
// the last minute.
func (s *Server) handleListProviders(ctx *fasthttp.RequestCtx) {
	now := s.clock.Now().UnixNano()
	parts, err := s.readEach(func(int) any { return statemachine.ProvidersQuery{Now: now} })
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	ns := providerNamespace(ctx)
	type view struct {
		p      statemachine.Provider
		queues []string
		shares []statemachine.ProviderInfo
		total  statemachine.ProviderInfo
	}
	byName := map[string]*view{}
	for _, part := range parts {
		list, _ := part.([]statemachine.ProviderInfo)
		for i := range list {
			pi := &list[i]
			if pi.Namespace != ns {
				continue
			}
			v := byName[pi.Name]
			if v == nil {
				v = &view{p: pi.Provider}
				byName[pi.Name] = v
			}
			for _, q := range pi.Queues {
				if principal(ctx).AllowsQueue(q) {
					v.queues = append(v.queues, q)
				}
			}
			v.total.Requests += pi.Requests
			v.total.InputTokens += pi.InputTokens
			v.total.OutputTokens += pi.OutputTokens
			for _, m := range pi.Members {
				if m.Shard == pi.Shard && m.In {
					v.shares = append(v.shares, *pi)
				}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	b := []byte(`{"providers":[`)
	for i, n := range names {
		v := byName[n]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, n)
		b = appendProviderLimits(b, &v.p)
		sort.Strings(v.queues)
		b = append(b, `,"queues":[`...)
		for k, q := range v.queues {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendQueueName(b, q)
		}
		b = append(b, `],"window":`...)
		b = appendProviderWindow(b, &v.total)
		b = append(b, `,"shares":[`...)
		for k := range v.shares {
			sh := &v.shares[k]
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"shard":`...)
			b = appendInt(b, int64(sh.Shard))
			b = append(b, `,"rpm":`...)
			b = appendShare(b, sh.Share.RPM)
			b = append(b, `,"input_tpm":`...)
			b = appendShare(b, sh.Share.InputTPM)
			b = append(b, `,"output_tpm":`...)
			b = appendShare(b, sh.Share.OutputTPM)
			b = append(b, `,"pending":`...)
			b = appendInt(b, sh.Pending)
			b = append(b, `,"window":`...)
			b = appendProviderWindow(b, sh)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

func appendProviderLimits(b []byte, p *statemachine.Provider) []byte {
	lim := func(b []byte, v int64) []byte {
		if v == 0 {
			return append(b, "null"...)
		}
		return appendInt(b, v)
	}
	b = append(b, `,"rpm_limit":`...)
	b = lim(b, p.RPM)
	b = append(b, `,"input_tpm_limit":`...)
	b = lim(b, p.InputTPM)
	b = append(b, `,"output_tpm_limit":`...)
	return lim(b, p.OutputTPM)
}

func appendShare(b []byte, v int64) []byte {
	if v < 0 {
		return append(b, "null"...)
	}
	return appendInt(b, v)
}

func appendProviderWindow(b []byte, w *statemachine.ProviderInfo) []byte {
	b = append(b, `{"requests":`...)
	b = appendInt(b, w.Requests)
	b = append(b, `,"input_tokens":`...)
	b = appendInt(b, w.InputTokens)
	b = append(b, `,"output_tokens":`...)
	b = appendInt(b, w.OutputTokens)
	return append(b, '}')
}
