package statemachine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func auditRec(id, ns, method, path string, status uint16) AuditRecord {
	return AuditRecord{ID: id, KeyID: "key_" + ns, KeyName: "ops", Role: "operator", Namespace: ns, Method: method, Path: path,
		Status: status, Summary: "pause queue emails", Remote: "10.0.0.1:5000"}
}

func (tb *testBundle) audits(q AuditQuery) AuditPage {
	tb.t.Helper()
	v, err := tb.sm.Lookup(q)
	require.NoError(tb.t, err)
	return v.(AuditPage)
}

func auditIDs(p AuditPage) []string {
	out := []string{}
	for _, r := range p.Records {
		out = append(out, r.ID)
	}
	return out
}

func TestStateMachineAudit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	start := tb.now.UnixNano()
	// a1..a6 one second apart, in two namespaces; a record's time is the
	// entry's, whatever At the op carries.
	recs := []AuditRecord{
		auditRec("a1", "default", "POST", "/api/v1/queues/emails/pause", 200),
		auditRec("a2", "acme", "DELETE", "/api/v1/jobs/job_0_x", 404),
		auditRec("a3", "default", "POST", "/api/v1/auth/keys", 201),
		auditRec("a4", "acme", "POST", "/api/v1/queues/emails/pause", 403),
		auditRec("a5", "default", "DELETE", "/api/v1/queues/emails", 200),
		auditRec("a6", "acme", "POST", "/api/v1/jobs/bulk", 200),
	}
	for i := range recs {
		op := &AuditOp{Record: recs[i]}
		op.Record.At = 42
		require.Equal(t, StatusOK, tb.one(op).Status)
		recs[i].At = tb.now.UnixNano()
		tb.advance(time.Second)
	}

	all := tb.audits(AuditQuery{Limit: 50})
	require.Equal(t, []string{"a6", "a5", "a4", "a3", "a2", "a1"}, auditIDs(all))
	require.False(t, all.More)
	require.Equal(t, recs[5], all.Records[0], "every field stored, time from the entry")

	for _, c := range []struct {
		q    AuditQuery
		want []string
	}{
		{AuditQuery{Namespace: "acme"}, []string{"a6", "a4", "a2"}},
		{AuditQuery{Namespace: "nobody"}, []string{}},
		{AuditQuery{KeyID: "key_default"}, []string{"a5", "a3", "a1"}},
		{AuditQuery{Method: "DELETE"}, []string{"a5", "a2"}},
		{AuditQuery{PathPrefix: "/api/v1/queues/"}, []string{"a5", "a4", "a1"}},
		{AuditQuery{Status: 403}, []string{"a4"}},
		{AuditQuery{Since: start + int64(2*time.Second)}, []string{"a6", "a5", "a4", "a3"}},
		{AuditQuery{Until: start + int64(2*time.Second)}, []string{"a2", "a1"}},
		{AuditQuery{Namespace: "default", Since: start + 1, Until: start + int64(4*time.Second)}, []string{"a3"}},
		{AuditQuery{Before: recs[3].At, BeforeID: "a4"}, []string{"a3", "a2", "a1"}},
	} {
		require.Equal(t, c.want, auditIDs(tb.audits(c.q)), "%+v", c.q)
	}

	// Pages of two, through the cursor, see every record once.
	var got []string
	q := AuditQuery{Limit: 2}
	for range 10 {
		p := tb.audits(q)
		got = append(got, auditIDs(p)...)
		if !p.More {
			break
		}
		q.Before, q.BeforeID = p.StopAt, p.StopID
	}
	require.Equal(t, []string{"a6", "a5", "a4", "a3", "a2", "a1"}, got)

	// Survives a reopen.
	tb.reopen()
	require.Equal(t, auditIDs(all), auditIDs(tb.audits(AuditQuery{})))
}

func TestStateMachineAuditRefusesBadRecords(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	long := strings.Repeat("x", AuditSummaryMax+1)
	for _, r := range []AuditRecord{
		{},
		{ID: "a", Method: "POST", Path: "/p"}, // no namespace
		{ID: "a", Namespace: "a\x00b", Method: "POST", Path: "/p"}, // would break the key
		{ID: "a", Namespace: "n", Method: "POST", Path: "/p", Summary: long},
		{ID: "a", Namespace: "n", Method: "POST", Path: "/p", KeyName: strings.Repeat("k", AuditFieldMax+1)},
	} {
		require.Equal(t, StatusInvalid, tb.one(&AuditOp{Record: r}).Status, "%+v", r)
	}
	require.Empty(t, tb.audits(AuditQuery{}).Records)
	ok := AuditRecord{ID: "a", Namespace: "n", Method: "POST", Path: "/p", Summary: long[:AuditSummaryMax]}
	require.Equal(t, StatusOK, tb.one(&AuditOp{Record: ok}).Status)
}

func TestStateMachineAuditPrune(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var times []int64
	for i := range 6 {
		ns := []string{"a", "b", "c"}[i%3]
		tb.one(&AuditOp{Record: auditRec(fmt.Sprint("r", i), ns, "POST", "/x", 200)})
		times = append(times, tb.now.UnixNano())
		tb.advance(time.Minute)
	}
	// Older than r4: r0..r3, across the three namespaces, two at a time.
	r := tb.one(&PruneAuditOp{Before: times[4], Limit: 2})
	require.Equal(t, uint32(2), r.Count)
	require.Len(t, tb.audits(AuditQuery{}).Records, 4)
	r = tb.one(&PruneAuditOp{Before: times[4]})
	require.Equal(t, uint32(2), r.Count)
	require.Equal(t, []string{"r5", "r4"}, auditIDs(tb.audits(AuditQuery{})))
	require.Equal(t, uint32(0), tb.one(&PruneAuditOp{Before: times[4]}).Count)
}

// A query whose filter matches rarely stops after AuditScanMax records
// and says where; going on from there finds the rest.
func TestStateMachineAuditScanBound(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ops := []Op{&AuditOp{Record: auditRec("a00000", "n", "POST", "/x", 500)}}
	for i := 1; i <= AuditScanMax+5; i++ {
		ops = append(ops, &AuditOp{Record: auditRec(fmt.Sprintf("a%05d", i), "n", "POST", "/x", 200)})
	}
	tb.apply(ops...)
	p := tb.audits(AuditQuery{Status: 500})
	require.Empty(t, p.Records)
	require.True(t, p.More)
	p = tb.audits(AuditQuery{Status: 500, Before: p.StopAt, BeforeID: p.StopID})
	require.Equal(t, []string{"a00000"}, auditIDs(p))
	require.False(t, p.More)
}

func TestMergeAuditPages(t *testing.T) {
	t.Parallel()
	r := func(at int64, id string) AuditRecord { return AuditRecord{ID: id, At: at} }
	// Shard 1 stopped at 50 (scan bound); shard 2 is complete. Only what
	// is above 50 may be answered: shard 2's record at 40 waits for the
	// next page.
	m := MergeAuditPages([]AuditPage{
		{Records: []AuditRecord{r(90, "x")}, More: true, StopAt: 50, StopID: "s"},
		{Records: []AuditRecord{r(70, "y"), r(40, "z")}},
	}, 10)
	require.Equal(t, []string{"x", "y"}, auditIDs(m))
	require.True(t, m.More)
	require.Equal(t, int64(50), m.StopAt)
	// Cut by the limit: the cursor is the last record kept.
	m = MergeAuditPages([]AuditPage{
		{Records: []AuditRecord{r(90, "x"), r(60, "w")}, More: true, StopAt: 60, StopID: "w"},
		{Records: []AuditRecord{r(70, "y"), r(65, "v")}},
	}, 2)
	require.Equal(t, []string{"x", "y"}, auditIDs(m))
	require.True(t, m.More)
	require.Equal(t, int64(70), m.StopAt)
	require.Equal(t, "y", m.StopID)
	// Same time: the ID orders.
	m = MergeAuditPages([]AuditPage{{Records: []AuditRecord{r(5, "a")}}, {Records: []AuditRecord{r(5, "b")}}}, 10)
	require.Equal(t, []string{"b", "a"}, auditIDs(m))
	require.False(t, m.More)
}
