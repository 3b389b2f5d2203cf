package mirror

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Filter is a job search (spec 000 "Search and filter"). Every field is
// optional; they combine with AND. Times are Unix nanoseconds (0: unset).
type Filter struct {
	// KnownTotal, when set, is the number of matches (the search skips
	// its count query).
	KnownTotal      *int
	Queue           string
	States          []string
	Priority        *int
	Tags            map[string]string
	PayloadContains string
	PayloadJQ       string
	CreatedAfter    int64
	CreatedBefore   int64
	ScheduledAfter  int64
	ScheduledBefore int64
	StartedAfter    int64
	StartedBefore   int64
	CompletedAfter  int64
	CompletedBefore int64
	ExpireAfter     int64
	ExpireBefore    int64
	WorkerID        string
	HasErrors       *bool
	ErrorContains   string
	BatchID         string
	UniqueKey       string
	AttemptMin      *int
	AttemptMax      *int
	JobIDPrefix     string
	Sort            string // created_at (default), scheduled_at, started_at, completed_at, priority, attempt
	Desc            bool
	Cursor          string
	Limit           int // default 50, at most 1000
}

// Row is one job as the mirror has it.
type Row struct {
	ID          string
	Queue       string
	State       string
	Priority    int
	Attempt     int
	MaxRetries  int
	Payload     json.RawMessage
	Tags        json.RawMessage
	UniqueKey   *string
	BatchID     *string
	ChainID     *string
	WorkerID    *string
	Hostname    *string
	Progress    json.RawMessage
	Result      json.RawMessage
	Reason      *string
	LastError   *string
	ErrorCount  int
	CreatedAt   int64
	ScheduledAt *int64
	StartedAt   *int64
	CompletedAt *int64
	FailedAt    *int64
	ExpireAt    *int64
}

// Page is one page of search results.
type Page struct {
	Jobs     []Row
	Total    int
	Cursor   string // "" when HasMore is false
	HasMore  bool
	Duration time.Duration
}

// ErrBadFilter wraps every invalid-filter error (the gateway answers 400).
var ErrBadFilter = errors.New("invalid filter")

var sortColumns = map[string]string{"created_at": "created_at", "scheduled_at": "scheduled_at", "started_at": "started_at",
	"completed_at": "completed_at", "priority": "priority", "attempt": "attempt"}

// nullableSort are the sort columns that may be NULL (NULLs sort first ascending).
var nullableSort = map[string]bool{"scheduled_at": true, "started_at": true, "completed_at": true}

var validStates = map[string]bool{"pending": true, "scheduled": true, "active": true, "retrying": true, "completed": true,
	"dead": true, "cancelled": true, "held": true}

// where builds the WHERE clause of a filter.
func (f *Filter) where(ps *Params) (string, error) {
	var conds []string
	add := func(c string) { conds = append(conds, c) }
	if f.Queue != "" {
		add("queue = " + ps.Add(f.Queue))
	}
	if len(f.States) > 0 {
		var ph []string
		for _, s := range f.States {
			if !validStates[s] {
				return "", fmt.Errorf("%w: unknown state %q", ErrBadFilter, s)
			}
			ph = append(ph, ps.Add(s))
		}
		add("state IN (" + strings.Join(ph, ",") + ")")
	}
	if f.Priority != nil {
		add("priority = " + ps.Add(*f.Priority))
	}
	keys := make([]string, 0, len(f.Tags))
	for k := range f.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add("json_extract(tags, " + ps.Add(jsonPath([]string{k})) + ") = " + ps.Add(f.Tags[k]))
	}
	if f.PayloadContains != "" {
		add("payload LIKE " + ps.Add("%"+likeEscape(f.PayloadContains)+"%") + ` ESCAPE '\'`)
	}
	if f.PayloadJQ != "" {
		c, err := CompileJQ(f.PayloadJQ, "payload", ps)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrBadFilter, err)
		}
		add(c)
	}
	for _, r := range []struct {
		col           string
		after, before int64
	}{{"created_at", f.CreatedAfter, f.CreatedBefore}, {"scheduled_at", f.ScheduledAfter, f.ScheduledBefore},
		{"started_at", f.StartedAfter, f.StartedBefore}, {"completed_at", f.CompletedAfter, f.CompletedBefore},
		{"expire_at", f.ExpireAfter, f.ExpireBefore}} {
		if r.after != 0 {
			add(r.col + " > " + ps.Add(r.after))
		}
		if r.before != 0 {
			add(r.col + " < " + ps.Add(r.before))
		}
	}
	if f.WorkerID != "" {
		add("worker_id = " + ps.Add(f.WorkerID))
	}
	if f.HasErrors != nil {
		if *f.HasErrors {
			add("error_count > 0")
		} else {
			add("error_count = 0")
		}
	}
	if f.ErrorContains != "" {
		add("id IN (SELECT job_id FROM job_errors WHERE error LIKE " + ps.Add("%"+likeEscape(f.ErrorContains)+"%") + ` ESCAPE '\')`)
	}
	if f.BatchID != "" {
		add("batch_id = " + ps.Add(f.BatchID))
	}
	if f.UniqueKey != "" {
		add("unique_key = " + ps.Add(f.UniqueKey))
	}
	if f.AttemptMin != nil {
		add("attempt >= " + ps.Add(*f.AttemptMin))
	}
	if f.AttemptMax != nil {
		add("attempt <= " + ps.Add(*f.AttemptMax))
	}
	if f.JobIDPrefix != "" {
		// A range on the primary key, not LIKE (which cannot use it): the
		// lookup by ID stays a seek at any table size.
		lo, hi := idPrefixRange(f.JobIDPrefix)
		cond := "id >= " + ps.Add(lo)
		if hi != "" {
			cond += " AND id < " + ps.Add(hi)
		}
		add(cond)
	}
	if len(conds) == 0 {
		return "1", nil
	}
	return strings.Join(conds, " AND "), nil
}

// cursor is the keyset position after the last row of a page.
type cursor struct {
	V  *int64 `json:"v"` // the sort column's value (nil: NULL)
	ID string `json:"id"`
}

const rowColumns = `id, queue, state, priority, attempt, max_retries, payload, tags, unique_key, batch_id, chain_id, worker_id,
 hostname, progress, result, reason, last_error, error_count, created_at, scheduled_at, started_at, completed_at, failed_at, expire_at`

// Search runs a filter against the mirror.
func (m *Mirror) Search(ctx context.Context, f Filter) (*Page, error) {
	start := time.Now()
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 1000 {
		return nil, fmt.Errorf("%w: limit must be 1–1000", ErrBadFilter)
	}
	col := "created_at"
	if f.Sort != "" {
		c, ok := sortColumns[f.Sort]
		if !ok {
			return nil, fmt.Errorf("%w: unknown sort %q", ErrBadFilter, f.Sort)
		}
		col = c
	}
	ps := &Params{}
	where, err := f.where(ps)
	if err != nil {
		return nil, err
	}
	countArgs := append([]any(nil), ps.Args...)
	// Keyset pagination over (sort column, id); NULLs sort first ascending.
	// NOT NULL columns sort bare so an index can deliver the order (a
	// COALESCE would force SQLite to sort every matching row first).
	sortExpr := col
	if nullableSort[col] {
		sortExpr = "COALESCE(" + col + ", -1)"
	}
	page := where
	if f.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		var c cursor
		if err != nil || json.Unmarshal(raw, &c) != nil || c.ID == "" {
			return nil, fmt.Errorf("%w: cursor is not one this endpoint returned", ErrBadFilter)
		}
		v := int64(-1)
		if c.V != nil {
			v = *c.V
		}
		op := ">"
		if f.Desc {
			op = "<"
		}
		vp, ip := ps.Add(v), ps.Add(c.ID)
		// The leading range term lets SQLite seek the index to the cursor
		// instead of scanning every earlier row.
		page += " AND " + sortExpr + " " + op + "= " + vp + " AND (" + sortExpr + " " + op + " " + vp + " OR id " + op + " " + ip + ")"
	}
	dir := "ASC"
	if f.Desc {
		dir = "DESC"
	}
	q := "SELECT " + rowColumns + ", " + sortExpr + " FROM jobs WHERE " + page + " ORDER BY " + sortExpr + " " + dir + ", id " + dir + " LIMIT " + ps.Add(f.Limit+1)
	rows, err := m.rdb.QueryContext(ctx, q, ps.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := &Page{}
	var lastSort []int64
	for rows.Next() {
		var r Row
		var payload, tags, progress, result sql.NullString
		var sortV int64
		if err := rows.Scan(&r.ID, &r.Queue, &r.State, &r.Priority, &r.Attempt, &r.MaxRetries, &payload, &tags, &r.UniqueKey,
			&r.BatchID, &r.ChainID, &r.WorkerID, &r.Hostname, &progress, &result, &r.Reason, &r.LastError, &r.ErrorCount,
			&r.CreatedAt, &r.ScheduledAt, &r.StartedAt, &r.CompletedAt, &r.FailedAt, &r.ExpireAt, &sortV); err != nil {
			return nil, err
		}
		r.Payload, r.Tags, r.Progress, r.Result = rawJSON(payload), rawJSON(tags), rawJSON(progress), rawJSON(result)
		out.Jobs = append(out.Jobs, r)
		lastSort = append(lastSort, sortV)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out.Jobs) > f.Limit {
		out.Jobs, out.HasMore = out.Jobs[:f.Limit], true
		last := out.Jobs[f.Limit-1]
		v := lastSort[f.Limit-1]
		c := cursor{ID: last.ID}
		if v != -1 {
			c.V = &v
		}
		b, _ := json.Marshal(c)
		out.Cursor = base64.RawURLEncoding.EncodeToString(b)
	}
	// A first page that holds every match is its own total: skip the
	// count, which for unindexed filters is a second full scan. A caller
	// that knows the total (queue/state counts kept by the state machine)
	// spares the count too.
	if f.Cursor == "" && !out.HasMore {
		out.Total = len(out.Jobs)
	} else if f.KnownTotal != nil {
		out.Total = *f.KnownTotal
	} else if err := m.rdb.QueryRowContext(ctx, "SELECT count(*) FROM jobs WHERE "+where, countArgs...).Scan(&out.Total); err != nil {
		return nil, err
	}
	out.Duration = time.Since(start)
	return out, nil
}

func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// ParseTime reads an RFC 3339 time of a filter (for the gateway).
func ParseTime(field, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %q is not an RFC 3339 time", ErrBadFilter, field, s)
	}
	return t.UnixNano(), nil
}

var _ = strconv.Itoa

// idPrefixRange turns a job-ID prefix into the key range [lo, hi) holding
// every ID that starts with it (hi is "" when unbounded). The ULID part of
// an ID is upper case, so a prefix typed in lower case still matches.
func idPrefixRange(p string) (lo, hi string) {
	if rest, ok := strings.CutPrefix(p, "job_"); ok {
		if i := strings.IndexByte(rest, '_'); i >= 0 {
			p = "job_" + rest[:i+1] + strings.ToUpper(rest[i+1:])
		}
	}
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return p, string(b[:i+1])
		}
	}
	return p, ""
}
