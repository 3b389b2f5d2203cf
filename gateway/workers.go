package gateway

import (
	"slices"
	"sort"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// GET /api/v1/workers — every worker any shard heard from in the last day
// (fetches and heartbeats), merged across shards, with the jobs it holds.
func (s *Server) handleWorkers(ctx *fasthttp.RequestCtx) {
	merged := map[string]*statemachine.WorkerInfo{}
	vs, err := s.readEach(func(int) any { return statemachine.WorkersQuery{} })
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	for _, v := range vs {
		for _, w := range v.([]statemachine.WorkerInfo) {
			m, ok := merged[w.ID]
			if !ok {
				w := w
				merged[w.ID] = &w
				continue
			}
			for _, q := range w.Queues {
				if !slices.Contains(m.Queues, q) {
					m.Queues = append(m.Queues, q)
				}
			}
			m.ActiveJobs = append(m.ActiveJobs, w.ActiveJobs...)
			if w.LastSeen > m.LastSeen {
				m.LastSeen = w.LastSeen
				if w.Hostname != "" {
					m.Hostname = w.Hostname
				}
			}
			if w.FirstSeen < m.FirstSeen {
				m.FirstSeen = w.FirstSeen
			}
		}
	}
	list := make([]*statemachine.WorkerInfo, 0, len(merged))
	ns := s.searchNamespace(ctx)
	for _, w := range merged {
		if ns != "" {
			// A worker of the request's namespace: one that fetched from
			// its queues, shown with those queues only.
			w.Queues = slices.DeleteFunc(w.Queues, func(q string) bool { return !router.QueueInNamespace(q, ns) })
			if len(w.Queues) == 0 {
				continue
			}
			for i, q := range w.Queues {
				w.Queues[i] = router.DisplayQueue(q)
			}
		}
		sort.Strings(w.Queues)
		sort.Strings(w.ActiveJobs)
		list = append(list, w)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	b := []byte(`{"workers":[`)
	for i, w := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, w.ID)
		b = append(b, `,"hostname":`...)
		b = appendNullableString(b, w.Hostname)
		b = append(b, `,"queues":`...)
		b = appendStrings(b, w.Queues)
		b = append(b, `,"active_jobs":`...)
		b = appendInt(b, int64(len(w.ActiveJobs)))
		b = append(b, `,"jobs":`...)
		b = appendStrings(b, w.ActiveJobs)
		b = append(b, `,"first_seen":`...)
		b = appendTime(b, w.FirstSeen)
		b = append(b, `,"last_seen":`...)
		b = appendTime(b, w.LastSeen)
		b = append(b, '}')
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}
