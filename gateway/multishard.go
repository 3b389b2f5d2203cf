package gateway

import (
	"context"
	"slices"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/statemachine"
)

// The multi-shard rule (ARCHITECTURE.md), written once for every request
// that spans shards — batch enqueue, ack batch, heartbeat, bulk: split the
// request per shard (shardOps), propose every shard's part at once and
// wait for all of them (proposeAll), and answer with exactly the items
// that were not applied, one status and one Retry-After (writeMulti,
// appendNotApplied, appendFailures).

// shardOps is a request split per shard. Items are the request's
// positions (a job of a batch, an ack, an ID of a bulk); each op acts for
// one item, or for none (item -1: an op the gateway adds, such as a batch
// record, or one that carries several items, such as a heartbeat).
type shardOps struct {
	added []addedOp   // in the order add was called
	parts []shardPart // by shard, once proposeAll has split added
	// lead, when >= 0, is the shard whose part is proposed before the
	// others, which go only if its first op applied; otherwise every op
	// of the others fails with that op's error, unproposed. A batch
	// enqueue leads with its batch record's shard.
	lead int
	// max bounds the ops per entry (<= 0: one entry per shard); a longer
	// part goes as consecutive entries.
	max int
	// rejected: items that go to no shard (an ID that cannot exist).
	rejected []itemFailure
}

type addedOp struct {
	sh, item int32
	op       statemachine.Op
}

type shardPart struct {
	ops   []statemachine.Op
	items []int
	n     int // ops, while split counts them
	// Set by proposeAll:
	err      *apiError // the first failure among ops, in op order
	whole    *apiError // the first entry that failed as a whole
	headFail bool      // ops[0] was not applied
}

// newShardOps prepares a request over shards shards of about n ops.
func newShardOps(shards, n int) *shardOps {
	return &shardOps{added: make([]addedOp, 0, n), parts: make([]shardPart, shards), lead: -1}
}

// add puts op, acting for item (-1: none), at the end of shard sh's part.
func (p *shardOps) add(sh, item int, op statemachine.Op) {
	p.added = append(p.added, addedOp{int32(sh), int32(item), op})
}

// split lays every shard's part out, in the order added, over one array
// of ops and one of items.
func (p *shardOps) split() {
	for _, a := range p.added {
		p.parts[a.sh].n++
	}
	ops := make([]statemachine.Op, len(p.added))
	items := make([]int, len(p.added))
	off := 0
	for sh := range p.parts {
		pt := &p.parts[sh]
		pt.ops, pt.items = ops[off:off:off+pt.n], items[off:off:off+pt.n]
		off += pt.n
	}
	for _, a := range p.added {
		pt := &p.parts[a.sh]
		pt.ops, pt.items = append(pt.ops, a.op), append(pt.items, int(a.item))
	}
	p.added = nil
}

// reject records an item that goes to no shard as not applied, with e.
func (p *shardOps) reject(item int, e *apiError) {
	p.rejected = append(p.rejected, itemFailure{item, e})
}

// itemFailure: the op of a request item was not applied, because of err.
type itemFailure struct {
	item int
	err  *apiError
}

// multiOutcome is what proposeAll reports.
type multiOutcome struct {
	// failed lists every item whose op was not applied (its entry failed,
	// the state machine rejected it, or shardOps.reject did), in item
	// order.
	failed []itemFailure
	// applied counts the items whose op was applied.
	applied int
	// err is the first failure of the lowest shard that had one (an
	// entry's error or a rejected op's): nil when every op proposed
	// applied (shardOps.reject's items do not count).
	err *apiError
	// whole is the first entry error of the lowest shard where a whole
	// entry failed (overload, no leader, …): nil when every entry
	// committed. Its status is what a request nothing of which applied
	// answers.
	whole *apiError
}

// proposeAll proposes every shard's part of p at once, through
// s.proposeCtx (here or on a node hosting the shard), and returns when
// every part has committed or failed. applied, when not nil, is called
// for each op that was applied, with its item and result, one call at a
// time (never two at once).
func (s *Server) proposeAll(ctx context.Context, p *shardOps, applied func(item int, op statemachine.Op, r *statemachine.Result)) multiOutcome {
	p.split()
	out := multiOutcome{failed: p.rejected}
	var mu sync.Mutex
	if p.lead >= 0 && len(p.parts[p.lead].ops) > 0 {
		s.proposePart(ctx, p, p.lead, &mu, &out, applied)
		if lp := &p.parts[p.lead]; lp.headFail {
			for sh := range p.parts {
				if sh != p.lead {
					p.parts[sh].failAll(lp.err, &out)
				}
			}
			return out.finish(p)
		}
	}
	busy, last := 0, -1
	for sh := range p.parts {
		if sh != p.lead && len(p.parts[sh].ops) > 0 {
			busy, last = busy+1, sh
		}
	}
	if busy == 1 {
		s.proposePart(ctx, p, last, &mu, &out, applied) // one shard: no goroutine
		return out.finish(p)
	}
	var wg sync.WaitGroup
	for sh := range p.parts {
		if sh != p.lead && len(p.parts[sh].ops) > 0 {
			wg.Add(1)
			go func(sh int) {
				defer wg.Done()
				s.proposePart(ctx, p, sh, &mu, &out, applied)
			}(sh)
		}
	}
	wg.Wait()
	return out.finish(p)
}

// proposePart proposes shard sh's part, in entries of at most p.max ops,
// one after the other, recording each op's outcome in pt and out under mu.
func (s *Server) proposePart(ctx context.Context, p *shardOps, sh int, mu *sync.Mutex, out *multiOutcome, applied func(int, statemachine.Op, *statemachine.Result)) {
	pt := &p.parts[sh]
	step := len(pt.ops)
	if p.max > 0 {
		step = p.max
	}
	for k0 := 0; k0 < len(pt.ops); k0 += step {
		k1 := min(len(pt.ops), k0+step)
		rs, aerr := s.proposeCtx(ctx, sh, pt.ops[k0:k1]...)
		mu.Lock()
		if aerr != nil && pt.whole == nil {
			pt.whole = aerr
		}
		for k := k0; k < k1; k++ {
			e := aerr
			if e == nil {
				e = resultError(&rs[k-k0])
			}
			item := pt.items[k]
			switch {
			case e != nil:
				pt.fail(k, e)
				if item >= 0 {
					out.failed = append(out.failed, itemFailure{item, e})
				}
			default:
				if item >= 0 {
					out.applied++
				}
				if applied != nil {
					applied(item, pt.ops[k], &rs[k-k0])
				}
			}
		}
		mu.Unlock()
	}
}

func (pt *shardPart) fail(k int, e *apiError) {
	if pt.err == nil {
		pt.err = e
	}
	if k == 0 {
		pt.headFail = true
	}
}

// failAll records every op of an unproposed part as not applied, with e.
func (pt *shardPart) failAll(e *apiError, out *multiOutcome) {
	for k, item := range pt.items {
		pt.fail(k, e)
		if item >= 0 {
			out.failed = append(out.failed, itemFailure{item, e})
		}
	}
}

// finish orders the failures by item and picks the lowest shard's errors.
func (out *multiOutcome) finish(p *shardOps) multiOutcome {
	slices.SortFunc(out.failed, func(a, b itemFailure) int { return a.item - b.item })
	for i := range p.parts {
		if out.err == nil {
			out.err = p.parts[i].err
		}
		if out.whole == nil {
			out.whole = p.parts[i].whole
		}
	}
	return *out
}

// writeMulti answers a multi-shard request with body b: status ok when
// fail is nil, else fail's status — with one Retry-After when that is 429
// or 503, however many shards failed.
func writeMulti(ctx *fasthttp.RequestCtx, ok int, fail *apiError, b []byte) {
	if fail == nil {
		writeJSON(ctx, ok, b)
		return
	}
	if (fail.status == 429 || fail.status == 503) && len(ctx.Response.Header.Peek("Retry-After")) == 0 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	writeJSON(ctx, fail.status, b)
}

// appendNotApplied writes the failure of a request whose items answer by
// position: `,"error":…,"code":…,"not_applied":[items]`.
func appendNotApplied(b []byte, out *multiOutcome) []byte {
	b = append(b, `,"error":`...)
	b = appendString(b, out.err.msg)
	b = append(b, `,"code":`...)
	b = appendString(b, out.err.code)
	b = append(b, `,"not_applied":[`...)
	for i, f := range out.failed {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int64(f.item))
	}
	return append(b, ']')
}

// jobFailure: the op on a job was not applied, because of err.
type jobFailure struct {
	id  string
	err *apiError
}

// jobFailures names out's failed items by the job IDs ids[item], after
// the ones already in dst (request order, when both are).
func jobFailures(dst []jobFailure, out *multiOutcome, ids func(item int) string) []jobFailure {
	for _, f := range out.failed {
		dst = append(dst, jobFailure{ids(f.item), f.err})
	}
	return dst
}

// appendFailures writes the failures of a request whose items answer by
// job ID, the first max of them (max <= 0: all):
// [{"job_id","code","error"},…].
func appendFailures(b []byte, failed []jobFailure, max int) []byte {
	b = append(b, '[')
	for i, f := range failed {
		if max > 0 && i == max {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"job_id":`...)
		b = appendString(b, f.id)
		b = append(b, `,"code":`...)
		b = appendString(b, f.err.code)
		b = append(b, `,"error":`...)
		b = appendString(b, f.err.msg)
		b = append(b, '}')
	}
	return append(b, ']')
}
