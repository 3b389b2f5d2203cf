package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/backup"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/statemachine"
)

// Backup and restore (the backup package has the format).
//
// A backup is per-shard consistent: each shard's queue settings, schedules
// and jobs (with their usage records and scores), result-cache entries and
// daily usage totals come from one Pebble snapshot of one replica (this
// node's when it hosts the shard, else streamed from a node that does),
// shard after shard; the batches come last, from a second snapshot of each
// shard, so a batch's counts may be newer than its jobs' states. The
// budgets come first: every shard holds every budget and what its own jobs
// spent under it per UTC day, so each shard's are read (a snapshot each)
// and a budget is written once, its spend summed over the shards. The
// providers follow, read the way GET /api/v1/providers reads them (every
// shard holds every provider; each is written once); a queue's link to
// one is in its settings. Nothing else is collected: records go to the response as they are read (the
// only other set kept is the IDs of the batches a namespace's jobs name).

// restoreChunk is how many imports one entry carries.
const restoreChunk = 256

// GET /api/v1/backup?namespace=<ns>|all&keys=metadata|full
func (s *Server) handleBackup(ctx *fasthttp.RequestCtx) {
	ns := string(ctx.QueryArgs().Peek("namespace"))
	if ns == "" {
		ns = backup.AllNamespaces
	}
	keysMode := string(ctx.QueryArgs().Peek("keys"))
	if keysMode == "" {
		keysMode = backup.KeysMetadata
	}
	if keysMode != backup.KeysMetadata && keysMode != backup.KeysFull {
		writeError(ctx, invalid("query parameter \"keys\" must be \"metadata\" or \"full\""))
		return
	}
	var st *auth.State
	if s.cfg.Keys != nil {
		st = s.cfg.Keys.Keys()
	}
	if ns != backup.AllNamespaces {
		if err := router.ValidateNamespace(ns); err != nil {
			writeError(ctx, invalid("query parameter \"namespace\": %v", err))
			return
		}
		if ns != router.DefaultNamespace && (st == nil || !st.NamespaceExists(ns)) {
			writeError(ctx, codeNotFound.err("no namespace "+ns))
			return
		}
	}
	auditNote(ctx, "namespace "+ns+", keys "+keysMode)
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.Header.Set("Content-Disposition", `attachment; filename="corvo-backup.ndjson"`)
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		w := backup.NewWriter(bw, backup.Header{CreatedAt: time.Now().UnixNano(), Shards: s.eng.Shards(), Namespace: ns, Keys: keysMode})
		if err := s.writeBackup(w, st, ns, keysMode); err != nil {
			// The answer is under way: leaving the trailer out is how the
			// file says it is incomplete (a restore refuses it).
			s.log.Error().Err(err).Str("namespace", ns).Msg("backup stopped")
			_ = w.Flush()
			return
		}
		if err := w.Close(); err != nil {
			s.log.Warn().Err(err).Msg("backup: writing the trailer")
		}
	})
}

func (s *Server) writeBackup(w *backup.Writer, st *auth.State, ns, keysMode string) error {
	all := ns == backup.AllNamespaces
	if st != nil {
		for _, n := range st.Namespaces() {
			if all || n.Name == ns {
				if err := w.Write(backup.Record{Kind: backup.KindNamespace, Namespace: &n}); err != nil {
					return err
				}
			}
		}
		var roles []string
		var keys []backup.Record
		for _, k := range st.Keys() {
			if !all && k.Namespace != ns {
				continue
			}
			bk := backup.Key{ID: k.ID, Name: k.Name, Namespace: k.Namespace, Role: k.Role, Queues: k.Queues,
				Enabled: k.Enabled, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt,
				CreatedBy: k.CreatedBy, RateRead: k.RateRead, RateWrite: k.RateWrite}
			if keysMode == backup.KeysFull {
				bk.Hash = k.Hash
			}
			keys = append(keys, backup.Record{Kind: backup.KindKey, Key: &bk})
			roles = append(roles, k.Role)
		}
		for _, r := range st.Roles() {
			if all || slices.Contains(roles, r.Name) {
				if err := w.Write(backup.Record{Kind: backup.KindRole, Role: &r}); err != nil {
					return err
				}
			}
		}
		for _, k := range keys {
			if err := w.Write(k); err != nil {
				return err
			}
		}
	}
	if err := s.writeBudgets(w, ns); err != nil {
		return err
	}
	if err := s.writeProviders(w, ns); err != nil {
		return err
	}
	named := map[string]bool{} // batches the namespace's jobs belong to
	emit := func(r backup.Record) error {
		if r.Job != nil && r.Job.BatchID != "" && !all {
			named[r.Job.BatchID] = true
		}
		return w.Write(r)
	}
	for sh := 0; sh < s.eng.Shards(); sh++ {
		if err := s.exportShard(sh, ns, peer.PartRecords, emit); err != nil {
			return fmt.Errorf("shard %d: %w", sh, err)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	for sh := 0; sh < s.eng.Shards(); sh++ {
		err := s.exportShard(sh, ns, peer.PartBatches, func(r backup.Record) error {
			if !all && !named[r.Batch.ID] && (r.Batch.CallbackQueue == "" || !router.QueueInNamespace(r.Batch.CallbackQueue, ns)) {
				return nil
			}
			return w.Write(r)
		})
		if err != nil {
			return fmt.Errorf("shard %d batches: %w", sh, err)
		}
	}
	return nil
}

// writeBudgets writes the namespace's budgets (every namespace's for
// "all"), each once, with its spend per UTC day summed over the shards.
func (s *Server) writeBudgets(w *backup.Writer, ns string) error {
	var order []*backup.Budget
	byID := map[string]*backup.Budget{}
	for sh := 0; sh < s.eng.Shards(); sh++ {
		err := s.exportShard(sh, ns, peer.PartBudgets, func(r backup.Record) error {
			if r.Budget == nil {
				// A node of an older build ignores budgets=1 and sends
				// the shard's other records.
				return fmt.Errorf("the node hosting it answered the budgets' part with a %s record (an older build: back up once every node runs this one)", r.Kind)
			}
			if b, ok := byID[r.Budget.ID()]; ok {
				b.SumSpend(r.Budget.Spend)
				return nil
			}
			b := r.Budget
			b.SumSpend(nil) // in day order
			byID[b.ID()] = b
			order = append(order, b)
			return nil
		})
		if err != nil {
			return fmt.Errorf("shard %d budgets: %w", sh, err)
		}
	}
	for _, b := range order {
		if err := w.Write(backup.Record{Kind: backup.KindBudget, Budget: b}); err != nil {
			return err
		}
	}
	return nil
}

// writeProviders writes the namespace's providers (every namespace's for
// "all"), each once, in namespace then name order. Each shard's are read,
// so that one a shard missed (its creation having failed there) is not
// left out.
func (s *Server) writeProviders(w *backup.Writer, ns string) error {
	now := s.clock.Now().UnixNano()
	parts, err := s.readEach(func(int) any { return statemachine.ProvidersQuery{Now: now} })
	if err != nil {
		return fmt.Errorf("providers: %w", err)
	}
	stored := ns
	if ns == router.DefaultNamespace {
		stored = ""
	}
	byID := map[string]*statemachine.Provider{}
	for _, part := range parts {
		list, _ := part.([]statemachine.ProviderInfo)
		for i := range list {
			p := &list[i].Provider
			if _, seen := byID[p.ID()]; !seen && (ns == backup.AllNamespaces || p.Namespace == stored) {
				byID[p.ID()] = p
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		if err := w.Write(backup.Record{Kind: backup.KindProvider, Provider: backup.FromProvider(byID[id])}); err != nil {
			return err
		}
	}
	return nil
}

// exportShard reads one shard's part: from this node's replica, or
// streamed from a node hosting it.
func (s *Server) exportShard(sh int, ns string, part peer.ExportPart, emit func(backup.Record) error) error {
	if s.hosted(sh) {
		return peer.ExportShard(s.eng.Read, sh, ns, part, emit)
	}
	return s.peer.Export(context.Background(), sh, ns, part, emit)
}

// restoreReport is POST /api/v1/restore's answer (corvo.RestoreReport).
type restoreReport corvo.RestoreReport

func (r *restoreReport) fail(msg string) {
	r.Failed++
	if len(r.Errors) < 20 {
		r.Errors = append(r.Errors, msg)
	}
}

// restoreItem is what a proposed restore op counts as in the report:
// its record's kind, or, quiet, nothing unless it fails (the second op of
// a paused queue, a budget's copy on the shards that do not hold its
// spend).
type restoreItem struct {
	kind  string
	quiet bool
}

// POST /api/v1/restore?into=<ns>
//
// The body is a backup file. It is read twice: once to check it whole
// (header, every record, the trailer's counts) and plan the new IDs —
// nothing changes when that fails — then to restore: namespaces, roles
// and keys through the meta group (missing ones only), budgets on every
// shard (the spend on one), providers on every shard as PUT
// /api/v1/providers makes them (missing ones only), queue settings, then
// jobs, schedules, cache entries, daily usage totals and batches by
// ImportOp on the shards they route to; then the queues' provider links,
// as POST /api/v1/queues/{name}/provider makes them (so the restored
// cluster's shards work out their shares), and last the held jobs'
// dependency watches.
func (s *Server) handleRestore(ctx *fasthttp.RequestCtx) {
	into := string(ctx.QueryArgs().Peek("into"))
	if into != "" {
		if err := router.ValidateNamespace(into); err != nil {
			writeError(ctx, invalid("query parameter \"into\": %v", err))
			return
		}
	}
	body := ctx.PostBody()
	plan := backup.NewPlan(s.eng.Shards(), into)
	hdr, err := checkBackup(body, plan)
	if err != nil {
		writeError(ctx, invalid("%v", err))
		return
	}
	if into != "" && hdr.Namespace == backup.AllNamespaces {
		writeError(ctx, invalid("a backup of every namespace cannot be restored into one (\"into\"): back up one namespace"))
		return
	}
	var keys Keys
	if s.cfg.Keys != nil {
		keys = s.cfg.Keys
	}
	rep := restoreReport{Restored: map[string]int{}, Exists: map[string]int{}, Expired: map[string]int{}, Remapped: plan.Remapped(), Shards: hdr.Shards}
	r, _ := backup.NewReader(bytes.NewReader(body))
	pending := make([][]statemachine.Op, s.eng.Shards())
	kinds := make([][]restoreItem, s.eng.Shards())
	type watch struct{ dep, dependent string }
	var watches []watch
	flush := func(sh int) {
		if len(pending[sh]) == 0 {
			return
		}
		rs, aerr := s.proposeCtx(context.Background(), sh, pending[sh]...)
		for i := range pending[sh] {
			kind := kinds[sh][i].kind
			switch {
			case aerr != nil:
				rep.fail(kind + ": " + aerr.msg)
			case kinds[sh][i].quiet && (rs[i].Status == statemachine.StatusOK || rs[i].Existing):
			case rs[i].Status == statemachine.StatusOK && kind == backup.KindCache && rs[i].Count == 0:
				rep.Expired[kind]++
			case rs[i].Status == statemachine.StatusOK:
				rep.Restored[kind]++
				if op, ok := pending[sh][i].(*statemachine.ImportOp); ok && op.Job != nil && rs[i].State == statemachine.StateHeld {
					j := op.Job
					for _, d := range j.View.Job.DependsOn {
						if !slices.Contains(j.Resolved, d.ID) {
							watches = append(watches, watch{dep: d.ID, dependent: j.View.Job.ID})
						}
					}
				}
			case rs[i].Existing:
				rep.Exists[kind]++
			default:
				rep.fail(kind + ": " + rs[i].Message)
			}
		}
		pending[sh], kinds[sh] = pending[sh][:0], kinds[sh][:0]
	}
	add := func(sh int, kind string, quiet bool, op statemachine.Op) {
		pending[sh] = append(pending[sh], op)
		kinds[sh] = append(kinds[sh], restoreItem{kind: kind, quiet: quiet})
		if len(pending[sh]) >= restoreChunk {
			flush(sh)
		}
	}
	budgets := false
	var links []*statemachine.LinkProviderOp
	var held map[string]int // provider ID → how many shards hold it
	for {
		rec, err := r.Next()
		if err != nil {
			break // checked whole above
		}
		if err := plan.Rewrite(&rec); err != nil {
			rep.fail(err.Error())
			continue
		}
		switch rec.Kind {
		case backup.KindNamespace, backup.KindRole, backup.KindKey:
			s.restoreMeta(keys, &rec, &rep)
		case backup.KindQueue:
			q := rec.Queue
			ops := []statemachine.Op{&statemachine.SetLimitsOp{Queue: q.Name, SetConcurrency: true, MaxConcurrency: q.MaxConcurrency,
				SetThrottle: true, RateLimit: q.RateLimit, RateWindowMs: q.RateWindowMs}}
			if q.Paused {
				ops = append(ops, &statemachine.PauseQueueOp{Queue: q.Name})
			}
			if q.Provider != "" {
				links = append(links, &statemachine.LinkProviderOp{Queue: q.Name, Provider: q.Provider})
			}
			sh := plan.Shard(&rec)
			add(sh, rec.Kind, false, ops[0])
			if len(ops) > 1 {
				add(sh, rec.Kind, true, ops[1]) // the same queue: counted once
			}
		case backup.KindJob:
			j, _ := backup.ToJob(rec.Job)
			add(plan.Shard(&rec), rec.Kind, false, &statemachine.ImportOp{Job: j})
		case backup.KindSchedule:
			sc, _ := backup.ToSchedule(rec.Schedule)
			add(plan.Shard(&rec), rec.Kind, false, &statemachine.ImportOp{Schedule: sc})
		case backup.KindBatch:
			add(plan.Shard(&rec), rec.Kind, false, &statemachine.ImportOp{Batch: backup.ToBatch(rec.Batch)})
		case backup.KindBudget:
			// Every shard holds every budget; the spend, summed over
			// the backed-up cluster's shards, goes to one (the count
			// follows that one's answer).
			b, _ := backup.ToBudget(rec.Budget)
			spendAt := plan.Shard(&rec)
			for sh := range pending {
				if sh == spendAt {
					add(sh, rec.Kind, false, &statemachine.ImportOp{Budget: b})
				} else {
					add(sh, rec.Kind, true, &statemachine.ImportOp{Budget: &statemachine.BudgetExport{Budget: b.Budget}})
				}
			}
			budgets = true
		case backup.KindCache:
			c, _ := backup.ToCache(rec.Cache)
			add(plan.Shard(&rec), rec.Kind, false, &statemachine.ImportOp{Cache: c})
		case backup.KindUsageDay:
			u, _ := backup.ToUsageDay(rec.UsageDay)
			add(plan.Shard(&rec), rec.Kind, false, &statemachine.ImportOp{UsageDay: u})
		case backup.KindProvider:
			p, _ := backup.ToProvider(rec.Provider)
			if held == nil {
				var err error
				if held, err = s.heldProviders(); err != nil {
					rep.fail("provider " + p.Name + ": " + err.Error())
					continue
				}
			}
			s.restoreProvider(p, held, &rep)
		}
	}
	for sh := range pending {
		flush(sh)
	}
	// The links, once the providers exist on every shard: each to its
	// queue's shard, then that shard's membership to every shard.
	for _, l := range links {
		if aerr := s.linkProvider(l); aerr != nil {
			rep.fail("queue " + router.DisplayQueue(l.Queue) + ": link to provider " + l.Provider + ": " + aerr.msg)
		}
	}
	if budgets {
		s.budgetGen.Add(1) // this node's budget view reads the restored ones
	}
	// Held jobs wait on their dependencies again, now that every job is
	// where it belongs (a dependency restored after its dependent would
	// otherwise have been reported missing).
	rt := router.New(s.eng.Shards())
	for _, w := range watches {
		sh, err := rt.ShardForJob(w.dep)
		dsh, _ := rt.ShardForJob(w.dependent)
		if err != nil {
			rep.fail("dependency " + w.dep + ": " + err.Error())
			continue
		}
		if _, aerr := s.proposeCtx(context.Background(), sh, &statemachine.DepWatchOp{Dep: w.dep, Dependent: w.dependent, DependentShard: uint32(dsh)}); aerr != nil {
			rep.fail("dependency " + w.dep + " of " + w.dependent + ": " + aerr.msg)
		}
	}
	auditNote(ctx, fmt.Sprintf("into %q: %d restored, %d existed, %d failed", into, sum(rep.Restored), sum(rep.Exists), rep.Failed))
	out, _ := json.Marshal(rep)
	status := 200
	if rep.Failed > 0 {
		status = 207
	}
	writeJSON(ctx, status, out)
}

// heldProviders counts, for each provider, the shards that hold it.
func (s *Server) heldProviders() (map[string]int, error) {
	now := s.clock.Now().UnixNano()
	parts, err := s.readEach(func(int) any { return statemachine.ProvidersQuery{Now: now} })
	if err != nil {
		return nil, err
	}
	held := map[string]int{}
	for _, part := range parts {
		list, _ := part.([]statemachine.ProviderInfo)
		for i := range list {
			held[list[i].ID()]++
		}
	}
	return held, nil
}

// restoreProvider creates a provider on every shard, as PUT
// /api/v1/providers does; one every shard holds already is left as it
// is (its limits may have been changed since the backup).
func (s *Server) restoreProvider(p *statemachine.Provider, held map[string]int, rep *restoreReport) {
	if held[p.ID()] >= s.eng.Shards() {
		rep.Exists[backup.KindProvider]++
		return
	}
	if _, aerr := s.proposeEveryShard(&statemachine.SetProviderOp{Provider: *p}); aerr != nil {
		rep.fail("provider " + p.Name + ": " + aerr.msg)
		return
	}
	held[p.ID()] = s.eng.Shards()
	rep.Restored[backup.KindProvider]++
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// checkBackup reads a backup whole and shows the plan each job and batch:
// any error (a truncated file included) refuses the restore before it
// changes anything.
func checkBackup(body []byte, plan *backup.Plan) (backup.Header, error) {
	r, err := backup.NewReader(bytes.NewReader(body))
	if err != nil {
		return backup.Header{}, err
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Header, nil
		}
		if err != nil {
			return r.Header, err
		}
		switch {
		case rec.Job != nil:
			if _, err := backup.ToJob(rec.Job); err != nil {
				return r.Header, err
			}
		case rec.Schedule != nil:
			if _, err := backup.ToSchedule(rec.Schedule); err != nil {
				return r.Header, err
			}
			if err := router.ValidateStoredQueue(rec.Schedule.Queue); err != nil {
				return r.Header, fmt.Errorf("schedule %s: %v", rec.Schedule.ID, err)
			}
		case rec.Queue != nil:
			if err := router.ValidateStoredQueue(rec.Queue.Name); err != nil {
				return r.Header, err
			}
			if p := rec.Queue.Provider; p != "" {
				if err := statemachine.CheckProviderName(p); err != nil {
					return r.Header, fmt.Errorf("queue %s: %v", rec.Queue.Name, err)
				}
			}
		case rec.Provider != nil:
			if _, err := backup.ToProvider(rec.Provider); err != nil {
				return r.Header, err
			}
		case rec.Budget != nil:
			if _, err := backup.ToBudget(rec.Budget); err != nil {
				return r.Header, err
			}
		case rec.Cache != nil:
			if _, err := backup.ToCache(rec.Cache); err != nil {
				return r.Header, err
			}
		case rec.UsageDay != nil:
			if _, err := backup.ToUsageDay(rec.UsageDay); err != nil {
				return r.Header, err
			}
		case rec.Namespace != nil:
			if err := router.ValidateNamespace(rec.Namespace.Name); err != nil {
				return r.Header, err
			}
		case rec.Key != nil:
			if !auth.ValidKeyID(rec.Key.ID) {
				return r.Header, fmt.Errorf("key id %q is not a key id", rec.Key.ID)
			}
		case rec.Role != nil:
			for _, p := range rec.Role.Permissions {
				if !auth.ValidPermission(p) {
					return r.Header, fmt.Errorf("role %s: unknown permission %q", rec.Role.Name, p)
				}
			}
		}
		if err := plan.See(&rec); err != nil {
			return r.Header, err
		}
	}
}

// restoreMeta creates a namespace, role or key the target lacks; an
// existing one is left as it is.
func (s *Server) restoreMeta(keys Keys, rec *backup.Record, rep *restoreReport) {
	if keys == nil {
		rep.fail(rec.Kind + ": this server has no key table")
		return
	}
	st := keys.Keys()
	var c auth.Cmd
	var existed bool
	switch {
	case rec.Namespace != nil:
		existed = rec.Namespace.Name == router.DefaultNamespace || st.NamespaceExists(rec.Namespace.Name)
		c = auth.Cmd{Op: "ns.put", Namespace: rec.Namespace}
	case rec.Role != nil:
		existed = st.RoleExists(rec.Role.Name)
		c = auth.Cmd{Op: "role.put", Role: rec.Role}
	case rec.Key != nil:
		_, existed = st.Key(rec.Key.ID)
		existed = existed || st.Revoked(rec.Key.ID)
		k := rec.Key
		c = auth.Cmd{Op: "put", Key: &auth.Key{ID: k.ID, Hash: k.Hash, Name: k.Name, Namespace: k.Namespace, Role: k.Role,
			Queues: k.Queues, Enabled: k.Enabled, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt,
			CreatedBy: k.CreatedBy, RateRead: k.RateRead, RateWrite: k.RateWrite}}
	}
	if existed {
		rep.Exists[rec.Kind]++
		return
	}
	pctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	changed, err := keys.ProposeKeys(pctx, c)
	switch {
	case err != nil:
		rep.fail(rec.Kind + ": " + err.Error())
	case !changed:
		rep.Exists[rec.Kind]++
	default:
		rep.Restored[rec.Kind]++
	}
}

// restoreBodyLimit gives POST /api/v1/restore its own body limit
// (Config.MaxRestoreBytes) and half an hour to arrive; every other request
// keeps the server's.
func restoreBodyLimit(limit int) func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	const path = "/api/v1/restore"
	return func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		uri := h.RequestURI()
		if h.IsPost() && bytes.HasPrefix(uri, []byte(path)) && (len(uri) == len(path) || uri[len(path)] == '?') {
			return fasthttp.RequestConfig{MaxRequestBodySize: limit, ReadTimeout: 30 * time.Minute}
		}
		return fasthttp.RequestConfig{}
	}
}
