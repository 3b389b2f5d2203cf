package mirror

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/corvohq/corvo/router"
)

// Filter is a job search (spec 000 "Search and filter"). Every field is
// optional; they combine with AND. Times are Unix nanoseconds (0: unset).
type Filter struct {
	// KnownTotal, when set, is the number of matches (the search skips
	// its count query).
	KnownTotal *int
	// Namespace, when set, restricts the search to the queues of one
	// namespace (router.QueueInNamespace; Queue is then a stored name
	// of it). "": every queue.
	Namespace       string
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
	// DependsOn: the jobs enqueued with this job in their depends_on
	// (its children).
	DependsOn string
	// Model: the jobs with a usage record of that model (any attempt).
	Model string
	// MinCostNanos: the jobs whose usage records add up to at least this
	// cost (1e-9 USD); nil: unset. A job without usage never matches.
	MinCostNanos *int64
	UniqueKey    string
	// RouteTarget: routed jobs whose current model is this one.
	RouteTarget string
	AttemptMin  *int
	AttemptMax  *int
	JobIDPrefix string
	// Shards restricts the search to these shards (0-based); nil: every
	// shard the mirror holds; empty and non-nil: none.
	Shards []int
	Sort   string // created_at (default), scheduled_at, started_at, completed_at, priority, attempt
	Desc   bool
	Cursor string
	Limit  int // default 50 (DefaultLimit), at most 1000 (MaxLimit)
}

// DefaultLimit and MaxLimit bound a page.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// PagePayloadMax is the largest payload a search page carries: a larger
// one is left out of the page (Row.Payload nil, Row.PayloadBytes its
// size) and never read from disk; GET /api/v1/jobs/{id} has it.
const PagePayloadMax = 8 << 10

// Row is one job as the mirror has it.
type Row struct {
	ID         string
	Queue      string
	State      string
	Priority   int
	Attempt    int
	MaxRetries int
	// Payload is nil when it is over PagePayloadMax (left out of pages).
	Payload json.RawMessage
	// PayloadBytes is the payload's size in bytes (as stored).
	PayloadBytes int
	Tags         json.RawMessage
	UniqueKey    *string
	BatchID      *string
	ChainID      *string
	WorkerID     *string
	Hostname     *string
	Progress     json.RawMessage
	Result       json.RawMessage
	Reason       *string
	LastError    *string
	ErrorCount   int
	CreatedAt    int64
	ScheduledAt  *int64
	StartedAt    *int64
	CompletedAt  *int64
	FailedAt     *int64
	ExpireAt     *int64
}

// Page is one page of search results.
type Page struct {
	Jobs []Row
	// SortValues holds each row's value of the sort expression (-1 for a
	// NULL time): with the row's ID, its keyset position (CursorAfter), in
	// the order of the page (the sort value, then the ID, both ascending
	// or both descending).
	SortValues []int64
	Total      int
	Cursor     string // "" when HasMore is false
	HasMore    bool
	// Partial: the context ended before the search finished. Jobs are the
	// matches found by then, in order (maybe fewer than the limit, at
	// least one), HasMore is true and Cursor continues after the last of
	// them; Total is only a lower bound.
	Partial  bool
	Duration time.Duration
}

// ErrBadFilter wraps every invalid-filter error (the gateway answers 400).
var ErrBadFilter = errors.New("invalid filter")

// DeadlineError is Search's error when its context ended before it found
// a single match: Unindexed names the filter's criteria that no index
// serves (the rows were tested one by one), empty when every criterion
// has one (the search was slow for another reason: load).
type DeadlineError struct {
	Unindexed []string
	Err       error // the context's error
}

func (e *DeadlineError) Error() string {
	if len(e.Unindexed) == 0 {
		return "the search found nothing before its deadline: " + e.Err.Error()
	}
	return "the search found nothing before its deadline: " + strings.Join(e.Unindexed, ", ") + " tested job by job: " + e.Err.Error()
}

func (e *DeadlineError) Unwrap() error { return e.Err }

// Unindexed names the filter's criteria no index of the mirror serves:
// each is tested on every row the indexed criteria (queue, state,
// created_at, batch_id, depends_on, unique_key, job_id_prefix) leave.
func (f *Filter) Unindexed() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(f.PayloadJQ != "", "payload_jq")
	add(f.PayloadContains != "", "payload_contains")
	add(len(f.Tags) > 0, "tags")
	add(f.ErrorContains != "", "error_contains")
	add(f.Model != "", "model")
	add(f.MinCostNanos != nil, "min_cost_usd")
	add(f.WorkerID != "", "worker_id")
	add(f.HasErrors != nil, "has_errors")
	add(f.AttemptMin != nil || f.AttemptMax != nil, "attempt_min/attempt_max")
	add(f.Priority != nil, "priority")
	add(f.ScheduledAfter != 0 || f.ScheduledBefore != 0, "scheduled_after/scheduled_before")
	add(f.StartedAfter != 0 || f.StartedBefore != 0, "started_after/started_before")
	add(f.CompletedAfter != 0 || f.CompletedBefore != 0, "completed_after/completed_before")
	add(f.ExpireAfter != 0 || f.ExpireBefore != 0, "expire_after/expire_before")
	return out
}

var sortColumns = map[string]string{"created_at": "created_at", "scheduled_at": "scheduled_at", "started_at": "started_at",
	"completed_at": "completed_at", "priority": "priority", "attempt": "attempt"}

// nullableSort are the sort columns that may be NULL (NULLs sort first ascending).
var nullableSort = map[string]bool{"scheduled_at": true, "started_at": true, "completed_at": true}

var validStates = map[string]bool{"pending": true, "scheduled": true, "active": true, "retrying": true, "completed": true,
	"dead": true, "cancelled": true, "held": true}

// where builds the WHERE clause of a filter over a mirror of the given
// shard count.
func (f *Filter) where(ps *Params, shards int) (string, error) {
	var conds []string
	add := func(c string) { conds = append(conds, c) }
	if f.Shards != nil {
		c, err := shardCond(f.Shards, shards, ps)
		if err != nil {
			return "", err
		}
		if c != "" {
			add(c)
		}
	}
	if f.Queue != "" {
		add("queue = " + ps.Add(f.Queue))
	} else if f.Namespace != "" {
		add(namespaceCond(f.Namespace, ps))
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
		// A payload kept as a prefix (payload_size set) is not JSON: it
		// never matches, and CASE keeps SQLite from parsing it.
		add("CASE WHEN payload_size IS NULL THEN (" + c + ") END")
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
	if f.DependsOn != "" {
		add("id IN (SELECT job_id FROM job_deps WHERE dep_id = " + ps.Add(f.DependsOn) + ")")
	}
	// The usage criteria read job_usage, whose only index is by time:
	// every record is read (Unindexed names them).
	if f.Model != "" {
		add("id IN (SELECT job_id FROM job_usage WHERE model = " + ps.Add(f.Model) + ")")
	}
	if f.MinCostNanos != nil {
		if *f.MinCostNanos < 0 {
			return "", fmt.Errorf("%w: min_cost_usd must not be negative", ErrBadFilter)
		}
		add("id IN (SELECT job_id FROM job_usage GROUP BY job_id HAVING SUM(cost_nanos) >= " + ps.Add(*f.MinCostNanos) + ")")
	}
	if f.UniqueKey != "" {
		add("unique_key = " + ps.Add(f.UniqueKey))
	}
	if f.RouteTarget != "" {
		add("route_target = " + ps.Add(f.RouteTarget))
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

// shardCond restricts a search to some shards by their job IDs, which
// start with job_<shard>_: one ID range per shard, or the complement of the
// ranges of the shards left out when that is shorter. The ranges are
// written with unary + so that SQLite never drives the query from them:
// the plan stays the one the other terms choose (a primary-key range
// sorted afterwards was measured 1,000 times slower than walking the
// created_at index for a page), and as every index of the jobs table
// ends with the ID, the test needs no table lookup (counts stay on
// covering indexes). It returns "" when the shards are every shard.
func shardCond(list []int, shards int, ps *Params) (string, error) {
	in := make([]bool, shards)
	n := 0
	for _, sh := range list {
		if sh < 0 || sh >= shards {
			return "", fmt.Errorf("%w: no shard %d", ErrBadFilter, sh)
		}
		if !in[sh] {
			in[sh] = true
			n++
		}
	}
	switch n {
	case 0:
		return "0", nil
	case shards:
		return "", nil
	}
	want := true
	if n > shards/2 {
		want = false // name the fewer shards: those left out
	}
	var ranges []string
	for sh := 0; sh < shards; sh++ {
		if in[sh] == want {
			lo, hi := shardIDRange(sh)
			ranges = append(ranges, "(+id >= "+ps.Add(lo)+" AND +id < "+ps.Add(hi)+")")
		}
	}
	c := "(" + strings.Join(ranges, " OR ") + ")"
	if !want {
		c = "NOT " + c
	}
	return c, nil
}

// shardIDRange is the range [lo, hi) of the job IDs of a shard.
func shardIDRange(sh int) (lo, hi string) {
	lo = "job_" + strconv.Itoa(sh) + "_"
	return lo, lo[:len(lo)-1] + "`" // '`' follows '_'
}

// cursor is the keyset position after the last row of a page.
type cursor struct {
	V  *int64 `json:"v"` // the sort column's value (nil: NULL)
	ID string `json:"id"`
}

// CursorAfter is the cursor of the position after the row with sort value
// v (Page.SortValues) and ID id. Cursors are keyset positions, valid on
// every node: a page merged from several mirrors continues from its last
// row's cursor on each of them.
func CursorAfter(v int64, id string) string {
	c := cursor{ID: id}
	if v != -1 {
		c.V = &v
	}
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// rowColumns are a page's columns; the payload only when it is small
// (octet_length reads the record header, not the payload), and never a
// payload the mirror keeps only the first bytes of (payload_size set:
// that is its whole size).
var rowColumns = `id, queue, state, priority, attempt, max_retries,
 CASE WHEN payload_size IS NULL AND octet_length(payload) <= ` + strconv.Itoa(PagePayloadMax) + ` THEN payload END,
 COALESCE(payload_size, octet_length(payload)), tags, unique_key, batch_id, chain_id, worker_id,
 hostname, progress, result, reason, last_error, error_count, created_at, scheduled_at, started_at, completed_at, failed_at, expire_at`

// query is a checked filter compiled to SQL.
type query struct {
	limit     int
	where     string // the filter alone (for the count)
	countArgs []any
	sql       string // the page
	args      []any
}

// Check reports whether the filter is valid for a mirror of the given
// shard count (ErrBadFilter) without running it.
func (f *Filter) Check(shards int) error {
	_, err := f.compile(shards)
	return err
}

func (f *Filter) compile(shards int) (*query, error) {
	q := &query{limit: f.Limit}
	if q.limit <= 0 {
		q.limit = DefaultLimit
	}
	if q.limit > MaxLimit {
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
	where, err := f.where(ps, shards)
	if err != nil {
		return nil, err
	}
	q.where, q.countArgs = where, append([]any(nil), ps.Args...)
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
	q.sql = "SELECT " + rowColumns + ", " + sortExpr + " FROM jobs WHERE " + page + " ORDER BY " + sortExpr + " " + dir + ", id " + dir + " LIMIT " + ps.Add(q.limit+1)
	q.args = ps.Args
	return q, nil
}

// Search runs a filter against the mirror, until ctx ends: then it
// answers the matches found so far as a Partial page, or a
// *DeadlineError when there is none.
func (m *Mirror) Search(ctx context.Context, f Filter) (*Page, error) {
	start := time.Now()
	q, err := f.compile(m.shards)
	if err != nil {
		return nil, err
	}
	out := &Page{}
	if err := m.scan(ctx, q, out); err != nil {
		if ctx.Err() == nil {
			return nil, err
		}
		if len(out.Jobs) == 0 {
			return nil, &DeadlineError{Unindexed: f.Unindexed(), Err: ctx.Err()}
		}
		// The matches found so far, in order: the cursor after the last
		// one continues the search without a gap.
		if len(out.Jobs) > q.limit {
			out.Jobs, out.SortValues = out.Jobs[:q.limit], out.SortValues[:q.limit]
		}
		last := len(out.Jobs) - 1
		out.Partial, out.HasMore = true, true
		out.Cursor = CursorAfter(out.SortValues[last], out.Jobs[last].ID)
		out.Total = len(out.Jobs)
		out.Duration = time.Since(start)
		return out, nil
	}
	if len(out.Jobs) > q.limit {
		out.Jobs, out.SortValues, out.HasMore = out.Jobs[:q.limit], out.SortValues[:q.limit], true
		out.Cursor = CursorAfter(out.SortValues[q.limit-1], out.Jobs[q.limit-1].ID)
	}
	// A first page that holds every match is its own total: skip the
	// count, which for unindexed filters is a second full scan. A caller
	// that knows the total (queue/state counts kept by the state machine)
	// spares the count too. A count the deadline cuts leaves the page
	// whole and its total a lower bound (Partial).
	if f.Cursor == "" && !out.HasMore {
		out.Total = len(out.Jobs)
	} else if f.KnownTotal != nil {
		out.Total = *f.KnownTotal
	} else if err := m.rdb.QueryRowContext(ctx, "SELECT count(*) FROM jobs WHERE "+q.where, q.countArgs...).Scan(&out.Total); err != nil {
		if ctx.Err() == nil {
			return nil, err
		}
		out.Total, out.Partial = len(out.Jobs)+1, true // at least one more: HasMore
	}
	out.Duration = time.Since(start)
	return out, nil
}

// scan runs a page's query into out, stopping when ctx ends (checked
// after each row, so the rows kept are exactly those read before).
func (m *Mirror) scan(ctx context.Context, q *query, out *Page) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rows, err := m.rdb.QueryContext(ctx, q.sql, q.args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r Row
		var payload, tags, progress, result sql.NullString
		var sortV int64
		if err := rows.Scan(&r.ID, &r.Queue, &r.State, &r.Priority, &r.Attempt, &r.MaxRetries, &payload, &r.PayloadBytes, &tags, &r.UniqueKey,
			&r.BatchID, &r.ChainID, &r.WorkerID, &r.Hostname, &progress, &result, &r.Reason, &r.LastError, &r.ErrorCount,
			&r.CreatedAt, &r.ScheduledAt, &r.StartedAt, &r.CompletedAt, &r.FailedAt, &r.ExpireAt, &sortV); err != nil {
			return err
		}
		r.Payload, r.Tags, r.Progress, r.Result = rawJSON(payload), rawJSON(tags), rawJSON(progress), rawJSON(result)
		out.Jobs = append(out.Jobs, r)
		out.SortValues = append(out.SortValues, sortV)
		if m.testRowRead != nil {
			m.testRowRead(len(out.Jobs))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return rows.Err()
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
		// A date alone is its midnight, UTC.
		if t, err = time.Parse(time.DateOnly, s); err != nil {
			return 0, fmt.Errorf("%w: %s: %q is not an RFC 3339 time or a date (2006-01-02)", ErrBadFilter, field, s)
		}
	}
	// Nanoseconds since 1970 span the years 1678 to 2262: a bound beyond
	// them is the farthest one (UnixNano would wrap around).
	switch {
	case t.After(maxTime):
		return math.MaxInt64, nil
	case t.Before(minTime):
		return math.MinInt64 + 1, nil
	}
	return t.UnixNano(), nil
}

var minTime, maxTime = time.Unix(0, math.MinInt64+1), time.Unix(0, math.MaxInt64)

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

// namespaceCond selects the stored queue names of namespace ns: the
// default namespace's have no '/'; another's are "<ns>/…", a range the
// (queue, state, created_at) index serves ('0' follows '/').
func namespaceCond(ns string, ps *Params) string {
	if ns == router.DefaultNamespace {
		return "instr(queue, '/') = 0"
	}
	return "(queue > " + ps.Add(ns+"/") + " AND queue < " + ps.Add(ns+"0") + ")"
}
