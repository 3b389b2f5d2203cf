package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// runCLIKey runs the CLI with CORVO_API_KEY set to key ("" unsets it).
func runCLIKey(t *testing.T, url, key string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(corvoBin, args...)
	cmd.Env = append(cmd.Environ(), "CORVO_URL="+url, "CORVO_API_KEY="+key)
	return runCmd(t, cmd)
}

// TestCLIAuthKeys drives a server that needs keys even on loopback
// (--auth on) with the CLI: refused without a key (with a hint), the admin
// key through CORVO_API_KEY or --api-key, a worker key made, listed,
// used, disabled, enabled and revoked with `corvo auth`.
func TestCLIAuthKeys(t *testing.T) {
	t.Parallel()
	s := newServer(t, "--auth", "on")

	// No key: a 401, and the CLI says what to do.
	out, code := runCLIKey(t, s.url, "", "queues")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "HTTP 401")
	require.Contains(t, out, "pass --api-key or set CORVO_API_KEY")
	require.Contains(t, out, "<data-dir>/admin-key")
	out, code = runCLIKey(t, s.url, "", "top", "--once")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "pass --api-key or set CORVO_API_KEY")
	out, code = runCLIKey(t, s.url, "", "bench", "--url", s.url, "--mode", "enqueue", "--jobs", "10")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "refused the API key")
	require.Contains(t, out, "pass --api-key or set CORVO_API_KEY")

	// The admin key, from --api-key (which wins over the environment)
	// and from CORVO_API_KEY.
	out, code = runCLIKey(t, s.url, "", "auth", "whoami", "--api-key", testAdminKey)
	require.Equal(t, 0, code, out)
	require.Regexp(t, `auth\s+keys\n`, out)
	require.Regexp(t, `role\s+admin\n`, out)
	out, code = runCLIKey(t, s.url, "corvo_0000000000000000_not-a-key-not-a-key-not-a-key-not-a-key-not", "auth", "whoami", "--api-key", testAdminKey)
	require.Equal(t, 0, code, out)
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "whoami", "-o", "json")
	require.Equal(t, 0, code, out)
	me := decode[corvo.WhoAmI](t, []byte(out))
	require.Equal(t, "admin", me.Role)
	require.Equal(t, "keys", me.Auth)
	out, code = runCLIKey(t, s.url, testAdminKey, "enqueue", "billing.charge", `{"n":1}`)
	require.Equal(t, 0, code, out)
	out, code = runCLIKey(t, s.url, testAdminKey, "top", "--once", "-o", "json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"billing.charge"`)
	out, code = runCLIKey(t, s.url, testAdminKey, "bench", "--url", s.url, "--mode", "e2e", "--jobs", "20", "--producers", "1", "--workers", "1", "-o", "json")
	require.Equal(t, 0, code, out)

	// Bad input is refused before any request.
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--role", "worker")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "--name is required")
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--name", "x", "--role", "boss")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "--role must be one of admin, operator, producer, worker, readonly")
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--name", "x", "--expires", "soon")
	require.Equal(t, exitUsage, code, out)
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--name", "x", "--expires", "-1h")
	require.Equal(t, exitUsage, code, out)

	// A worker key for billing.*, shown once.
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--name", "billing-worker", "--role", "worker",
		"--queue", "billing.*", "--expires", "720h", "-o", "json")
	require.Equal(t, 0, code, out)
	created := decode[corvo.CreatedKey](t, []byte(out))
	require.True(t, strings.HasPrefix(created.Key, "corvo_"+created.ID+"_"), created.Key)
	require.Equal(t, []string{"billing.*"}, created.Queues)
	require.NotNil(t, created.ExpiresAt)
	require.WithinDuration(t, time.Now().Add(720*time.Hour), *created.ExpiresAt, time.Minute)
	worker := created.Key

	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--name", "dash", "--expires", "2099-01-01T00:00:00Z")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "role readonly")
	require.Contains(t, out, "expires 2099-01-01T00:00:00Z")
	require.Regexp(t, `\n    corvo_[0-9a-f]{16}_\S{43}\n`, out)
	require.Contains(t, out, "This is the only time the key is shown")

	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "list")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `ID\s+NAME\s+NAMESPACE\s+ROLE\s+QUEUES\s+ENABLED\s+EXPIRES\s+LAST USED\n`, out)
	require.Regexp(t, created.ID+`\s+billing-worker\s+default\s+worker\s+billing\.\*\s+yes\s+\d{4}-\d\d-\d\dT\S+\s+never\n`, out)
	require.Regexp(t, `\s+dash\s+default\s+readonly\s+\*\s+yes\s+2099-01-01T00:00:00Z\s+never\n`, out)
	require.NotContains(t, out, worker, "the list never shows a key")

	// The worker key: it may fetch from its queues, not enqueue.
	out, code = runCLIKey(t, s.url, worker, "auth", "whoami")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `name\s+billing-worker\n`, out)
	require.Regexp(t, `role\s+worker\n`, out)
	require.Regexp(t, `queues\s+billing\.\*\n`, out)
	out, code = runCLIKey(t, s.url, worker, "enqueue", "billing.charge", `{}`)
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "HTTP 403")
	require.Contains(t, out, "forbidden")
	status, body := doWith(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"billing.charge"}, "worker_id": "w"},
		map[string]string{"Authorization": "Bearer " + worker})
	require.Equal(t, 200, status, string(body))
	require.Equal(t, "billing.charge", decode[fetched](t, body).Queue)
	status, body = doWith(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"emails"}, "worker_id": "w"},
		map[string]string{"Authorization": "Bearer " + worker})
	require.Equal(t, 403, status, "outside its queues: %s", body)

	// Disabled, it is refused (with the hint for a key that was sent);
	// enabled, it works again; revoked, it is refused for good.
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "disable", created.ID)
	require.Equal(t, 0, code, out)
	require.Equal(t, created.ID+" (billing-worker): no\n", out)
	out, code = runCLIKey(t, s.url, worker, "auth", "whoami")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "HTTP 401")
	require.Contains(t, out, "the API key sent (--api-key or CORVO_API_KEY) was refused")
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "enable", created.ID)
	require.Equal(t, 0, code, out)
	require.Equal(t, created.ID+" (billing-worker): yes\n", out)
	out, code = runCLIKey(t, s.url, worker, "auth", "whoami")
	require.Equal(t, 0, code, out)
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "revoke", created.ID)
	require.Equal(t, 0, code, out)
	require.Equal(t, created.ID+": revoked\n", out)
	out, code = runCLIKey(t, s.url, worker, "auth", "whoami")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "unknown API key")
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "list", "-o", "json")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, created.ID)
	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "revoke", created.ID)
	require.Equal(t, exitNotFound, code, out)
}

// TestStreamBulkSendsKey: the bulk progress stream (SSE) carries the API
// key like every other request.
func TestStreamBulkSendsKey(t *testing.T) {
	const key = "corvo_0123456789abcdef_streamkeystreamkeystreamkeystreamkeystreamk"
	t.Setenv("CORVO_API_KEY", key)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(401)
			return
		}
		_, _ = io.WriteString(w, "event: done\ndata: {\"id\":\"bulk_1\",\"status\":\"completed\",\"processed\":3}\n\n")
	}))
	defer srv.Close()
	c := clientFlags{url: srv.URL}
	op, raw, err := streamBulk(&c, "bulk_1", func(*corvo.BulkOperation) {})
	require.NoError(t, err)
	require.Equal(t, "completed", op.Status)
	require.True(t, json.Valid(raw))
}

// TestCLINamespaces: an admin makes a namespace with `corvo namespaces`,
// acts in it with --namespace (or CORVO_NAMESPACE), and its queues are
// not the default namespace's; a key of the namespace acts there without
// the flag, and naming another namespace is refused.
func TestCLINamespaces(t *testing.T) {
	t.Parallel()
	s := newServer(t, "--auth", "on")
	out, code := runCLIKey(t, s.url, testAdminKey, "namespaces", "create", "acme", "--description", "team acme")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "acme: created")
	out, code = runCLIKey(t, s.url, testAdminKey, "namespaces", "create", "Bad/Name")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "HTTP 400")

	out, code = runCLIKey(t, s.url, testAdminKey, "--namespace", "acme", "enqueue", "emails", `{"to":"a"}`)
	require.Equal(t, 0, code, out)
	out, code = runCLIKey(t, s.url, testAdminKey, "enqueue", "other", `{}`)
	require.Equal(t, 0, code, out)

	out, code = runCLIKey(t, s.url, testAdminKey, "--namespace", "acme", "queues")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "emails")
	require.NotContains(t, out, "other")
	cmd := exec.Command(corvoBin, "queues")
	cmd.Env = append(cmd.Environ(), "CORVO_URL="+s.url, "CORVO_API_KEY="+testAdminKey, "CORVO_NAMESPACE=acme")
	out, code = runCmd(t, cmd)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "emails", "CORVO_NAMESPACE")
	out, code = runCLIKey(t, s.url, testAdminKey, "queues")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "other")
	require.NotContains(t, out, "emails")

	out, code = runCLIKey(t, s.url, testAdminKey, "auth", "keys", "create", "--name", "acme-ops", "--role", "operator", "--namespace", "acme", "-o", "json")
	require.Equal(t, 0, code, out)
	key := decode[corvo.CreatedKey](t, []byte(out)).Key
	out, code = runCLIKey(t, s.url, key, "queues")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "emails")
	out, code = runCLIKey(t, s.url, key, "--namespace", "default", "queues")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "HTTP 403")

	out, code = runCLIKey(t, s.url, testAdminKey, "namespaces", "list")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `acme\s+1\s+.*team acme`, out)
	out, code = runCLIKey(t, s.url, testAdminKey, "namespaces", "delete", "acme")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "HTTP 409")
}
