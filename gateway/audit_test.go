package gateway

import (
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/auth"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// audits reads the audit log at base with key and the filter f.
func audits(t *testing.T, base, key string, f corvo.AuditFilter) corvo.AuditPage {
	t.Helper()
	st, _, out := callKey(t, "GET", base+"/api/v1/audit?"+f.Query().Encode(), key, nil)
	require.Equal(t, 200, st, string(out))
	return strictDecode[corvo.AuditPage](t, "GET /api/v1/audit", out)
}

// TestAuditTable: the audit table and the permission table agree: every
// state-changing route that needs a manage permission is recorded on every
// call, the producers' and workers' routes only with AuditAll, no read but
// the single sign-on callback (it makes a session), and every row names a
// route that exists.
func TestAuditTable(t *testing.T) {
	t.Parallel()
	srv, _, _ := keysServer(t, Config{})
	registered := map[string]bool{}
	for _, r := range srv.routes {
		registered[r] = true
		method, _, _ := strings.Cut(r, " ")
		row, ok := audited[r]
		if method == "GET" && r != "GET /auth/oidc/callback" { // that one makes a session
			require.False(t, ok && row.class != auditNever, "%s is a read and audited", r)
			continue
		}
		require.True(t, ok, "%s has no row in the audit table", r)
		switch permissions[r] {
		case auth.PermJobsManage, auth.PermQueuesManage, auth.PermSchedulesManage, auth.PermClusterManage, auth.PermKeysManage:
			require.Equal(t, auditManage, row.class, "%s changes state with a manage permission and is not audited", r)
		case auth.PermJobsEnqueue, auth.PermJobsWork:
			require.Equal(t, auditHot, row.class, "%s is on the hot path", r)
		}
		if row.class != auditNever {
			require.NotEmpty(t, row.action, r)
		}
	}
	for r := range audited {
		require.True(t, registered[r], "the audit table has a row for %s, which is not a route", r)
	}
	for _, r := range []string{"POST /api/v1/auth/session", "DELETE /api/v1/auth/session", "GET /auth/oidc/callback", "DELETE /api/v1/cluster/nodes/{id}"} {
		require.Equal(t, auditManage, audited[r].class, r)
	}
}

// TestAuditRecordsManagementCalls: a management call leaves exactly one
// record with who, role, namespace, method, path, status and summary; a
// refused one too (a role without the permission, an unknown key); the hot
// path leaves none; a key that is not an admin's reads its own
// namespace's records only, and one without audit:read none.
func TestAuditRecordsManagementCalls(t *testing.T) {
	_, base, keys := keysServer(t, Config{})
	ns, other := uq("audit-ns"), uq("audit-other")
	admin := putKey(t, keys, auth.Key{Name: "audit-admin", Role: auth.RoleAdmin, Enabled: true})
	op := putKey(t, keys, auth.Key{Name: "audit-op", Role: auth.RoleOperator, Namespace: ns, Enabled: true})
	ro := putKey(t, keys, auth.Key{Name: "audit-ro", Role: auth.RoleReadonly, Namespace: ns, Enabled: true})
	otherOp := putKey(t, keys, auth.Key{Name: "audit-other-op", Role: auth.RoleOperator, Namespace: other, Enabled: true})
	opID, _ := auth.KeyID(op)
	roID, _ := auth.KeyID(ro)
	q := uq("audit-q")
	before := time.Now()

	st, _, out := callKey(t, "POST", base+"/api/v1/queues/"+q+"/pause", op, map[string]any{})
	require.Equal(t, 200, st, string(out))
	page := audits(t, base, admin, corvo.AuditFilter{Namespace: ns})
	require.Len(t, page.Records, 1, "one call, one record: %+v", page.Records)
	r := page.Records[0]
	require.Equal(t, opID, r.KeyID)
	require.Equal(t, "audit-op", r.KeyName)
	require.Equal(t, auth.RoleOperator, r.Role)
	require.Equal(t, ns, r.Namespace)
	require.Equal(t, "POST", r.Method)
	require.Equal(t, "/api/v1/queues/"+q+"/pause", r.Path)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "pause queue "+q, r.Summary)
	require.True(t, strings.HasPrefix(r.Remote, "127.0.0.1:"), r.Remote)
	require.WithinDuration(t, before, r.At, 10*time.Second)
	require.NotEmpty(t, r.ID)

	// Refused: a role without queues:manage (403), then an unknown key
	// (401) whose ID is recorded in the default namespace.
	st, code, _ := callKey(t, "POST", base+"/api/v1/queues/"+q+"/resume", ro, map[string]any{})
	require.Equal(t, 403, st)
	require.Equal(t, "forbidden", code)
	page = audits(t, base, admin, corvo.AuditFilter{KeyID: roID})
	require.Len(t, page.Records, 1)
	require.Equal(t, 403, page.Records[0].Status)
	require.Equal(t, "resume queue "+q+" (forbidden)", page.Records[0].Summary)
	require.Equal(t, ns, page.Records[0].Namespace)
	unknown, unknownID, _ := auth.NewKey()
	st, _, _ = callKey(t, "DELETE", base+"/api/v1/queues/"+q, unknown, nil)
	require.Equal(t, 401, st)
	page = audits(t, base, admin, corvo.AuditFilter{KeyID: unknownID})
	require.Len(t, page.Records, 1)
	require.Equal(t, 401, page.Records[0].Status)
	require.Equal(t, auth.DefaultNamespace, page.Records[0].Namespace)
	require.Empty(t, page.Records[0].KeyName)

	// The hot path is not recorded (AuditAll is off).
	st, _, out = callKey(t, "POST", base+"/api/v1/enqueue", op, map[string]any{"queue": q})
	require.Equal(t, 201, st, string(out))
	page = audits(t, base, admin, corvo.AuditFilter{Namespace: ns, PathPrefix: "/api/v1/enqueue"})
	require.Empty(t, page.Records)

	// Reading: the operator sees its namespace; asking for another is a
	// 403; a readonly key lacks audit:read.
	st, _, out = callKey(t, "POST", base+"/api/v1/queues/"+q+"/resume", otherOp, map[string]any{})
	require.Equal(t, 200, st, string(out))
	page = audits(t, base, op, corvo.AuditFilter{})
	require.NotEmpty(t, page.Records)
	for _, r := range page.Records {
		require.Equal(t, ns, r.Namespace, "an operator read another namespace's record")
	}
	st, code, _ = callKey(t, "GET", base+"/api/v1/audit?namespace="+other, op, nil)
	require.Equal(t, 403, st)
	require.Equal(t, "forbidden", code)
	st, code, _ = callKey(t, "GET", base+"/api/v1/audit", ro, nil)
	require.Equal(t, 403, st)
	require.Equal(t, "forbidden", code)
	require.Len(t, audits(t, base, otherOp, corvo.AuditFilter{}).Records, 1)
	// An admin reads across namespaces.
	got := map[string]bool{}
	for _, r := range audits(t, base, admin, corvo.AuditFilter{PathPrefix: "/api/v1/queues/" + q + "/", Limit: 1000}).Records {
		got[r.Namespace] = true
	}
	require.Equal(t, map[string]bool{ns: true, other: true}, got)
}

// TestAuditFiltersAndCursor: pages through one namespace's records with
// the cursor, each record once, newest first; the filters narrow; bad
// parameters are 400s.
func TestAuditFiltersAndCursor(t *testing.T) {
	_, base, keys := keysServer(t, Config{})
	ns := uq("audit-page")
	admin := putKey(t, keys, auth.Key{Name: "audit-page-admin", Role: auth.RoleAdmin, Enabled: true})
	op := putKey(t, keys, auth.Key{Name: "audit-page-op", Role: auth.RoleOperator, Namespace: ns, Enabled: true})
	var paths []string
	for i := range 5 {
		q := uq("audit-page-q")
		method, path := "POST", "/api/v1/queues/"+q+"/pause"
		if i%2 == 1 {
			method, path = "DELETE", "/api/v1/queues/"+q+"/throttle"
		}
		st, _, out := callKey(t, method, base+path, op, map[string]any{})
		require.Equal(t, 200, st, string(out))
		paths = append(paths, path)
		// The next record's instant is in a later millisecond (the
		// records' precision) than this one's, which its answer follows:
		// the since/until check below needs two instants apart.
		for ms := time.Now().UnixMilli(); time.Now().UnixMilli() == ms; {
			runtime.Gosched()
		}
	}
	var got []string
	f := corvo.AuditFilter{Namespace: ns, Limit: 2}
	for range 10 {
		p := audits(t, base, admin, f)
		for _, r := range p.Records {
			got = append(got, r.Path)
		}
		if !p.HasMore {
			require.Nil(t, p.Cursor)
			break
		}
		f.Cursor = *p.Cursor
	}
	require.Equal(t, []string{paths[4], paths[3], paths[2], paths[1], paths[0]}, got)

	p := audits(t, base, admin, corvo.AuditFilter{Namespace: ns, Method: "delete"})
	require.Len(t, p.Records, 2)
	require.Equal(t, paths[3], p.Records[0].Path)
	p = audits(t, base, admin, corvo.AuditFilter{Namespace: ns, Status: 404})
	require.Empty(t, p.Records)
	all := audits(t, base, admin, corvo.AuditFilter{Namespace: ns})
	// Since is inclusive, until exclusive, at the records' precision: the
	// newest record is out, the second newest in (with any record of the
	// same instant).
	p = audits(t, base, admin, corvo.AuditFilter{Namespace: ns, Since: all.Records[1].At, Until: all.Records[0].At})
	require.NotEmpty(t, p.Records)
	require.Equal(t, paths[3], p.Records[0].Path)
	for _, r := range p.Records {
		require.NotEqual(t, paths[4], r.Path, "until is exclusive")
		require.False(t, r.At.Truncate(time.Millisecond).Before(all.Records[1].At.Truncate(time.Millisecond)), "a record before since")
	}

	for _, bad := range []string{"limit=0", "limit=1001", "status=abc", "status=42", "since=yesterday", "until=2026-13-01T00:00:00Z",
		"cursor=nope", "cursor=-5~x", "namespace=" + url.QueryEscape("bad name")} {
		st, code, out := callKey(t, "GET", base+"/api/v1/audit?"+bad, admin, nil)
		require.Equal(t, 400, st, "%s: %s", bad, out)
		require.Equal(t, "invalid_request", code, bad)
	}
}

// TestAuditAllRecordsTheHotPath: with AuditAll the producers' and
// workers' calls are recorded too.
func TestAuditAllRecordsTheHotPath(t *testing.T) {
	_, base, keys := keysServer(t, Config{AuditAll: true})
	ns := uq("audit-all")
	admin := putKey(t, keys, auth.Key{Name: "audit-all-admin", Role: auth.RoleAdmin, Enabled: true})
	prod := putKey(t, keys, auth.Key{Name: "audit-all-producer", Role: auth.RoleProducer, Namespace: ns, Enabled: true})
	st, _, out := callKey(t, "POST", base+"/api/v1/enqueue", prod, map[string]any{"queue": uq("audit-all-q")})
	require.Equal(t, 201, st, string(out))
	p := audits(t, base, admin, corvo.AuditFilter{Namespace: ns})
	require.Len(t, p.Records, 1)
	require.Equal(t, "/api/v1/enqueue", p.Records[0].Path)
	require.Equal(t, 201, p.Records[0].Status)
	require.Equal(t, "enqueue", p.Records[0].Summary)
}

// TestAuditLoginLogout: the web UI's login names the key it checked;
// logout names the key of the cookie it clears.
func TestAuditLoginLogout(t *testing.T) {
	_, base, keys := keysServer(t, Config{})
	ns := uq("audit-login")
	admin := putKey(t, keys, auth.Key{Name: "audit-login-admin", Role: auth.RoleAdmin, Enabled: true})
	ro := putKey(t, keys, auth.Key{Name: "audit-login-ro", Role: auth.RoleReadonly, Namespace: ns, Enabled: true})
	roID, _ := auth.KeyID(ro)
	st, _, out := callKey(t, "POST", base+"/api/v1/auth/session", "", corvo.LoginRequest{Key: ro})
	require.Equal(t, 200, st, string(out))
	p := audits(t, base, admin, corvo.AuditFilter{Namespace: ns})
	require.Len(t, p.Records, 1)
	require.Equal(t, roID, p.Records[0].KeyID)
	require.Equal(t, "log in", p.Records[0].Summary)
	require.NotContains(t, p.Records[0].Summary+p.Records[0].Path, ro, "the key itself is in the record")
}

// TestAuditThroughAnotherNode: a node that hosts no shard forwards a
// management call, whole, to one that does: the call is recorded once, by
// the node that served it, with the client's address as the forwarding
// node saw it.
func TestAuditThroughAnotherNode(t *testing.T) {
	t.Parallel()
	srv, addr := frontServer(t, Config{Peer: peerTo(toReal)}, newHostsOnly())
	q := uq("audit-fwd")
	st, out := callAt(t, "POST", "http://"+addr+"/api/v1/queues/"+q+"/pause", map[string]any{})
	require.Equal(t, 200, st, string(out))
	page := audits(t, baseURL, "", corvo.AuditFilter{PathPrefix: "/api/v1/queues/" + q + "/"})
	require.Len(t, page.Records, 1, "%+v", page.Records)
	require.Equal(t, "anonymous", page.Records[0].KeyName)
	require.Equal(t, 200, page.Records[0].Status)
	require.Regexp(t, `^127\.0\.0\.1:\d+ via 127\.0\.0\.1:\d+$`, page.Records[0].Remote)
	require.Zero(t, srv.eng.(hostsOnly).wrong.Load(), "the front node used a shard it does not host")
}
