package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/backup"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// A backup's part of one shard (statemachine.ExportQuery, one Pebble
// snapshot), read here when this node hosts the shard, else streamed from
// a node that does:
//
//	GET /internal/v1/shards/{n}/export?namespace=<ns>|all[&batches=1|&budgets=1]
//	    200: the shard's records, one backup.Record JSON per line, then
//	    {"kind":"trailer"} — a stream cut short has no trailer.

// ExportPart is which part of a shard an export reads.
type ExportPart uint8

// Export parts.
const (
	// PartRecords: queue settings, schedules, jobs, cache entries and
	// daily usage totals.
	PartRecords ExportPart = iota
	// PartBatches: the batches, of every namespace.
	PartBatches
	// PartBudgets: the budgets, each with this shard's daily spend.
	PartBudgets
)

// ExportShard reads part of shard sh's records of namespace ns ("all":
// every namespace) with read (a local replica's Read), handing each to
// emit as it is read.
func ExportShard(read func(sh int, q any) (any, error), sh int, ns string, part ExportPart, emit func(backup.Record) error) error {
	q := statemachine.ExportQuery{Batches: part == PartBatches, Budgets: part == PartBudgets, Emit: func(r statemachine.ExportRecord) error {
		return emit(toRecord(r))
	}}
	if ns != backup.AllNamespaces {
		q.Queue = func(queue string) bool { return router.QueueInNamespace(queue, ns) }
		stored := ns
		if ns == router.DefaultNamespace {
			stored = ""
		}
		q.Namespace = func(n string) bool { return n == stored }
	}
	_, err := read(sh, q)
	return err
}

func toRecord(r statemachine.ExportRecord) backup.Record {
	switch {
	case r.Queue != nil:
		c := r.Queue.Config
		return backup.Record{Kind: backup.KindQueue, Queue: &backup.Queue{Name: r.Queue.Name, Paused: c.Paused,
			MaxConcurrency: c.MaxConcurrency, RateLimit: c.RateLimit, RateWindowMs: c.RateWindowMs, Provider: c.Provider}}
	case r.Schedule != nil:
		return backup.Record{Kind: backup.KindSchedule, Schedule: backup.FromSchedule(r.Schedule)}
	case r.Job != nil:
		return backup.Record{Kind: backup.KindJob, Job: backup.FromJob(r.Job)}
	case r.Budget != nil:
		return backup.Record{Kind: backup.KindBudget, Budget: backup.FromBudget(r.Budget)}
	case r.Cache != nil:
		return backup.Record{Kind: backup.KindCache, Cache: backup.FromCache(r.Cache)}
	case r.UsageDay != nil:
		return backup.Record{Kind: backup.KindUsageDay, UsageDay: backup.FromUsageDay(r.UsageDay)}
	default:
		return backup.Record{Kind: backup.KindBatch, Batch: backup.FromBatch(r.Batch)}
	}
}

// Export serves GET /internal/v1/shards/{n}/export.
func (h *Handlers) Export(ctx *fasthttp.RequestCtx) {
	sh, ok := h.shard(ctx)
	if !ok {
		return
	}
	ns := string(ctx.QueryArgs().Peek("namespace"))
	if ns != backup.AllNamespaces && router.ValidateNamespace(ns) != nil {
		h.fail(ctx, invalid("namespace %q is neither a namespace nor \"all\"", ns))
		return
	}
	part := PartRecords
	switch {
	case string(ctx.QueryArgs().Peek("batches")) == "1":
		part = PartBatches
	case string(ctx.QueryArgs().Peek("budgets")) == "1":
		part = PartBudgets
	}
	if h.refuseNotHosted(ctx, sh) {
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		enc := json.NewEncoder(w)
		err := ExportShard(h.local.Read, sh, ns, part, func(r backup.Record) error { return enc.Encode(r) })
		if err != nil {
			return // no trailer: the caller sees a cut stream
		}
		_ = enc.Encode(backup.Record{Kind: backup.KindTrailer})
		_ = w.Flush()
	})
}

// Export streams shard sh's records (ExportShard) from a node hosting it,
// handing each to emit. A stream that ends without its trailer is an
// error: the caller must not take a part for the whole.
func (c *Client) Export(ctx context.Context, sh int, ns string, part ExportPart, emit func(backup.Record) error) error {
	path := ShardPath(sh, "export") + "?namespace=" + ns
	switch part {
	case PartBatches:
		path += "&batches=1"
	case PartBudgets:
		path += "&budgets=1"
	}
	var last error
	for _, addr := range c.Targets(sh) {
		req, err := http.NewRequestWithContext(ctx, "GET", c.URL(addr, path), nil)
		if err != nil {
			return err
		}
		req.Header.Set(HopHeader, "1")
		if c.cfg.Secret != "" {
			req.Header.Set(SecretHeader, c.cfg.Secret)
		}
		resp, err := c.events.Do(req)
		if err != nil {
			last = err
			continue
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			last = fmt.Errorf("%s answered %d: %s", addr, resp.StatusCode, b)
			if resp.Header.Get(NotHostedHeader) != "" {
				continue
			}
			return last
		}
		err = readExport(resp.Body, emit)
		resp.Body.Close()
		return err
	}
	if last == nil {
		last = errors.New("no node hosts shard " + strconv.Itoa(sh))
	}
	return unavailable("shard " + strconv.Itoa(sh) + ": " + last.Error())
}

func readExport(r io.Reader, emit func(backup.Record) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), backup.MaxLine)
	for sc.Scan() {
		var rec backup.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("unreadable export line: %w", err)
		}
		if rec.Kind == backup.KindTrailer {
			return nil
		}
		if err := emit(rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the export stream ended before its trailer")
}
