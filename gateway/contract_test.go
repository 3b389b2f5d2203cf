package gateway

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetricsMetadata: every family of /metrics has exactly one # TYPE
// line (and one # HELP line), written before its first sample, and the
// types of a known counter, gauge and histogram are right.
func TestMetricsMetadata(t *testing.T) {
	q := uq("metrics-meta")
	enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	code, body := call(t, "GET", "/api/v1/metrics", nil)
	require.Equal(t, 200, code, string(body))

	types := map[string]string{}
	helps := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			require.Len(t, f, 4, line)
			_, dup := types[f[2]]
			require.False(t, dup, "family %s has two TYPE lines", f[2])
			types[f[2]] = f[3]
		case strings.HasPrefix(line, "# HELP "):
			helps[strings.Fields(line)[2]]++
		case strings.HasPrefix(line, "#"):
		default:
			name := line
			if i := strings.IndexAny(name, "{ "); i >= 0 {
				name = name[:i]
			}
			fam, ok := familyOf(name, types)
			require.True(t, ok, "sample %q comes before (or without) its family's TYPE line", line)
			require.Equal(t, 1, helps[fam], "family %s: HELP lines", fam)
		}
	}
	require.Equal(t, "counter", types["corvo_jobs_enqueued_total"])
	require.Equal(t, "counter", types["corvo_http_requests_total"])
	require.Equal(t, "gauge", types["corvo_shards_led"])
	require.Equal(t, "gauge", types["corvo_mirror_lag_entries"])
	require.Equal(t, "histogram", types["corvo_http_request_duration_seconds"])
}

// familyOf finds the family a sample belongs to among the families whose
// TYPE line has been seen: the name itself, or for a histogram or summary
// the name without its _bucket, _sum or _count suffix.
func familyOf(sample string, types map[string]string) (string, bool) {
	if _, ok := types[sample]; ok {
		return sample, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(sample, suf); ok {
			if t := types[base]; t == "histogram" || t == "summary" {
				return base, true
			}
		}
	}
	return "", false
}
