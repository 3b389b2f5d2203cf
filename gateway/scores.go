package gateway

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Scores (issue 20): POST /api/v1/jobs/{id}/score stores a score in the
// job's shard (statemachine/scores.go); GET /api/v1/scores/summary and
// /scores/compare summarise the mirror's job_scores, merged across the
// nodes that hold the shards like the usage summary. Percentiles merge
// through the mirror's sketches (mirror.ScoreSketchSize values per
// dimension and part: exact up to it).

type scoreRequest struct {
	Dimensions map[string]float64 `json:"dimensions"`
	Scorer     string             `json:"scorer"`
	Comment    string             `json:"comment"`
}

// toScore validates a score and orders its dimensions by name.
func (r *scoreRequest) toScore() (statemachine.Score, *apiError) {
	sc := statemachine.Score{Scorer: r.Scorer, Comment: r.Comment}
	if len(r.Dimensions) > statemachine.MaxScoreDims {
		return sc, invalid("field \"dimensions\": at most %d", statemachine.MaxScoreDims)
	}
	for name, v := range r.Dimensions {
		sc.Dims = append(sc.Dims, statemachine.ScoreDim{Name: name, Value: v})
	}
	slices.SortFunc(sc.Dims, func(a, b statemachine.ScoreDim) int { return strings.Compare(a.Name, b.Name) })
	if err := sc.Check(); err != nil {
		return sc, invalid("%v", err)
	}
	return sc, nil
}

// POST /api/v1/jobs/{id}/score
func (s *Server) handleScore(ctx *fasthttp.RequestCtx) {
	var req scoreRequest
	if err := decodeBody(ctx.PostBody(), &req, false); err != nil {
		writeError(ctx, err)
		return
	}
	sc, aerr := req.toScore()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var jobID string
	r, ok := s.jobOp(ctx, func(id string) statemachine.Op {
		jobID = id
		return &statemachine.ScoreOp{JobID: id, Score: sc}
	})
	if !ok {
		return
	}
	b := append([]byte(`{"job_id":`), appendString(nil, jobID)...)
	b = append(b, `,"status":`...)
	b = appendString(b, stateName(r.State))
	writeJSON(ctx, 201, append(b, '}'))
}

// scorePart is a node's answer to a part of a summary (?shards=).
type scorePart struct {
	Groups []scorePartGroup `json:"groups"`
}

type scorePartGroup struct {
	Key  *string        `json:"key"`
	Dims []scorePartDim `json:"dims"`
}

type scorePartDim struct {
	Name    string    `json:"name"`
	Count   int64     `json:"count"`
	Sum     float64   `json:"sum"`
	Samples []float64 `json:"samples"`
	Weight  float64   `json:"weight"`
}

func sameKey(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

// mergeScores adds a part's groups to gs, group by group and dimension by
// dimension.
func mergeScores(gs []mirror.ScoreGroup, p *scorePart) []mirror.ScoreGroup {
	for _, pg := range p.Groups {
		at := slices.IndexFunc(gs, func(g mirror.ScoreGroup) bool { return sameKey(g.Key, pg.Key) })
		if at < 0 {
			gs = append(gs, mirror.ScoreGroup{Key: pg.Key})
			at = len(gs) - 1
		}
		g := &gs[at]
		for _, pd := range pg.Dims {
			d := mirror.ScoreDim{Name: pd.Name, Count: pd.Count, Sum: pd.Sum, Samples: pd.Samples, Weight: pd.Weight}
			k := slices.IndexFunc(g.Dims, func(x mirror.ScoreDim) bool { return x.Name == pd.Name })
			if k < 0 {
				g.Dims = append(g.Dims, d)
				continue
			}
			mirror.MergeScoreDims(&g.Dims[k], &d)
		}
		slices.SortFunc(g.Dims, func(a, b mirror.ScoreDim) int { return strings.Compare(a.Name, b.Name) })
	}
	slices.SortStableFunc(gs, func(a, b mirror.ScoreGroup) int {
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
	return gs
}

// GET /api/v1/scores/summary?queue=&period=&scorer= and
// GET /api/v1/scores/compare?group_by=tag:<key>&queue=&period=&scorer=
func (s *Server) handleScores(compare bool) func(*fasthttp.RequestCtx) {
	return func(ctx *fasthttp.RequestCtx) {
		if s.cfg.Mirror == nil {
			writeError(ctx, codeUnavailable.err("score summaries need the mirror, which this server runs without"))
			return
		}
		if principal(ctx).Scoped() {
			writeError(ctx, codeForbidden.err("a key limited to some queues cannot read score summaries"))
			return
		}
		args := ctx.QueryArgs()
		period := string(args.Peek("period"))
		if period == "" {
			period = "7d"
		}
		d, ok := usagePeriods[period]
		if !ok {
			writeError(ctx, invalid("period: unknown value %q (use 24h, 7d or 30d)", period))
			return
		}
		ns := s.searchNamespace(ctx)
		queue := string(args.Peek("queue"))
		f := mirror.ScoreFilter{Since: s.clock.Now().Add(-d).UnixNano(), Namespace: ns, Scorer: string(args.Peek("scorer"))}
		if queue != "" {
			f.Queue = router.NamespacedQueue(principal(ctx).Namespace, queue)
		}
		groupBy := string(args.Peek("group_by"))
		if compare {
			if !strings.HasPrefix(groupBy, "tag:") || len(groupBy) == len("tag:") {
				writeError(ctx, invalid("group_by: %q is not tag:<key>", groupBy))
				return
			}
			f.TagKey = groupBy[len("tag:"):]
		} else if groupBy != "" {
			writeError(ctx, invalid("group_by belongs to /api/v1/scores/compare"))
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
		s.awaitMirror(rctx, nil) // read your writes, on every node a part runs on too
		f.Shards = local
		gs, err := s.cfg.Mirror.ScoreSummary(rctx, f)
		if errors.Is(err, mirror.ErrBadFilter) {
			writeError(ctx, invalid("%v", err))
			return
		}
		if err != nil {
			writeError(ctx, codeInternal.err(err.Error()))
			return
		}
		if part {
			p := scorePart{Groups: make([]scorePartGroup, len(gs))}
			for i, g := range gs {
				p.Groups[i].Key = g.Key
				p.Groups[i].Dims = make([]scorePartDim, len(g.Dims))
				for k, d := range g.Dims {
					p.Groups[i].Dims[k] = scorePartDim{Name: d.Name, Count: d.Count, Sum: d.Sum, Samples: d.Samples, Weight: d.Weight}
				}
			}
			b, _ := json.Marshal(&p)
			writeJSON(ctx, 200, b)
			return
		}
		if len(remote) > 0 {
			path := "summary"
			if compare {
				path = "compare"
			}
			q := "/api/v1/scores/" + path + "?period=" + period + "&since=" + strconv.FormatInt(f.Since, 10)
			for _, kv := range [][2]string{{"queue", queue}, {"scorer", f.Scorer}, {"group_by", groupBy}} {
				if kv[1] != "" {
					q += "&" + kv[0] + "=" + string(fasthttp.AppendQuotedArg(nil, []byte(kv[1])))
				}
			}
			bodies, perr := s.peer.GetShards(principal(ctx).Namespace, q, remote, time.Now().Add(s.cfg.RequestTimeout))
			if perr != nil {
				writeError(ctx, engineError(perr))
				return
			}
			for _, body := range bodies {
				var p scorePart
				if err := json.Unmarshal(body, &p); err != nil {
					writeError(ctx, codeUnavailable.err("another node answered a malformed score summary"))
					return
				}
				gs = mergeScores(gs, &p)
			}
		}
		b := append([]byte(`{"period":`), appendString(nil, period)...)
		b = append(b, `,"queue":`...)
		b = appendNullableString(b, queue)
		b = append(b, `,"scorer":`...)
		b = appendNullableString(b, f.Scorer)
		if compare {
			b = append(b, `,"group_by":`...)
			b = appendString(b, groupBy)
			b = append(b, `,"groups":[`...)
			for i := range gs {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"key":`...)
				if k := gs[i].Key; k != nil {
					b = appendString(b, *k)
				} else {
					b = append(b, "null"...)
				}
				b = append(b, `,"dimensions":`...)
				b = appendScoreDims(b, gs[i].Dims)
				b = append(b, '}')
			}
			b = append(b, ']')
		} else {
			var dims []mirror.ScoreDim
			if len(gs) > 0 {
				dims = gs[0].Dims
			}
			b = append(b, `,"dimensions":`...)
			b = appendScoreDims(b, dims)
		}
		writeJSON(ctx, 200, append(b, '}'))
	}
}

func appendFloat(b []byte, v float64) []byte { return strconv.AppendFloat(b, v, 'g', -1, 64) }

func appendScoreDims(b []byte, dims []mirror.ScoreDim) []byte {
	b = append(b, '{')
	for i := range dims {
		d := &dims[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, d.Name)
		b = append(b, `:{"mean":`...)
		b = appendFloat(b, d.Mean())
		b = append(b, `,"p50":`...)
		b = appendFloat(b, d.Quantile(0.5))
		b = append(b, `,"p5":`...)
		b = appendFloat(b, d.Quantile(0.05))
		b = append(b, `,"count":`...)
		b = appendInt(b, d.Count)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJobScores writes the job document's "scores", oldest first.
func appendJobScores(b []byte, recs []statemachine.ScoreRecord) []byte {
	b = append(b, '[')
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"scorer":`...)
		b = appendString(b, r.Scorer)
		b = append(b, `,"dimensions":{`...)
		for k, d := range r.Dims {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d.Name)
			b = append(b, ':')
			b = appendFloat(b, d.Value)
		}
		b = append(b, `},"comment":`...)
		b = appendNullableString(b, r.Comment)
		b = append(b, `,"at":`...)
		b = appendTime(b, r.At)
		b = append(b, '}')
	}
	return append(b, ']')
}
