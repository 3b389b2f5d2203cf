package mirror

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ScoreFilter asks for the scores posted since a time (issue 20: GET
// /api/v1/scores/summary and /scores/compare).
type ScoreFilter struct {
	Since  int64  // Unix ns: scores posted at or after it
	Queue  string // "": every queue
	Scorer string // "": every scorer
	// TagKey groups by the value of the job's tag (compare); "": one
	// group, the totals.
	TagKey    string
	Namespace string // "": every namespace's queues
	Shards    []int  // nil: every shard the mirror holds
}

// ScoreSketchSize bounds the values a dimension's summary carries: up to
// it, every value (the percentiles are exact); past it, that many values
// at evenly spaced ranks of the sorted values, each standing for
// Count/ScoreSketchSize of them. Sketches of several parts merge by
// weight (MergeScoreDims), so the percentiles of a summary over many
// nodes are within one rank step of a part's values.
const ScoreSketchSize = 512

// ScoreDim summarises one dimension: how many values, their sum, and a
// sketch of their distribution (Samples sorted, each of weight Weight).
type ScoreDim struct {
	Name    string
	Count   int64
	Sum     float64
	Samples []float64
	Weight  float64
}

// Mean is Sum/Count (0 without values).
func (d *ScoreDim) Mean() float64 {
	if d.Count == 0 {
		return 0
	}
	return d.Sum / float64(d.Count)
}

// Quantile is the nearest-rank q-quantile (0 < q ≤ 1) of the sketch: the
// first sample whose cumulative weight reaches q of the whole.
func (d *ScoreDim) Quantile(q float64) float64 {
	if len(d.Samples) == 0 {
		return 0
	}
	total := d.Weight * float64(len(d.Samples))
	rank := math.Ceil(q*total - 1e-9)
	for i := range d.Samples {
		if float64(i+1)*d.Weight >= rank {
			return d.Samples[i]
		}
	}
	return d.Samples[len(d.Samples)-1]
}

// ScoreGroup is the dimensions of one group (Key nil: the jobs without
// the tag, or the totals).
type ScoreGroup struct {
	Key  *string
	Dims []ScoreDim // by name
}

// sketch makes a dimension's summary from its sorted values.
func sketch(name string, sorted []float64) ScoreDim {
	d := ScoreDim{Name: name, Count: int64(len(sorted)), Weight: 1}
	for _, v := range sorted {
		d.Sum += v
	}
	if len(sorted) <= ScoreSketchSize {
		d.Samples = sorted
		return d
	}
	n := len(sorted)
	d.Samples = make([]float64, ScoreSketchSize)
	for i := range d.Samples {
		// The value at the end of the i-th of ScoreSketchSize equal rank
		// ranges: sample i then stands for the values up to it.
		d.Samples[i] = sorted[(i+1)*n/ScoreSketchSize-1]
	}
	d.Weight = float64(n) / ScoreSketchSize
	return d
}

// MergeScoreDims merges b into a (same name): counts and sums add, and the
// samples are merged by weight — kept as they are while they fit and
// weigh the same, else re-sampled at evenly spaced cumulative weights
// into at most ScoreSketchSize samples.
func MergeScoreDims(a *ScoreDim, b *ScoreDim) {
	a.Count += b.Count
	a.Sum += b.Sum
	if len(b.Samples) == 0 {
		return
	}
	if len(a.Samples) == 0 {
		a.Samples, a.Weight = slices.Clone(b.Samples), b.Weight
		return
	}
	type wv struct{ v, w float64 }
	all := make([]wv, 0, len(a.Samples)+len(b.Samples))
	total := 0.0
	for _, d := range []*ScoreDim{a, b} {
		for _, v := range d.Samples {
			all = append(all, wv{v, d.Weight})
			total += d.Weight
		}
	}
	slices.SortStableFunc(all, func(x, y wv) int { return cmp.Compare(x.v, y.v) })
	if a.Weight == b.Weight && len(all) <= ScoreSketchSize {
		a.Samples = make([]float64, len(all))
		for i, x := range all {
			a.Samples[i] = x.v
		}
		return
	}
	k := min(len(all), ScoreSketchSize)
	out := make([]float64, k)
	cum, j := all[0].w, 0
	for i := range out {
		target := total * float64(i+1) / float64(k)
		for j < len(all)-1 && cum < target-1e-9 {
			j++
			cum += all[j].w
		}
		out[i] = all[j].v
	}
	a.Samples, a.Weight = out, total/float64(k)
}

// ScoreSummary summarises the scores that match f, per group (one group,
// Key nil, without TagKey) and per dimension.
func (m *Mirror) ScoreSummary(ctx context.Context, f ScoreFilter) ([]ScoreGroup, error) {
	var ps Params
	where := []string{"s.at >= " + ps.Add(f.Since)}
	if f.Namespace != "" {
		where = append(where, strings.ReplaceAll(namespaceCond(f.Namespace, &ps), "queue", "s.queue"))
	}
	if f.Queue != "" {
		where = append(where, "s.queue = "+ps.Add(f.Queue))
	}
	if f.Scorer != "" {
		where = append(where, "s.scorer = "+ps.Add(f.Scorer))
	}
	if f.Shards != nil {
		if len(f.Shards) == 0 {
			return []ScoreGroup{}, nil
		}
		in := make([]string, len(f.Shards))
		for i, sh := range f.Shards {
			in[i] = ps.Add(sh)
		}
		where = append(where, "s.shard IN ("+strings.Join(in, ",")+")")
	}
	from, key := "job_scores s", "NULL"
	if f.TagKey != "" {
		if strings.ContainsAny(f.TagKey, `"\`) {
			return nil, fmt.Errorf("%w: a tag key must be without '\"' or '\\'", ErrBadFilter)
		}
		from = "job_scores s LEFT JOIN jobs j ON j.id = s.job_id"
		key = "CAST(json_extract(j.tags, " + ps.Add(`$."`+f.TagKey+`"`) + ") AS TEXT)"
	}
	rows, err := m.rdb.QueryContext(ctx, "SELECT "+key+" AS k, s.dimension, s.value FROM "+from+" WHERE "+strings.Join(where, " AND ")+
		" ORDER BY k IS NULL, k, s.dimension, s.value", ps.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []ScoreGroup{}
	var g *ScoreGroup
	var dim string
	var vals []float64
	flush := func() {
		if g != nil && vals != nil {
			g.Dims = append(g.Dims, sketch(dim, vals))
		}
		vals = nil
	}
	for rows.Next() {
		var k sql.NullString
		var d string
		var v float64
		if err := rows.Scan(&k, &d, &v); err != nil {
			return nil, err
		}
		if g == nil || (g.Key == nil) != !k.Valid || (k.Valid && *g.Key != k.String) {
			flush()
			out = append(out, ScoreGroup{})
			g = &out[len(out)-1]
			if k.Valid {
				g.Key = &k.String
			}
		} else if d != dim {
			flush()
		}
		dim = d
		vals = append(vals, v)
	}
	flush()
	return out, rows.Err()
}
