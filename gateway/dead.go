package gateway

import (
	"sort"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// GET /api/v1/dead?queue=&limit=50&cursor= — the dead-letter list, most
// recently dead first, across every shard, in pages.
func (s *Server) handleDead(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	queue := string(args.Peek("queue"))
	if queue != "" {
		if err := router.ValidateQueueName(queue); err != nil {
			writeError(ctx, invalid("queue: %v", err))
			return
		}
	}
	if !requireQueues(ctx, "?queue=", nonEmpty(queue)...) {
		return
	}
	ns := s.searchNamespace(ctx)
	if queue != "" {
		queue = router.NamespacedQueue(ns, queue)
	}
	limit := 50
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1000 {
			writeError(ctx, invalid("limit must be 1–1000"))
			return
		}
		limit = n
	}
	var before int64
	var beforeID string
	if c := string(args.Peek("cursor")); c != "" {
		ts, id, ok := strings.Cut(c, "~")
		n, err := strconv.ParseInt(ts, 10, 64)
		if !ok || err != nil || n <= 0 {
			writeError(ctx, invalid("cursor is not one this endpoint returned"))
			return
		}
		before, beforeID = n, id
	}
	var all []statemachine.JobView
	more := false
	vs, err := s.readEach(func(int) any {
		return statemachine.DeadQuery{Queue: queue, Namespace: ns, Before: before, BeforeID: beforeID, Limit: limit}
	})
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	for _, v := range vs {
		page := v.(statemachine.DeadPage)
		all = append(all, page.Jobs...)
		more = more || page.More
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := &all[i].State, &all[j].State
		if a.CompletedAt != b.CompletedAt {
			return a.CompletedAt > b.CompletedAt
		}
		return all[i].Job.ID > all[j].Job.ID
	})
	if len(all) > limit {
		all, more = all[:limit], true
	}
	b := []byte(`{"jobs":[`)
	for i := range all {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJob(b, &all[i])
	}
	b = append(b, `],"has_more":`...)
	b = appendBool(b, more)
	b = append(b, `,"cursor":`...)
	if more && len(all) > 0 {
		last := &all[len(all)-1]
		b = appendString(b, strconv.FormatInt(last.State.CompletedAt, 10)+"~"+last.Job.ID)
	} else {
		b = append(b, "null"...)
	}
	writeJSON(ctx, 200, append(b, '}'))
}
