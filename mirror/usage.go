package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// UsageFilter asks for the usage reported since a time, grouped (issue 20:
// GET /api/v1/usage/summary).
type UsageFilter struct {
	Since int64 // Unix ns: records reported at or after it
	// GroupBy is "" (totals only), "queue", "model", "provider", "tag"
	// (TagKey names the tag), or "hour" or "day": buckets of time (UTC),
	// keyed by their start in RFC 3339 ("2026-11-26T20:00:00Z") and
	// ordered by it.
	GroupBy string
	TagKey  string
	// Namespace restricts it to one namespace's queues ("": every queue).
	Namespace string
	// Shards restricts it to these shards (nil: every shard the mirror
	// holds).
	Shards []int
}

// UsageGroup adds up the usage records of one group. Key is nil for the
// records without a value for it (no model, no such tag).
type UsageGroup struct {
	Key                 *string
	InputTokens         int64
	OutputTokens        int64
	CacheCreationTokens int64
	CacheReadTokens     int64
	CostNanos           int64
	Jobs                int64 // distinct jobs with a record in the group
	Reports             int64 // records
}

// TimeGroupBy reports whether a group_by is a time bucket (hour, day):
// such groups are ordered by their key, not by cost.
func TimeGroupBy(groupBy string) bool { return groupBy == "hour" || groupBy == "day" }

// UsageSummary is the answer to a UsageFilter: its groups, ordered by
// cost (highest first) then key, and the totals.
type UsageSummary struct {
	Groups []UsageGroup
	Totals UsageGroup
	Cache  CacheStats
}

// CacheStats counts the jobs enqueued in the period with a cache key:
// those completed from the cache (hits, and the cost of the jobs they
// took their results from) and the others (misses).
type CacheStats struct {
	Hits, Misses, SavedNanos int64
}

// UsageSummary adds up the usage records that match f.
func (m *Mirror) UsageSummary(ctx context.Context, f UsageFilter) (*UsageSummary, error) {
	var ps Params
	where := []string{"u.at >= " + ps.Add(f.Since)}
	if f.Namespace != "" {
		where = append(where, strings.ReplaceAll(namespaceCond(f.Namespace, &ps), "queue", "u.queue"))
	}
	if f.Shards != nil {
		if len(f.Shards) == 0 {
			return &UsageSummary{Groups: []UsageGroup{}}, nil
		}
		in := make([]string, len(f.Shards))
		for i, sh := range f.Shards {
			in[i] = ps.Add(sh)
		}
		where = append(where, "u.shard IN ("+strings.Join(in, ",")+")")
	}
	from := "job_usage u"
	var key string
	switch f.GroupBy {
	case "":
	case "queue":
		key = "u.queue"
	case "model":
		key = "u.model"
	case "provider":
		key = "u.provider"
	case "tag":
		if f.TagKey == "" || strings.ContainsAny(f.TagKey, `"\`) {
			return nil, fmt.Errorf("%w: a tag key for group_by must be non-empty, without '\"' or '\\'", ErrBadFilter)
		}
		from = "job_usage u LEFT JOIN jobs j ON j.id = u.job_id"
		key = "json_extract(j.tags, " + ps.Add(`$."`+f.TagKey+`"`) + ")"
	case "hour":
		key = "strftime('%Y-%m-%dT%H:00:00Z', u.at / 1000000000, 'unixepoch')"
	case "day":
		key = "strftime('%Y-%m-%dT00:00:00Z', u.at / 1000000000, 'unixepoch')"
	default:
		return nil, fmt.Errorf("%w: unknown group_by %q", ErrBadFilter, f.GroupBy)
	}
	sums := "SUM(u.input_tokens), SUM(u.output_tokens), SUM(u.cache_creation_tokens), SUM(u.cache_read_tokens), SUM(u.cost_nanos), COUNT(DISTINCT u.job_id), COUNT(*)"
	cond := " FROM " + from + " WHERE " + strings.Join(where, " AND ")
	out := &UsageSummary{Groups: []UsageGroup{}}
	scan := func(rows *sql.Rows, g *UsageGroup, withKey bool) error {
		var k sql.NullString
		var n [7]sql.NullInt64
		dst := []any{&n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6]}
		if withKey {
			dst = append([]any{&k}, dst...)
		}
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		if k.Valid {
			g.Key = &k.String
		}
		g.InputTokens, g.OutputTokens, g.CacheCreationTokens, g.CacheReadTokens = n[0].Int64, n[1].Int64, n[2].Int64, n[3].Int64
		g.CostNanos, g.Jobs, g.Reports = n[4].Int64, n[5].Int64, n[6].Int64
		return nil
	}
	// The totals, the cache's figures and the groups come from one
	// snapshot: with writes applied between separate queries the groups
	// would not add up to the totals.
	tx, err := m.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, "SELECT "+sums+cond, ps.Args...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		if err := scan(rows, &out.Totals, false); err != nil {
			rows.Close()
			return nil, err
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := cacheStats(ctx, tx, f, out); err != nil {
		return nil, err
	}
	if key == "" {
		return out, nil
	}
	// A key that is not text (a number in a tag) groups by its text.
	order := " ORDER BY SUM(u.cost_nanos) DESC, k"
	if TimeGroupBy(f.GroupBy) {
		order = " ORDER BY k"
	}
	rows, err = tx.QueryContext(ctx, "SELECT CAST("+key+" AS TEXT) AS k, "+sums+cond+" GROUP BY k"+order, ps.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var g UsageGroup
		if err := scan(rows, &g, true); err != nil {
			return nil, err
		}
		out.Groups = append(out.Groups, g)
	}
	return out, rows.Err()
}

func cacheStats(ctx context.Context, tx *sql.Tx, f UsageFilter, out *UsageSummary) error {
	var ps Params
	where := []string{"cache_key IS NOT NULL", "created_at >= " + ps.Add(f.Since)}
	if f.Namespace != "" {
		where = append(where, namespaceCond(f.Namespace, &ps))
	}
	if f.Shards != nil {
		in := make([]string, len(f.Shards))
		for i, sh := range f.Shards {
			in[i] = ps.Add(sh)
		}
		where = append(where, "shard IN ("+strings.Join(in, ",")+")")
	}
	var hits, misses, saved sql.NullInt64
	err := tx.QueryRowContext(ctx, "SELECT SUM(cached_from IS NOT NULL), SUM(cached_from IS NULL), SUM(saved_nanos) FROM jobs WHERE "+
		strings.Join(where, " AND "), ps.Args...).Scan(&hits, &misses, &saved)
	out.Cache = CacheStats{Hits: hits.Int64, Misses: misses.Int64, SavedNanos: saved.Int64}
	return err
}
