package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/internal/membudget"
	"github.com/corvohq/corvo/statemachine"
)

// fakeSource is a shard with nothing in Pebble yet.
type fakeSource struct{ jobs []statemachine.JobView }

func (fakeSource) Shards() int    { return 1 }
func (fakeSource) Hosts(int) bool { return true }
func (f fakeSource) Read(_ int, q interface{}) (interface{}, error) {
	switch q.(type) {
	case statemachine.OpenedAtQuery:
		return uint64(0), nil
	case statemachine.ScanJobsQuery:
		return statemachine.ScanPage{Jobs: f.jobs, Index: 1}, nil
	}
	return nil, fmt.Errorf("unexpected %T", q)
}

func openTest(t *testing.T) *Mirror {
	t.Helper()
	m, err := Open(Config{Path: filepath.Join(t.TempDir(), "mirror.db"), Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	require.NoError(t, m.Start(fakeSource{}))
	t.Cleanup(m.Close)
	return m
}

var base = time.Date(2026, 2, 11, 10, 0, 0, 0, time.UTC).UnixNano()

func view(i int, queue, state, payload string) *statemachine.JobView {
	st, _ := statemachine.ParseState(state)
	return &statemachine.JobView{
		Job:   statemachine.Job{ID: fmt.Sprintf("job_0_%026d", i), Queue: queue, Payload: []byte(payload), JobOptions: statemachine.JobOptions{Priority: statemachine.PriorityNormal, Tags: []byte(`{"tenant":"acme"}`)}, CreatedAt: base + int64(i)*1e9},
		State: statemachine.JobState{State: st, Attempt: uint32(i % 3)},
	}
}

func feed(t *testing.T, m *Mirror, index uint64, changes ...statemachine.JobChange) {
	t.Helper()
	m.Applied(&statemachine.AppliedInfo{ShardID: 1, Index: index, Changes: changes})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Caught(ctx))
}

func ids(p *Page) []string {
	var out []string
	for _, r := range p.Jobs {
		out = append(out, r.ID[len(r.ID)-3:])
	}
	return out
}

func TestMirrorSearchAndJQ(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	payloads := []string{
		`{"email":"user@example.com","amount":150,"tags":["vip","new"],"metadata":{"region":"us-east"},"template":"welcome-1","items":[1,2,3,4,5,6],"legacy":true}`,
		`{"email":"other@example.com","amount":50,"tags":["new"],"metadata":{"region":"eu-west"},"template":"reset","items":[1],"legacy":false}`,
		`{"email":"x@y.z","amount":"150","note":"100% off_sale"}`,
		`[1,2,3]`,
	}
	var ch []statemachine.JobChange
	for i, p := range payloads {
		v := view(i+1, "emails.send", "dead", p)
		ch = append(ch, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State, NewErrors: []statemachine.JobError{{Attempt: 1, Error: fmt.Sprintf("SMTP timeout %d", i), At: base}}})
	}
	other := view(9, "other", "pending", `{"amount":500}`)
	ch = append(ch, statemachine.JobChange{ID: other.Job.ID, Job: &other.Job, State: other.State})
	feed(t, m, 5, ch...)

	for _, c := range []struct {
		jq   string
		want []string
	}{
		{`.email == "user@example.com"`, []string{"001"}},
		{`.amount > 100`, []string{"001", "009"}},
		{`.amount >= 150 and .legacy == true`, []string{"001"}},
		{`.tags | contains("vip")`, []string{"001"}},
		{`.metadata.region == "us-east"`, []string{"001"}},
		{`.template | startswith("welcome")`, []string{"001"}},
		{`.template | endswith("set")`, []string{"002"}},
		{`.items | length > 5`, []string{"001"}},
		{`.email | contains("example")`, []string{"001", "002"}},
		{`.legacy`, []string{"001"}},
		{`not .legacy`, []string{"002", "003", "004", "009"}},
		{`(.amount < 100) or (.metadata.region == "us-east")`, []string{"001", "002"}},
		{`.legacy == null`, []string{}},
		{`.note | contains("100% off_")`, []string{"003"}},
		{`."email" == "x@y.z"`, []string{"003"}},
	} {
		p, err := m.Search(context.Background(), Filter{PayloadJQ: c.jq})
		require.NoError(t, err, c.jq)
		got := ids(p)
		if got == nil {
			got = []string{}
		}
		require.Equal(t, c.want, got, c.jq)
	}

	p, err := m.Search(context.Background(), Filter{Queue: "emails.send", States: []string{"dead"}, ErrorContains: "SMTP timeout 1", Tags: map[string]string{"tenant": "acme"}})
	require.NoError(t, err)
	require.Equal(t, []string{"002"}, ids(p))
	p, err = m.Search(context.Background(), Filter{PayloadContains: "100% off_"})
	require.NoError(t, err)
	require.Equal(t, []string{"003"}, ids(p), "% and _ match themselves")
	p, err = m.Search(context.Background(), Filter{PayloadContains: "%"})
	require.NoError(t, err)
	require.Equal(t, []string{"003"}, ids(p))
}

// TestMirrorJQRejectsAndNeverInjects: anything outside the subset is a
// clear error, and quotes, semicolons and SQL words are only ever data.
func TestMirrorJQRejectsAndNeverInjects(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	v := view(1, "q", "pending", `{"name":"x'; DROP TABLE jobs; --"}`)
	feed(t, m, 2, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	for _, bad := range []string{`.a = 1`, `.a == `, `.a | keys`, `.a[0]`, `select(.a)`, `.a == 1 ;`, `.a == "x" or`, `(.a == 1`, `.a | contains(.b)`, `$__loc__`, `.a == "unterminated`} {
		_, err := m.Search(context.Background(), Filter{PayloadJQ: bad})
		require.ErrorIs(t, err, ErrBadFilter, bad)
	}
	for _, data := range []string{`.name == "x'; DROP TABLE jobs; --"`, `."a'b" == "1"`, `.name | contains("'); DELETE FROM jobs; --")`} {
		_, err := m.Search(context.Background(), Filter{PayloadJQ: data})
		require.NoError(t, err, data)
	}
	p, err := m.Search(context.Background(), Filter{PayloadJQ: `.name == "x'; DROP TABLE jobs; --"`})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1, "the table is still there and the quote matched as data")
}

// TestMirrorPaginationWhileAdding walks 1,234 jobs in pages of 100 while
// more jobs arrive: no duplicates, no gaps.
func TestMirrorPaginationWhileAdding(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	var ch []statemachine.JobChange
	for i := 1; i <= 1234; i++ {
		v := view(i, "page", "pending", `{}`)
		ch = append(ch, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	}
	feed(t, m, 10, ch...)
	seen := map[string]bool{}
	cursor := ""
	for n := 0; ; n++ {
		p, err := m.Search(context.Background(), Filter{Queue: "page", Limit: 100, Cursor: cursor})
		require.NoError(t, err)
		for _, r := range p.Jobs {
			require.False(t, seen[r.ID], "duplicate %s", r.ID)
			seen[r.ID] = true
		}
		// Newer jobs arrive between pages (they sort after the cursor).
		v := view(2000+n, "page", "pending", `{}`)
		feed(t, m, uint64(11+n), statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
		if !p.HasMore {
			break
		}
		cursor = p.Cursor
	}
	for i := 1; i <= 1234; i++ {
		require.True(t, seen[fmt.Sprintf("job_0_%026d", i)], "gap at %d", i)
	}
}

func FuzzCompileJQ(f *testing.F) {
	for _, s := range []string{`.a == 1`, `.a.b | startswith("x")`, `.items | length > 5`, `not (.a or .b)`, `."q\"k" == "v"`, `.a == "x'; --"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		ps := &Params{}
		sqlText, err := CompileJQ(expr, "payload", ps)
		if err != nil {
			return
		}
		// Whatever compiles carries every value as a parameter: the SQL
		// text has no quote, semicolon or comment of the expression's.
		require.NotContains(t, sqlText, ";")
		require.NotContains(t, sqlText, "--")
		require.NotContains(t, sqlText, `"`)
		for i := 0; i < len(sqlText); i++ {
			if sqlText[i] == '\'' {
				// the only quoted SQL literals are the compiler's own
				require.Regexp(t, `^'(null|false|true|text|array|object|integer|real|\\)'`, sqlText[i:], sqlText)
				j := i + 1
				for j < len(sqlText) && sqlText[j] != '\'' {
					j++
				}
				i = j
			}
		}
	})
}

func TestIDPrefixRange(t *testing.T) {
	for _, c := range []struct{ in, lo, hi string }{
		{"job_", "job_", "job`"},
		{"job_3_01jd", "job_3_01JD", "job_3_01JE"},
		{"job_12_", "job_12_", "job_12`"},
		{"x\xff", "x\xff", "y"},
		{"\xff\xff", "\xff\xff", ""},
	} {
		lo, hi := idPrefixRange(c.in)
		if lo != c.lo || hi != c.hi {
			t.Errorf("idPrefixRange(%q) = %q, %q; want %q, %q", c.in, lo, hi, c.lo, c.hi)
		}
	}
}

// TestMirrorSearchNamespace: a namespace filter sees its own queues only —
// never a longer namespace sharing its prefix, never the default one's.
func TestMirrorSearchNamespace(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	var ch []statemachine.JobChange
	for i, q := range []string{"emails", "acme/emails", "acme/other", "acmex/emails", "acme0/x"} {
		v := view(i+1, q, "pending", `{}`)
		ch = append(ch, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	}
	feed(t, m, 5, ch...)
	for ns, want := range map[string][]string{
		"default": {"001"},
		"acme":    {"002", "003"},
		"acmex":   {"004"},
		"acme0":   {"005"},
		"nobody":  nil,
	} {
		p, err := m.Search(context.Background(), Filter{Namespace: ns})
		require.NoError(t, err, ns)
		require.Equal(t, want, ids(p), ns)
		require.Equal(t, len(want), p.Total, ns)
	}
}

// openedSource is fakeSource whose Pebble opened at a given index.
type openedSource struct {
	fakeSource
	opened uint64
}

func (o openedSource) Read(sh int, q interface{}) (interface{}, error) {
	if _, ok := q.(statemachine.OpenedAtQuery); ok {
		return o.opened, nil
	}
	return o.fakeSource.Read(sh, q)
}

// TestMirrorStartAheadOfPebble: after a crash Pebble opens at its last
// flush, behind what the mirror wrote; the replayed entries bring their
// changes again, so the mirror keeps its rows and is not rebuilt. A
// mirror behind Pebble missed changes: it is rebuilt (here from a Pebble
// that holds no job, so the rows go).
func TestMirrorStartAheadOfPebble(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mirror.db")
	m, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	require.NoError(t, m.Start(fakeSource{}))
	v := view(1, "q", "pending", `{}`)
	feed(t, m, 7, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	m.Close()

	count := func(m *Mirror) int {
		t.Helper()
		p, err := m.Search(context.Background(), Filter{Queue: "q"})
		require.NoError(t, err)
		return len(p.Jobs)
	}
	for _, c := range []struct {
		opened uint64
		rows   int
	}{{3, 1}, {7, 1}, {9, 0}} {
		m, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
		require.NoError(t, err)
		require.NoError(t, m.Start(openedSource{opened: c.opened}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, m.Caught(ctx))
		cancel()
		require.Equal(t, c.rows, count(m), "Pebble opened at %d, the mirror at 7", c.opened)
		m.Close()
	}
}

func TestParseTimeBounds(t *testing.T) {
	t.Parallel()
	v, err := ParseTime("created_after", "2026-02-10")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC).UnixNano(), v, "a date is its midnight UTC")
	v, err = ParseTime("created_after", "2999-02-10T00:00:00Z")
	require.NoError(t, err)
	require.Equal(t, int64(math.MaxInt64), v, "past 2262: the farthest bound, not a wrapped one")
	v, err = ParseTime("created_before", "1066-10-14T00:00:00Z")
	require.NoError(t, err)
	require.Equal(t, int64(math.MinInt64+1), v)
	_, err = ParseTime("created_after", "yesterday")
	require.ErrorIs(t, err, ErrBadFilter)
}

// TestMirrorBufferWithinMemoryBudget: Updates waiting to be written are
// accounted against the memory budget and given back once written; one
// that does not fit is dropped like one that finds the queue full (the
// shard is rebuilt from Pebble).
func TestMirrorBufferWithinMemoryBudget(t *testing.T) {
	b := membudget.New(membudget.Plan{Total: 1 << 30, Pool: 64 << 10})
	acct := b.Account("test_mirror_buffer", 64<<10)
	m, err := Open(Config{Path: filepath.Join(t.TempDir(), "mirror.db"), Logger: zerolog.Nop(), Shards: 1, Buffer: acct})
	require.NoError(t, err)
	require.NoError(t, m.Start(fakeSource{}))
	t.Cleanup(m.Close)

	dropped := m.dropped.Get()
	v1 := view(1, "q", "pending", `{}`)
	feed(t, m, 1, statemachine.JobChange{ID: v1.Job.ID, Job: &v1.Job, State: v1.State})
	require.Zero(t, acct.Used(), "written: given back")
	require.Equal(t, dropped, m.dropped.Get())

	big := view(2, "q", "pending", `"`+strings.Repeat("x", 64<<10)+`"`)
	m.Applied(&statemachine.AppliedInfo{ShardID: 1, Index: 2, Changes: []statemachine.JobChange{{ID: big.Job.ID, Job: &big.Job, State: big.State}}})
	require.Equal(t, dropped+1, m.dropped.Get(), "over the budget: dropped")
	require.Zero(t, acct.Used())
}

// The node's quiet release closes the idle read connections and frees the
// writer's caches; reads and writes go on as before.
func TestMirrorReleaseMemory(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	var ch []statemachine.JobChange
	for i := 1; i <= 40; i++ {
		v := view(i, "rel", "pending", `{"n":1}`)
		ch = append(ch, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	}
	feed(t, m, 1, ch[:20]...)
	p, err := m.Search(context.Background(), Filter{Queue: "rel"})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 20)
	require.Positive(t, m.rdb.Stats().Idle, "the search's connection waits idle")
	m.ReleaseMemory()
	require.Zero(t, m.rdb.Stats().Idle)
	m.ReleaseMemory() // a second ask while one is pending is dropped, not blocked on
	feed(t, m, 2, ch[20:]...)
	p, err = m.Search(context.Background(), Filter{Queue: "rel", Limit: 100})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 40)
}

// TestMirrorReplacesAnOlderSchema: a mirror file of an older schema (here
// version 8, whose jobs table was WITHOUT ROWID) is replaced by one of the
// current schema, and its rows are rebuilt from the shard.
func TestMirrorReplacesAnOlderSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mirror.db")
	old, err := sql.Open("sqlite3", "file:"+path)
	require.NoError(t, err)
	// Version 8's tables: today's, but jobs WITHOUT ROWID and its
	// indexes without the ID (nor payload_size).
	v8 := strings.NewReplacer("TEXT PRIMARY KEY NOT NULL,", "TEXT PRIMARY KEY,",
		"payload          TEXT NOT NULL\n);", "payload          TEXT NOT NULL\n) WITHOUT ROWID;",
		", id);", ");", ", id, payload_size);", ");", ", id) WHERE", ") WHERE").Replace(schema)
	require.Contains(t, v8, "WITHOUT ROWID;\nCREATE INDEX idx_jobs_queue_state ON jobs(queue, state, created_at);")
	_, err = old.Exec(v8 + `INSERT INTO jobs (id, shard, idx, gen, queue, state, priority, attempt, max_retries, error_count, created_at, payload)
 VALUES ('job_0_stale', 0, 1, 0, 'q', 'pending', 2, 0, 3, 0, 1, '{}');
PRAGMA user_version = 8;`)
	require.NoError(t, err)
	require.NoError(t, old.Close())

	m, err := Open(Config{Path: path, Logger: zerolog.Nop(), Shards: 1})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	v := view(1, "q", "pending", `{"a":1}`)
	require.NoError(t, m.Start(openedSource{fakeSource: fakeSource{jobs: []statemachine.JobView{*v}}, opened: 5}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Caught(ctx))
	p, err := m.Search(ctx, Filter{})
	require.NoError(t, err)
	require.Equal(t, []string{v.Job.ID}, func() (out []string) {
		for _, r := range p.Jobs {
			out = append(out, r.ID)
		}
		return out
	}(), "the old file's row is gone, the shard's job is there")
	var version int
	require.NoError(t, m.db.QueryRow(`PRAGMA user_version`).Scan(&version))
	require.Equal(t, schemaVersion, version)
	var ddl string
	require.NoError(t, m.db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'jobs'`).Scan(&ddl))
	require.NotContains(t, ddl, "WITHOUT ROWID", "jobs is a rowid table")
}
