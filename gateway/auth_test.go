package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/peer"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// keysServer is a gateway that requires keys, over the shared test engine
// and its meta group's key table, with no mirror and no event ring (so no
// route it admits can disturb the other tests).
func keysServer(t *testing.T, cfg Config) (*Server, string, Keys) {
	t.Helper()
	keys, ok := testEngine.(Keys)
	require.True(t, ok, "the test engine has no key table")
	cfg.Auth, cfg.Keys = AuthRequired, keys
	if c, ok := testEngine.(Cluster); ok {
		cfg.Cluster = c // the cluster routes too
	}
	srv, addr := frontServer(t, cfg, testEngine)
	return srv, "http://" + addr, keys
}

// callKey calls url with key as the bearer token ("" for none) and a JSON
// body (POST, PUT, PATCH), returning the status and the error code.
func callKey(t *testing.T, method, url, key string, body any) (int, string, []byte) {
	t.Helper()
	var h map[string]string
	if key != "" {
		h = map[string]string{"Authorization": "Bearer " + key}
	}
	return callHeaders(t, method, url, h, body)
}

// callHeaders is callKey with any headers.
func callHeaders(t *testing.T, method, url string, headers map[string]string, body any) (int, string, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var e corvo.ErrorBody
	_ = json.Unmarshal(out, &e)
	return resp.StatusCode, e.Code, out
}

// putKey stores a key straight in the table (the API refuses expired
// ones) and returns it.
func putKey(t *testing.T, keys Keys, k auth.Key) string {
	t.Helper()
	key, id, hash := auth.NewKey()
	k.ID, k.Hash = id, hash
	if k.Namespace == "" {
		k.Namespace = auth.DefaultNamespace
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changed, err := keys.ProposeKeys(ctx, auth.Cmd{Op: "put", Key: &k})
	require.NoError(t, err)
	require.True(t, changed)
	return key
}

// putNamespace makes namespace ns in the key table (if it is not there).
func putNamespace(t *testing.T, keys Keys, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := keys.ProposeKeys(ctx, auth.Cmd{Op: "ns.put", Namespace: &auth.Namespace{Name: ns}})
	require.NoError(t, err)
	require.True(t, keys.Keys().NamespaceExists(ns))
}

// concrete fills a route pattern's parameters with values that name
// nothing: an admitted request then does nothing (404, 400, 503).
func concrete(pattern string) string {
	r := strings.NewReplacer("{id}", "job_0_01J0000000000000000000000Z", "{name}", "authwalk-none", "{n}", "0",
		"{filepath:*}", "index.html")
	p := r.Replace(pattern)
	if strings.HasPrefix(pattern, "DELETE /api/v1/cluster/nodes/") || strings.Contains(pattern, "/auth/keys/") {
		p = strings.Replace(p, "job_0_01J0000000000000000000000Z", "0000000000000000", 1)
	}
	return p
}

// TestEveryRouteHasAPermission walks the real route table with no key, a
// malformed, an unknown, an expired and a disabled key, and a key of every
// role: each answer is 401, 403 or admitted exactly as the permission
// table says; node-to-node routes take no user key at all; and the table
// has no row for a route that does not exist.
func TestEveryRouteHasAPermission(t *testing.T) {
	srv, url, keys := keysServer(t, Config{})
	require.Len(t, srv.routes, len(permissions), "the permission table has rows for routes that do not exist")
	past := time.Now().Add(-time.Hour).UnixNano()
	refused := map[string]string{
		"none":      "",
		"malformed": "Bearer-less-garbage",
		"unknown":   func() string { k, _, _ := auth.NewKey(); return k }(),
		"expired":   putKey(t, keys, auth.Key{Name: "expired", Role: auth.RoleAdmin, Enabled: true, ExpiresAt: past}),
		"disabled":  putKey(t, keys, auth.Key{Name: "disabled", Role: auth.RoleAdmin}),
	}
	roles := map[string]string{}
	for _, r := range auth.RoleNames {
		roles[r] = putKey(t, keys, auth.Key{Name: "walk-" + r, Role: r, Enabled: true})
	}
	// A key of another namespace naming the default one: refused on every
	// route that needs a key, whatever its role grants.
	putNamespace(t, keys, "walk-other")
	foreign := map[string]string{"Authorization": "Bearer " + putKey(t, keys, auth.Key{Name: "walk-foreign", Role: auth.RoleOperator,
		Namespace: "walk-other", Enabled: true}), NamespaceHeader: auth.DefaultNamespace}
	var body = map[string]any{}
	for _, route := range srv.routes {
		perm := permissions[route]
		method, pattern, _ := strings.Cut(route, " ")
		path := concrete(pattern)
		var b any
		if method == "POST" || method == "PUT" || method == "PATCH" {
			b = body
		}
		cluster := strings.HasPrefix(pattern, "/internal/") || pattern == "/api/v1/cluster/join" ||
			pattern == "/api/v1/cluster/removed" || strings.HasPrefix(pattern, "/api/v1/cluster/nodes/")
		for what, key := range refused {
			st, code, out := callKey(t, method, url+path, key, b)
			switch {
			case cluster:
				require.Contains(t, []string{"cluster_secret_required", "cluster_secret_invalid"}, code, "%s with %s key: %d %s", route, what, st, out)
			case perm == auth.PermNone:
				require.NotContains(t, []int{401, 403}, st, "%s is open, but %s key: %s", route, what, out)
			default:
				require.Equal(t, 401, st, "%s with %s key: %s", route, what, out)
				require.Equal(t, "unauthorized", code)
			}
		}
		st, code, out := callHeaders(t, method, url+path, foreign, b)
		switch {
		case cluster:
			require.Contains(t, []string{"cluster_secret_required", "cluster_secret_invalid"}, code, "%s with a foreign key: %d %s", route, st, out)
		case perm == auth.PermNone:
			require.NotContains(t, []int{401, 403}, st, "%s is open, but a foreign key: %s", route, out)
		default:
			require.Equal(t, 403, st, "%s must be refused to another namespace's key: %s", route, out)
			require.Equal(t, "forbidden", code)
		}
		for role, key := range roles {
			st, code, out := callKey(t, method, url+path, key, b)
			p := auth.Principal{Role: role}
			switch {
			case cluster:
				require.Contains(t, []string{"cluster_secret_required", "cluster_secret_invalid"}, code, "%s with a %s key: %d %s", route, role, st, out)
			case perm == permAnyKey || p.Can(perm):
				require.NotContains(t, []string{"unauthorized", "forbidden"}, code, "%s is allowed to %s: %d %s", route, role, st, out)
			default:
				require.Equal(t, 403, st, "%s must be refused to %s: %s", route, role, out)
				require.Equal(t, "forbidden", code)
			}
		}
	}
}

// TestKeysLifecycle: create (the key shown once), use, list (never the
// secret or its hash), change the role, disable, revoke; last-used times
// reach the table without an entry per request; bad input is a 400 that
// changes nothing.
func TestKeysLifecycle(t *testing.T) {
	_, url, keys := keysServer(t, Config{KeyTouchInterval: 20 * time.Millisecond})
	admin := putKey(t, keys, auth.Key{Name: "lifecycle-admin", Role: auth.RoleAdmin, Enabled: true})
	before := keys.Keys().Len()
	for _, bad := range []any{
		map[string]any{},
		map[string]any{"name": "x", "role": "root"},
		map[string]any{"name": "x", "queues": []string{"[a"}},
		map[string]any{"name": "x", "expires_at": time.Now().Add(-time.Minute)},
		map[string]any{"name": "x", "namespace": "bad name"},
		map[string]any{"name": "x", "secret": "y"},
	} {
		st, code, out := callKey(t, "POST", url+"/api/v1/auth/keys", admin, bad)
		require.Equal(t, 400, st, "%v: %s", bad, out)
		require.Equal(t, "invalid_request", code)
	}
	require.Equal(t, before, keys.Keys().Len(), "a refused creation changed the table")

	st, _, out := callKey(t, "POST", url+"/api/v1/auth/keys", admin, corvo.CreateKeyRequest{Name: "lc-producer", Role: "producer", Queues: []string{"lc.*"}})
	require.Equal(t, 201, st, string(out))
	created := strictDecode[corvo.CreatedKey](t, "create key", out)
	require.True(t, strings.HasPrefix(created.Key, auth.KeyPrefix+created.ID+"_"))
	k, ok := keys.Keys().Key(created.ID)
	require.True(t, ok)
	require.Equal(t, auth.HashKey(created.Key), k.Hash)
	require.NotContains(t, string(out), k.Hash, "the answer shows the hash")

	st, _, out = callKey(t, "POST", url+"/api/v1/enqueue", created.Key, map[string]any{"queue": "lc.a"})
	require.Equal(t, 201, st, string(out))
	st, code, _ := callKey(t, "POST", url+"/api/v1/enqueue", created.Key, map[string]any{"queue": "other"})
	require.Equal(t, 403, st, "the queue scope let a key enqueue elsewhere")
	require.Equal(t, "forbidden", code)
	st, code, _ = callKey(t, "GET", url+"/api/v1/queues", created.Key, nil)
	require.Equal(t, 403, st, "a producer listed queues")
	require.Equal(t, "forbidden", code)

	// Last used: recorded through the meta group by the touch loop.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, out = callKey(t, "GET", url+"/api/v1/auth/keys/"+created.ID, admin, nil)
		require.Equal(t, 200, st, string(out))
		if strictDecode[corvo.APIKey](t, "get key", out).LastUsedAt != nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "last_used_at never recorded: %s", out)
		time.Sleep(10 * time.Millisecond)
	}

	st, _, out = callKey(t, "GET", url+"/api/v1/auth/keys", admin, nil)
	require.Equal(t, 200, st)
	list := strictDecode[corvo.KeyList](t, "list keys", out)
	require.NotEmpty(t, list.Keys)
	require.NotContains(t, string(out), created.Key[len(auth.KeyPrefix)+17:], "the list shows a secret")
	require.NotContains(t, string(out), k.Hash, "the list shows a hash")

	role := "operator"
	st, _, out = callKey(t, "PATCH", url+"/api/v1/auth/keys/"+created.ID, admin, corvo.UpdateKeyRequest{Role: &role})
	require.Equal(t, 200, st, string(out))
	require.Equal(t, "operator", strictDecode[corvo.APIKey](t, "patch key", out).Role)
	st, _, _ = callKey(t, "GET", url+"/api/v1/queues", created.Key, nil)
	require.Equal(t, 200, st, "the new role did not take effect")
	who := strictDecode[corvo.WhoAmI](t, "whoami", func() []byte { _, _, o := callKey(t, "GET", url+"/api/v1/auth/whoami", created.Key, nil); return o }())
	require.Equal(t, "keys", who.Auth)
	require.Equal(t, created.ID, who.KeyID)
	require.Contains(t, who.Permissions, "queues:manage")

	off := false
	st, _, _ = callKey(t, "PATCH", url+"/api/v1/auth/keys/"+created.ID, admin, corvo.UpdateKeyRequest{Enabled: &off})
	require.Equal(t, 200, st)
	st, code, _ = callKey(t, "GET", url+"/api/v1/queues", created.Key, nil)
	require.Equal(t, 401, st, "a disabled key still works")
	require.Equal(t, "unauthorized", code)

	st, _, out = callKey(t, "DELETE", url+"/api/v1/auth/keys/"+created.ID, admin, nil)
	require.Equal(t, 200, st, string(out))
	strictDecode[corvo.KeyRevoked](t, "revoke key", out)
	_, ok = keys.Keys().Key(created.ID)
	require.False(t, ok)
	st, code, _ = callKey(t, "DELETE", url+"/api/v1/auth/keys/"+created.ID, admin, nil)
	require.Equal(t, 404, st)
	require.Equal(t, "not_found", code)
}

// TestOpenServerStillChecksASentKey: on an open (loopback) server a call
// without a key acts as an admin, but a key that is sent must be valid
// and is held to its role.
func TestOpenServerStillChecksASentKey(t *testing.T) {
	keys := testEngine.(Keys)
	_, addr := frontServer(t, Config{Auth: AuthOpen, Keys: keys}, testEngine)
	url := "http://" + addr
	st, _, _ := callKey(t, "GET", url+"/api/v1/queues", "", nil)
	require.Equal(t, 200, st)
	unknown, _, _ := auth.NewKey()
	st, code, _ := callKey(t, "GET", url+"/api/v1/queues", unknown, nil)
	require.Equal(t, 401, st)
	require.Equal(t, "unauthorized", code)
	worker := putKey(t, keys, auth.Key{Name: "open-worker", Role: auth.RoleWorker, Enabled: true})
	st, code, _ = callKey(t, "POST", url+"/api/v1/enqueue", worker, map[string]any{"queue": "open-q"})
	require.Equal(t, 403, st)
	require.Equal(t, "forbidden", code)
}

// TestSessionCookieLogsTheUIIn: the UI's login keeps a valid key in an
// HttpOnly, SameSite=Strict cookie that authenticates later calls (the
// event stream's too); a bad key sets nothing; logout clears it.
func TestSessionCookieLogsTheUIIn(t *testing.T) {
	_, url, keys := keysServer(t, Config{})
	ro := putKey(t, keys, auth.Key{Name: "ui-readonly", Role: auth.RoleReadonly, Enabled: true})
	st, code, _ := callKey(t, "POST", url+"/api/v1/auth/session", "", corvo.LoginRequest{Key: ro + "x"})
	require.Equal(t, 401, st)
	require.Equal(t, "unauthorized", code)

	b, _ := json.Marshal(corvo.LoginRequest{Key: ro})
	resp, err := httpc.Post(url+"/api/v1/auth/session", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, string(out))
	require.Equal(t, "readonly", strictDecode[corvo.WhoAmI](t, "login", out).Role)
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			session = c
		}
	}
	require.NotNil(t, session, "no session cookie")
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.NotContains(t, session.Value, ro[len(auth.KeyPrefix)+17:], "the cookie holds the key's secret")
	require.True(t, session.Expires.Before(time.Now().Add(SessionTTL+time.Minute)), "the session outlives SessionTTL")

	withCookie := func(method, path string) int {
		req, err := http.NewRequest(method, url+path, nil)
		require.NoError(t, err)
		req.AddCookie(session)
		resp, err := httpc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, withCookie("GET", "/api/v1/queues"))
	require.Equal(t, 403, withCookie("DELETE", "/api/v1/queues/ui-none"), "a readonly session deleted a queue")
	require.Equal(t, 503, withCookie("GET", "/api/v1/events"), "the event stream refused the session (this server has no ring: 503)")
	real := session.Value
	session.Value = real[:len(real)-2] + "AA"
	if session.Value == real {
		session.Value = real[:len(real)-2] + "BB"
	}
	require.Equal(t, 401, withCookie("GET", "/api/v1/queues"), "a tampered session token was taken")
	session.Value = real
	id, _ := auth.KeyID(ro)
	off := false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = keys.ProposeKeys(ctx, auth.Cmd{Op: "update", ID: id, Update: &auth.Update{Enabled: &off}})
	require.NoError(t, err)
	require.Equal(t, 401, withCookie("GET", "/api/v1/queues"), "a disabled key's session still works")

	resp, err = httpc.Do(func() *http.Request { r, _ := http.NewRequest("DELETE", url+"/api/v1/auth/session", nil); return r }())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	cleared := false
	for _, c := range resp.Cookies() {
		cleared = cleared || (c.Name == SessionCookie && c.Value == "" && (c.MaxAge < 0 || c.Expires.Before(time.Now())))
	}
	require.True(t, cleared, "logout did not clear the cookie")
}

// TestClusterSecretStandsForAnotherNode: a user route called by another
// node (the cluster secret, no key) is admitted on a server that needs
// keys; a wrong secret is refused, never treated as a missing key.
func TestClusterSecretStandsForAnotherNode(t *testing.T) {
	_, url, _ := keysServer(t, Config{})
	call := func(secret string) (int, string) {
		st, code, _ := callHeaders(t, "GET", url+"/api/v1/queues", map[string]string{peer.SecretHeader: secret}, nil)
		return st, code
	}
	st, _ := call(testClusterSecret)
	require.Equal(t, 200, st)
	st, code := call("wrong-secret-0123456789abcdef0123456789")
	require.Equal(t, 403, st)
	require.Equal(t, "cluster_secret_invalid", code)
}

// TestPermissionDocsMatchRoles: docs/api.md's permission table lists every
// permission once, with exactly the roles that hold it.
func TestPermissionDocsMatchRoles(t *testing.T) {
	b, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "| permission | routes | roles |")
	require.GreaterOrEqual(t, start, 0, "docs/api.md has no permission table")
	seen := map[auth.Permission]bool{}
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(line, " | ")
		perm := auth.Permission(strings.Trim(cells[0], "| `"))
		var want []string
		for _, r := range auth.RoleNames {
			if p := (auth.Principal{Role: r}); p.Can(perm) {
				want = append(want, r)
			}
		}
		require.Equal(t, strings.Join(want, ", "), strings.TrimSuffix(cells[2], " |"), "docs/api.md: the roles of %s", perm)
		seen[perm] = true
	}
	for _, p := range auth.Permissions {
		require.True(t, seen[p], "docs/api.md's permission table lacks %s", p)
	}
	require.Len(t, seen, len(auth.Permissions))
}

// TestCustomRoles: a custom role's permissions and queue scope hold for
// its keys, a change to the role reaches them at once, and a role a key
// has cannot be deleted.
func TestCustomRoles(t *testing.T) {
	_, url, keys := keysServer(t, Config{})
	admin := putKey(t, keys, auth.Key{Name: "roles-admin", Role: auth.RoleAdmin, Enabled: true})
	for _, bad := range []struct {
		name string
		body any
	}{
		{"admin", corvo.PutRoleRequest{Permissions: []string{"jobs:read"}}},
		{"Bad Name", corvo.PutRoleRequest{Permissions: []string{"jobs:read"}}},
		{"cr-empty", corvo.PutRoleRequest{}},
		{"cr-unknown", corvo.PutRoleRequest{Permissions: []string{"jobs:everything"}}},
		{"cr-glob", corvo.PutRoleRequest{Permissions: []string{"jobs:read"}, Queues: []string{"[x"}}},
	} {
		st, code, out := callKey(t, "PUT", url+"/api/v1/auth/roles/"+strings.ReplaceAll(bad.name, " ", "%20"), admin, bad.body)
		require.Equal(t, 400, st, "%s: %s", bad.name, out)
		require.Equal(t, "invalid_request", code)
	}
	st, _, out := callKey(t, "PUT", url+"/api/v1/auth/roles/cr-billing", admin,
		corvo.PutRoleRequest{Permissions: []string{"queues:read", "queues:manage"}, Queues: []string{"cr-billing.*"}})
	require.Equal(t, 200, st, string(out))
	role := strictDecode[corvo.RoleInfo](t, "put role", out)
	require.False(t, role.BuiltIn)
	st, _, out = callKey(t, "GET", url+"/api/v1/auth/roles", admin, nil)
	require.Equal(t, 200, st)
	list := strictDecode[corvo.RoleList](t, "list roles", out)
	require.Equal(t, "admin", list.Roles[0].Name)
	require.True(t, list.Roles[0].BuiltIn)

	st, _, out = callKey(t, "POST", url+"/api/v1/auth/keys", admin, corvo.CreateKeyRequest{Name: "cr-key", Role: "cr-billing"})
	require.Equal(t, 201, st, string(out))
	key := strictDecode[corvo.CreatedKey](t, "create key", out)
	st, _, out = callKey(t, "POST", url+"/api/v1/queues/cr-billing.eu/pause", key.Key, map[string]any{})
	require.Equal(t, 200, st, "the role's permission did not hold: %s", out)
	st, code, _ := callKey(t, "POST", url+"/api/v1/queues/emails/pause", key.Key, map[string]any{})
	require.Equal(t, 403, st, "the role's queue scope did not hold")
	require.Equal(t, "forbidden", code)
	st, _, _ = callKey(t, "POST", url+"/api/v1/enqueue", key.Key, map[string]any{"queue": "cr-billing.eu"})
	require.Equal(t, 403, st, "the role granted what it does not list")

	st, _, _ = callKey(t, "PUT", url+"/api/v1/auth/roles/cr-billing", admin, corvo.PutRoleRequest{Permissions: []string{"jobs:enqueue"}})
	require.Equal(t, 200, st)
	st, _, _ = callKey(t, "POST", url+"/api/v1/enqueue", key.Key, map[string]any{"queue": "anything"})
	require.Equal(t, 201, st, "a role change did not reach its key")
	st, _, _ = callKey(t, "POST", url+"/api/v1/queues/cr-billing.eu/resume", key.Key, map[string]any{})
	require.Equal(t, 403, st, "a permission taken from the role still held")

	st, code, _ = callKey(t, "DELETE", url+"/api/v1/auth/roles/cr-billing", admin, nil)
	require.Equal(t, 409, st, "a role a key has was deleted")
	require.Equal(t, "conflict", code)
	st, _, _ = callKey(t, "DELETE", url+"/api/v1/auth/keys/"+key.ID, admin, nil)
	require.Equal(t, 200, st)
	st, _, out = callKey(t, "DELETE", url+"/api/v1/auth/roles/cr-billing", admin, nil)
	require.Equal(t, 200, st, string(out))
	strictDecode[corvo.RoleDeleted](t, "delete role", out)
	st, code, _ = callKey(t, "DELETE", url+"/api/v1/auth/roles/admin", admin, nil)
	require.Equal(t, 400, st)
	require.Equal(t, "invalid_request", code)
}

// TestKeyRateLimits: a key over its write rate gets 429 rate_limited with
// Retry-After, its reads are counted apart, a key's own rate replaces the
// server's and -1 lifts it.
func TestKeyRateLimits(t *testing.T) {
	_, url, keys := keysServer(t, Config{RateRead: 1000, RateWrite: 3})
	k := putKey(t, keys, auth.Key{Name: "rl-default", Role: auth.RoleAdmin, Enabled: true})
	wrote, limited := 0, 0
	var retryAfter string
	for i := 0; i < 10; i++ {
		req, _ := http.NewRequest("POST", url+"/api/v1/queues/rl-none/pause", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := httpc.Do(req)
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			wrote++
		case 429:
			limited++
			retryAfter = resp.Header.Get("Retry-After")
			require.Contains(t, string(out), `"rate_limited"`)
		default:
			t.Fatalf("HTTP %d %s", resp.StatusCode, out)
		}
	}
	// A burst of 3, plus what refilled meanwhile (3 a second).
	require.GreaterOrEqual(t, limited, 5, "the write rate did not hold (%d written)", wrote)
	require.Equal(t, "1", retryAfter)
	st, _, _ := callKey(t, "GET", url+"/api/v1/queues", k, nil)
	require.Equal(t, 200, st, "reads share the writes' bucket")

	own := putKey(t, keys, auth.Key{Name: "rl-unlimited", Role: auth.RoleAdmin, Enabled: true, RateWrite: -1})
	for i := 0; i < 10; i++ {
		st, _, out := callKey(t, "POST", url+"/api/v1/queues/rl-none/resume", own, map[string]any{})
		require.Equal(t, 200, st, "an unlimited key was limited: %s", out)
	}
}

// TestSessionTokens: a token names its key until it ends, and only this
// server's signing key makes one.
func TestSessionTokens(t *testing.T) {
	a := &Server{cfg: Config{SessionKey: SessionKeyFrom("secret-a")}}
	b := &Server{cfg: Config{SessionKey: SessionKeyFrom("secret-b")}}
	tok := a.newSession("0123456789abcdef", 100)
	id, ok := a.session([]byte(tok), 99)
	require.True(t, ok)
	require.Equal(t, "0123456789abcdef", id)
	_, ok = a.session([]byte(tok), 100)
	require.False(t, ok, "an ended session was taken")
	_, ok = b.session([]byte(tok), 99)
	require.False(t, ok, "another cluster's session was taken")
	for _, bad := range []string{"", "v1.", "v1.x.y", "v2." + tok[3:], tok + "x", strings.Replace(tok, ".", "", 2)} {
		_, ok = a.session([]byte(bad), 1)
		require.False(t, ok, "%q", bad)
	}
}

func TestBucketRefills(t *testing.T) {
	var b bucket
	at := int64(1e9)
	for i := 0; i < 4; i++ {
		require.Zero(t, b.take(at, 4, 4), "the burst is the rate")
	}
	require.Equal(t, 250*time.Millisecond, b.take(at, 4, 4))
	require.Zero(t, b.take(at+int64(250*time.Millisecond), 4, 4), "a token refills in 1/rate s")
	require.NotZero(t, b.take(at+int64(250*time.Millisecond), 4, 4))
	require.Zero(t, b.take(at+int64(10*time.Second), 4, 4))
	for i := 0; i < 3; i++ {
		require.Zero(t, b.take(at+int64(10*time.Second), 4, 4))
	}
	require.NotZero(t, b.take(at+int64(10*time.Second), 4, 4), "an idle bucket holds more than its rate")
}

// TestHeadersTooLarge: request headers over MaxHeaderBytes get 431 with a
// JSON error that does not echo them (a key could be among them).
func TestHeadersTooLarge(t *testing.T) {
	req, err := http.NewRequest("GET", baseURL+"/api/v1/queues", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("s3cret", MaxHeaderBytes/6+1))
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 431, resp.StatusCode, string(out))
	require.Contains(t, string(out), `"headers_too_large"`)
	require.NotContains(t, string(out), "s3cret", "the answer echoes the request's headers")
	req.Header.Set("X-Big", strings.Repeat("x", MaxHeaderBytes/2))
	resp, err = httpc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "half the limit was refused")
}

// TestQueueScopeCoversJobsAndLists: a key limited to some queues sees and
// acts on jobs of other queues as if they did not exist, lists only its
// queues, and must name its queues where a request could reach all.
func TestQueueScopeCoversJobsAndLists(t *testing.T) {
	_, url, keys := keysServer(t, Config{})
	admin := putKey(t, keys, auth.Key{Name: "scope-admin", Role: auth.RoleAdmin, Enabled: true})
	op := putKey(t, keys, auth.Key{Name: "scope-operator", Role: auth.RoleOperator, Enabled: true, Queues: []string{"sc-mine.*"}})
	enqueue := func(q string) string {
		st, _, out := callKey(t, "POST", url+"/api/v1/enqueue", admin, map[string]any{"queue": q})
		require.Equal(t, 201, st, string(out))
		return strictDecode[corvo.Enqueued](t, "enqueue", out).JobID
	}
	mine, other := enqueue("sc-mine.a"), enqueue("sc-other")

	st, _, _ := callKey(t, "GET", url+"/api/v1/jobs/"+mine, op, nil)
	require.Equal(t, 200, st)
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/jobs/" + other},
		{"POST", "/api/v1/jobs/" + other + "/cancel"},
		{"POST", "/api/v1/jobs/" + other + "/move"},
		{"DELETE", "/api/v1/jobs/" + other},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"queue": "sc-mine.b"}
		}
		st, code, out := callKey(t, c.method, url+c.path, op, body)
		require.Equal(t, 404, st, "%s %s: %s", c.method, c.path, out)
		require.Equal(t, "not_found", code)
	}
	st, _, out := callKey(t, "GET", url+"/api/v1/jobs/"+other, admin, nil)
	require.Equal(t, 200, st, "a refused call changed the job: %s", out)
	require.Equal(t, "pending", strictDecode[corvo.Job](t, "job", out).State)
	st, _, _ = callKey(t, "POST", url+"/api/v1/jobs/"+mine+"/move", op, map[string]any{"queue": "sc-other"})
	require.Equal(t, 403, st, "a scoped key moved a job out of its queues")

	st, _, out = callKey(t, "GET", url+"/api/v1/queues", op, nil)
	require.Equal(t, 200, st)
	for _, q := range strictDecode[corvo.QueueList](t, "queues", out).Queues {
		require.True(t, strings.HasPrefix(q.Name, "sc-mine."), "the list shows %s", q.Name)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/jobs/bulk", map[string]any{"job_ids": []string{mine}, "action": "cancel"}},
		{"POST", "/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{"queue": "sc-other"}, "action": "cancel", "confirm": true}},
		{"GET", "/api/v1/dead", nil},
		{"GET", "/api/v1/dead?queue=sc-other", nil},
		{"GET", "/api/v1/events", nil},
	} {
		st, code, out := callKey(t, c.method, url+c.path, op, c.body)
		require.Equal(t, 403, st, "%s %s: %s", c.method, c.path, out)
		require.Equal(t, "forbidden", code)
	}
	st, _, out = callKey(t, "GET", url+"/api/v1/dead?queue=sc-mine.a", op, nil)
	require.Equal(t, 200, st, string(out))
}

// TestFanOutsReachKeyedNodes: a fetch that needs another node's shards is
// fanned out with the cluster secret, so a node that needs keys takes it
// (the node the caller reached admitted the caller).
func TestFanOutsReachKeyedNodes(t *testing.T) {
	keys := testEngine.(Keys)
	admin := putKey(t, keys, auth.Key{Name: "fanout-admin", Role: auth.RoleAdmin, Enabled: true})
	qs := queuesOnDistinctShards(t, "kfan", 2)
	sh0, sh1 := rt4.ShardForQueue(qs[0]), rt4.ShardForQueue(qs[1])
	_, aAddr := frontServer(t, Config{Auth: AuthRequired, Keys: keys}, newHostsOnly(sh1))
	_, front := frontServer(t, Config{Auth: AuthRequired, Keys: keys,
		Peer: peerTo(func(s int) []string { return map[int][]string{sh1: {aAddr}}[s] })}, newHostsOnly(sh0))
	want := enqueue(t, map[string]any{"queue": qs[1]})
	st, _, out := callKey(t, "POST", "http://"+front+"/api/v1/fetch", admin,
		map[string]any{"queues": qs, "worker_id": uq("kfan-w"), "timeout": 5, "count": 2})
	require.Equal(t, 200, st, string(out))
	require.Contains(t, string(out), want, "the job on the other node's shard was not fetched")
}

// TestConnLoggerIsDebugOnly: fasthttp's per-connection messages reach the
// node's log at debug level, never stderr at info.
func TestConnLoggerIsDebugOnly(t *testing.T) {
	var buf bytes.Buffer
	l := connLogger{zerolog.New(&buf).Level(zerolog.InfoLevel)}
	l.Printf("error when serving connection %q: %v", "a<->b", "tls: first record does not look like a TLS handshake")
	require.Empty(t, buf.String(), "a connection message was logged at info")
	l = connLogger{zerolog.New(&buf).Level(zerolog.DebugLevel)}
	l.Printf("error when serving connection %q", "a<->b")
	require.Contains(t, buf.String(), `"level":"debug"`)
	require.Contains(t, buf.String(), "error when serving connection")
}

// TestNamespacesEndpoints: admins make, list and delete namespaces; a
// name is checked, made once, and a namespace with a key (or a queue)
// stays; keys are made only in one that exists; other roles are refused.
func TestNamespacesEndpoints(t *testing.T) {
	_, url, keys := keysServer(t, Config{})
	admin := putKey(t, keys, auth.Key{Name: "ns-admin", Role: auth.RoleAdmin, Enabled: true})
	op := putKey(t, keys, auth.Key{Name: "ns-operator", Role: auth.RoleOperator, Enabled: true})
	name := strings.ReplaceAll(uq("nsep"), "-", "x")

	st, code, _ := callKey(t, "POST", url+"/api/v1/namespaces", op, map[string]any{"name": name})
	require.Equal(t, 403, st)
	require.Equal(t, "forbidden", code)
	for _, bad := range []map[string]any{{"name": "Upper"}, {"name": ""}, {"name": "-x"}, {"name": "a/b"},
		{"name": name, "description": strings.Repeat("d", 257)}, {"name": name, "extra": 1}} {
		st, code, out := callKey(t, "POST", url+"/api/v1/namespaces", admin, bad)
		require.Equal(t, 400, st, "%v: %s", bad, out)
		require.Equal(t, "invalid_request", code)
	}
	require.False(t, keys.Keys().NamespaceExists(name), "a refused request made the namespace")
	st, _, out := callKey(t, "POST", url+"/api/v1/namespaces", admin, map[string]any{"name": name, "description": "team x"})
	require.Equal(t, 201, st, string(out))
	made := strictDecode[corvo.Namespace](t, "create namespace", out)
	require.Equal(t, name, made.Name)
	require.NotNil(t, made.CreatedAt)
	st, code, _ = callKey(t, "POST", url+"/api/v1/namespaces", admin, map[string]any{"name": name})
	require.Equal(t, 409, st)
	require.Equal(t, "conflict", code)

	st, _, out = callKey(t, "GET", url+"/api/v1/namespaces", admin, nil)
	require.Equal(t, 200, st)
	list := strictDecode[corvo.NamespaceList](t, "list namespaces", out)
	names := map[string]string{}
	for _, n := range list.Namespaces {
		names[n.Name] = n.Description
	}
	require.Contains(t, names, auth.DefaultNamespace)
	require.Equal(t, "team x", names[name])

	// Keys: only in a namespace that exists.
	st, code, out = callKey(t, "POST", url+"/api/v1/auth/keys", admin, map[string]any{"name": "k", "namespace": "nope-" + name, "role": "worker"})
	require.Equal(t, 400, st, string(out))
	require.Equal(t, "invalid_request", code)
	st, _, out = callKey(t, "POST", url+"/api/v1/auth/keys", admin, map[string]any{"name": "k", "namespace": name, "role": "worker"})
	require.Equal(t, 201, st, string(out))
	key := strictDecode[corvo.CreatedKey](t, "create key", out)

	st, code, out = callKey(t, "DELETE", url+"/api/v1/namespaces/"+name, admin, nil)
	require.Equal(t, 409, st, "a namespace with a key was deleted: %s", out)
	require.Equal(t, "conflict", code)
	st, _, _ = callKey(t, "DELETE", url+"/api/v1/auth/keys/"+key.ID, admin, nil)
	require.Equal(t, 200, st)
	st, code, _ = callKey(t, "DELETE", url+"/api/v1/namespaces/"+auth.DefaultNamespace, admin, nil)
	require.Equal(t, 400, st)
	require.Equal(t, "invalid_request", code)
	st, _, out = callKey(t, "DELETE", url+"/api/v1/namespaces/"+name, admin, nil)
	require.Equal(t, 200, st, string(out))
	strictDecode[corvo.NamespaceDeleted](t, "delete namespace", out)
	require.False(t, keys.Keys().NamespaceExists(name))
	st, code, _ = callKey(t, "DELETE", url+"/api/v1/namespaces/"+name, admin, nil)
	require.Equal(t, 404, st)
	require.Equal(t, "not_found", code)
	// Naming a namespace that does not exist is a 404.
	st, code, _ = callHeaders(t, "GET", url+"/api/v1/queues", map[string]string{"Authorization": "Bearer " + admin, NamespaceHeader: name}, nil)
	require.Equal(t, 404, st)
	require.Equal(t, "not_found", code)
}
