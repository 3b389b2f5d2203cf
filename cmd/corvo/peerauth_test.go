package main

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestE2ENodeToNodeRoutesNeedTheClusterSecret: against a real server,
// what an attacker with curl did before — shut the node down with
// /cluster/removed, add a member with /cluster/join, remove a node,
// propose raw entries and read shards through /internal — is refused
// without the cluster secret (401) and with a wrong one (403), and the
// node keeps serving. The founding node generated its secret into its
// data dir, readable by its owner only.
func TestE2ENodeToNodeRoutesNeedTheClusterSecret(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := newServer(t)
	b, err := os.ReadFile(filepath.Join(s.dir, "cluster-secret"))
	require.NoError(t, err)
	secret := strings.TrimSpace(string(b))
	raw, err := hex.DecodeString(secret)
	require.NoError(t, err, secret)
	require.Len(t, raw, 32, "256 random bits")
	fi, err := os.Stat(filepath.Join(s.dir, "cluster-secret"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	code, body := do(t, "POST", s.url+"/api/v1/enqueue", map[string]any{"queue": "doors", "payload": map[string]any{}})
	require.Equal(t, 201, code, string(body))
	id := decode[struct {
		JobID string `json:"job_id"`
	}](t, body).JobID
	calls := []struct{ method, path, body string }{
		{"POST", "/api/v1/cluster/removed", `{"node_id":1}`},
		{"POST", "/api/v1/cluster/join", `{"name":"evil","raft_address":"127.0.0.1:1","http_address":"127.0.0.1:2"}`},
		{"DELETE", "/api/v1/cluster/nodes/1", ``},
		{"POST", "/internal/v1/shards/0/propose", `garbage`},
		{"POST", "/internal/v1/shards/0/read", `garbage`},
		{"POST", "/internal/v1/wait", `{"queues":["doors"]}`},
	}
	for _, c := range calls {
		code, body := do(t, c.method, s.url+c.path, c.body)
		require.Equal(t, 401, code, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, string(body), `"code":"cluster_secret_required"`)
		code, body = doWith(t, c.method, s.url+c.path, c.body, map[string]string{"X-Corvo-Cluster-Secret": strings.Repeat("0", 64)})
		require.Equal(t, 403, code, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, string(body), `"code":"cluster_secret_invalid"`)
	}
	code, body = do(t, "GET", s.url+"/api/v1/cluster/status", nil)
	require.Equal(t, 200, code, string(body))
	require.Equal(t, 1, strings.Count(string(body), `"http_address"`), "no member was added: %s", body)
	code, body = do(t, "GET", s.url+"/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	select {
	case <-s.exited:
		t.Fatal("the node shut down")
	default:
	}
	// With the secret, a well-formed removed notice for another node ID
	// is a 409, not a 401: the credential is what opened the door.
	code, body = doWith(t, "POST", s.url+"/api/v1/cluster/removed", `{"node_id":7}`, map[string]string{"X-Corvo-Cluster-Secret": secret})
	require.Equal(t, 409, code, string(body))
}

// TestE2EJoinNeedsTheClusterSecret: a node asked to join a cluster with
// no secret given refuses to start, saying where to find it; with a wrong
// one the cluster refuses it.
func TestE2EJoinNeedsTheClusterSecret(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	founder := newServer(t)
	run := func(env ...string) (string, int) {
		cmd := exec.Command(corvoBin, "server", "--bind", freeAddr(t), "--raft-bind", freeAddr(t), "--data-dir", t.TempDir(), "--join", founder.http)
		cmd.Env = append(os.Environ(), env...)
		return runCmd(t, cmd)
	}
	out, code := run("CORVO_CLUSTER_SECRET=")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "--cluster-secret-file")
	out, code = run("CORVO_CLUSTER_SECRET=" + strings.Repeat("x", 40))
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "cluster_secret_invalid")
	out, code = run("CORVO_CLUSTER_SECRET=short")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "at least 32")
}
