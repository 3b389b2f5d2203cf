package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// TestMirrorKeepsPayloadPrefix: with PayloadMax 16, a longer payload is
// stored as its first 16 bytes (cut at a whole character) with its full
// size; a search page omits it (however small the prefix) and reports the
// full size; payload_contains sees the prefix only; payload_jq never
// matches a prefix (and does not fail on it), while short payloads behave
// as before.
func TestMirrorKeepsPayloadPrefix(t *testing.T) {
	t.Parallel()
	long := `{"kind":"big","é":"` + strings.Repeat("x", 200) + `","tail":"needle"}`
	short := `{"kind":"small"}`
	vl, vs := view(1, "p", "pending", long), view(2, "p", "pending", short)
	m, err := Open(Config{Path: filepath.Join(t.TempDir(), "mirror.db"), Logger: zerolog.Nop(), Shards: 1, PayloadMax: 16})
	require.NoError(t, err)
	require.NoError(t, m.Start(fakeSource{}))
	t.Cleanup(m.Close)
	feed(t, m, 3, statemachine.JobChange{ID: vl.Job.ID, Job: &vl.Job, State: vl.State}, statemachine.JobChange{ID: vs.Job.ID, Job: &vs.Job, State: vs.State})

	stored := map[string][2]any{}
	rows, err := m.rdb.Query(`SELECT id, payload, payload_size FROM jobs`)
	require.NoError(t, err)
	for rows.Next() {
		var id, p string
		var size sql.NullInt64
		require.NoError(t, rows.Scan(&id, &p, &size))
		stored[id[len(id)-1:]] = [2]any{p, size.Int64}
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	// 16 bytes would split the two-byte "é" (bytes 16–17): cut before it.
	require.Equal(t, [2]any{`{"kind":"big","`, int64(len(long))}, stored["1"])
	require.Equal(t, [2]any{short, int64(0)}, stored["2"], "whole: no size")

	search := func(f Filter) map[string]string {
		t.Helper()
		p, err := m.Search(context.Background(), f)
		require.NoError(t, err)
		out := map[string]string{}
		for _, r := range p.Jobs {
			out[r.ID[len(r.ID)-1:]] = fmt.Sprintf("%s/%d", r.Payload, r.PayloadBytes)
		}
		return out
	}
	require.Equal(t, map[string]string{"1": fmt.Sprintf("/%d", len(long)), "2": fmt.Sprintf("%s/%d", short, len(short))}, search(Filter{Queue: "p"}),
		"a cut payload is left out of pages, with its whole size")
	require.Equal(t, []string{"1"}, keysOf(search(Filter{PayloadContains: `"big"`})), "the prefix is searched")
	require.Empty(t, search(Filter{PayloadContains: "needle"}), "past the prefix")
	require.Equal(t, []string{"2"}, keysOf(search(Filter{PayloadJQ: `.kind != null`})), "jq: prefixes never match")
	require.Equal(t, []string{"2"}, keysOf(search(Filter{PayloadJQ: `.kind == "small"`})))
	require.Empty(t, search(Filter{PayloadJQ: `.kind == "big"`}))

	// Negative: whole payloads, whatever their size.
	w, err := Open(Config{Path: filepath.Join(t.TempDir(), "whole.db"), Logger: zerolog.Nop(), Shards: 1, PayloadMax: -1})
	require.NoError(t, err)
	require.NoError(t, w.Start(fakeSource{}))
	t.Cleanup(w.Close)
	feed(t, w, 3, statemachine.JobChange{ID: vl.Job.ID, Job: &vl.Job, State: vl.State})
	p, err := w.Search(context.Background(), Filter{PayloadJQ: `.tail == "needle"`})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
