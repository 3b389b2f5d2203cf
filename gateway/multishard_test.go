package gateway

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// entryFails is an engine whose n-th proposal (counting from 1) to shard
// sh fails as if the shard had no leader.
type entryFails struct {
	Engine
	sh    int
	n     int64
	count *atomic.Int64
}

func (e entryFails) Propose(ctx context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if sh == e.sh && e.count.Add(1) == e.n {
		return failingShard{Engine: e.Engine, bad: sh}.Propose(ctx, sh, ops...)
	}
	return e.Engine.Propose(ctx, sh, ops...)
}

// ackOf is the op the proposeAll tests use for item i.
func ackOf(i int) *statemachine.AckOp { return &statemachine.AckOp{JobID: "item-" + itoa(i)} }

func TestProposeAll(t *testing.T) {
	t.Parallel()
	// spread puts items 0..7 on shard i%4.
	spread := func(p *shardOps) {
		for i := 0; i < 8; i++ {
			p.add(i%4, i, ackOf(i))
		}
	}
	// led adds a head op for no item on shard 2 and makes it lead.
	led := func(p *shardOps) {
		p.add(2, -1, &statemachine.AckOp{JobID: "head"})
		p.lead = 2
		spread(p)
	}
	rejectItem := func(items ...int) func(statemachine.Op) bool {
		return func(op statemachine.Op) bool {
			a, ok := op.(*statemachine.AckOp)
			for _, i := range items {
				if ok && a.JobID == "item-"+itoa(i) {
					return true
				}
			}
			return a != nil && a.JobID == "head" && len(items) == 0
		}
	}
	for _, c := range []struct {
		name    string
		eng     func(ok okEngine) Engine
		reject  func(statemachine.Op) bool
		build   func(p *shardOps)
		failed  map[int]string // item → code of the items not applied
		err     string         // code of multiOutcome.err ("": nil)
		status  int            // its status
		whole   string         // code of multiOutcome.whole ("": nil)
		entries map[int][]int  // shard → op count of each entry proposed
	}{
		{name: "all shards ok", build: spread,
			entries: map[int][]int{0: {2}, 1: {2}, 2: {2}, 3: {2}}},
		{name: "one shard busy", build: spread,
			eng:    func(ok okEngine) Engine { return busyShard{Engine: ok, busy: 1} },
			failed: map[int]string{1: "overloaded", 5: "overloaded"}, err: "overloaded", status: 429, whole: "overloaded"},
		{name: "one shard failing", build: spread,
			eng:    func(ok okEngine) Engine { return failingShard{Engine: ok, bad: 2} },
			failed: map[int]string{2: "unavailable", 6: "unavailable"}, err: "unavailable", status: 503, whole: "unavailable"},
		{name: "mixed: the lowest shard's error answers", build: spread,
			eng: func(ok okEngine) Engine {
				return busyShard{Engine: failingShard{Engine: ok, bad: 3}, busy: 1}
			},
			failed: map[int]string{1: "overloaded", 3: "unavailable", 5: "overloaded", 7: "unavailable"},
			err:    "overloaded", status: 429, whole: "overloaded"},
		{name: "a rejected op fails alone", build: spread, reject: rejectItem(6),
			failed: map[int]string{6: "conflict"}, err: "conflict", status: 409,
			entries: map[int][]int{0: {2}, 1: {2}, 2: {2}, 3: {2}}},
		{name: "rejected op and busy shard: the lowest shard's error answers", build: spread, reject: rejectItem(4),
			eng:    func(ok okEngine) Engine { return busyShard{Engine: ok, busy: 3} },
			failed: map[int]string{4: "conflict", 3: "overloaded", 7: "overloaded"}, err: "conflict", status: 409, whole: "overloaded"},
		{name: "an item that goes to no shard", build: func(p *shardOps) {
			spread(p)
			p.reject(8, &apiError{status: 404, code: "not_found", msg: "job not found"})
		}, failed: map[int]string{8: "not_found"}},
		{name: "the lead fails: nothing else is proposed", build: led,
			eng:    func(ok okEngine) Engine { return failingShard{Engine: ok, bad: 2} },
			failed: map[int]string{0: "unavailable", 1: "unavailable", 2: "unavailable", 3: "unavailable", 4: "unavailable", 5: "unavailable", 6: "unavailable", 7: "unavailable"},
			err:    "unavailable", status: 503, whole: "unavailable", entries: map[int][]int{}},
		// The state machine applies each op of an entry on its own: the
		// lead's other ops did apply.
		{name: "the lead's head rejected: nothing else is proposed", build: led, reject: rejectItem(),
			failed: map[int]string{0: "conflict", 1: "conflict", 3: "conflict", 4: "conflict", 5: "conflict", 7: "conflict"},
			err:    "conflict", status: 409, entries: map[int][]int{2: {3}}},
		{name: "the lead commits first, then the others", build: led, reject: rejectItem(2),
			failed: map[int]string{2: "conflict"}, err: "conflict", status: 409,
			entries: map[int][]int{0: {2}, 1: {2}, 2: {3}, 3: {2}}},
		{name: "another shard failing after the lead", build: led,
			eng:    func(ok okEngine) Engine { return busyShard{Engine: ok, busy: 0} },
			failed: map[int]string{0: "overloaded", 4: "overloaded"}, err: "overloaded", status: 429, whole: "overloaded",
			entries: map[int][]int{1: {2}, 2: {3}, 3: {2}}},
		{name: "entries of at most max ops; one failing fails only its ops", build: func(p *shardOps) {
			p.max = 3
			for i := 0; i < 8; i++ {
				p.add(0, i, ackOf(i))
			}
			p.add(1, 8, ackOf(8))
		},
			eng: func(ok okEngine) Engine {
				return entryFails{Engine: ok, sh: 0, n: 2, count: new(atomic.Int64)}
			},
			failed: map[int]string{3: "unavailable", 4: "unavailable", 5: "unavailable"}, err: "unavailable", status: 503, whole: "unavailable",
			entries: map[int][]int{0: {3, 2}, 1: {1}}}, // the failed entry never reached okEngine
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			log := &proposalLog{}
			ok := okEngine{reject: c.reject, log: log}
			var eng Engine = ok
			if c.eng != nil {
				eng = c.eng(ok)
			}
			srv := New(Config{Logger: zerolog.Nop()}, eng)
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			p := newShardOps(eng.Shards(), 8)
			c.build(p)
			var applied []int
			out := srv.proposeAll(context.Background(), p, func(item int, op statemachine.Op, r *statemachine.Result) {
				require.Equal(t, statemachine.StatusOK, r.Status)
				if item >= 0 {
					require.Equal(t, "item-"+itoa(item), op.(*statemachine.AckOp).JobID)
				}
				applied = append(applied, item)
			})

			var items []int
			codes := map[int]string{}
			for _, f := range out.failed {
				items = append(items, f.item)
				codes[f.item] = f.err.code
			}
			require.IsIncreasing(t, items, "failures in item order")
			if c.failed == nil {
				c.failed = map[int]string{}
			}
			require.Equal(t, c.failed, codes)
			require.Equal(t, p.itemCount()-len(c.failed), out.applied)
			require.Len(t, applied, out.applied+p.headApplied())
			for _, i := range applied {
				require.NotContains(t, c.failed, i, "an item reported both applied and not")
			}
			if c.err == "" {
				require.Nil(t, out.err)
			} else {
				require.NotNil(t, out.err)
				require.Equal(t, c.err, out.err.code)
				require.Equal(t, c.status, out.err.status)
			}
			if c.whole == "" {
				require.Nil(t, out.whole)
			} else {
				require.NotNil(t, out.whole)
				require.Equal(t, c.whole, out.whole.code)
			}
			if c.entries != nil {
				got := map[int][]int{}
				for sh := 0; sh < eng.Shards(); sh++ {
					if e := log.shard(sh); e != nil {
						got[sh] = e
					}
				}
				require.Equal(t, c.entries, got)
			}
		})
	}
}

// itemCount counts the items proposed or rejected (after proposeAll).
func (p *shardOps) itemCount() int {
	n := 0
	for _, pt := range p.parts {
		for _, i := range pt.items {
			if i >= 0 {
				n++
			}
		}
	}
	for _, f := range p.rejected {
		if f.item >= 0 {
			n++
		}
	}
	return n
}

// headApplied counts the applied ops that act for no item (after
// proposeAll): the lead's head, when it applied.
func (p *shardOps) headApplied() int {
	n := 0
	for _, pt := range p.parts {
		for k, i := range pt.items {
			if i < 0 && !(k == 0 && pt.headFail) {
				n++
			}
		}
	}
	return n
}
