package node

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/internal/membudget"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	require.Equal(t, "./corvo-data", c.DataDir)
	require.Equal(t, ":8080", c.Bind)
	require.Equal(t, "127.0.0.1:9400", c.RaftBind)
	require.Equal(t, 3, c.Replicas)
	require.Equal(t, 30*time.Second, c.ShutdownTimeout)
	require.Equal(t, uint64(SnapshotEntriesDefault), c.SnapshotEntries)
	require.Zero(t, c.CacheBytes, "sized from the memory budget when Open knows the shard count")
	require.Zero(t, c.MaxMemory, "read from the cgroup or the RAM by Open")
	require.Equal(t, RetentionDefault, c.Retention)
	require.Equal(t, 90*24*time.Hour, c.AuditRetention)
	require.Equal(t, 1<<20, c.MaxPayloadBytes)
	require.NoError(t, c.Validate())
	// Set values are kept.
	c = Config{Bind: "127.0.0.1:1", Replicas: 5, Retention: -1}.WithDefaults()
	require.Equal(t, "127.0.0.1:1", c.Bind)
	require.Equal(t, 5, c.Replicas)
	require.Equal(t, time.Duration(-1), c.Retention)
}

// TestLoopback: which listen addresses accept loopback connections only
// (an open server, a profiler).
func TestLoopback(t *testing.T) {
	for bind, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.5:1": true, "[::1]:8080": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false, "nope": false,
	} {
		require.Equal(t, want, Loopback(bind), bind)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"bootstrap and join", Config{Bootstrap: true, Join: "a:1"}, "exclude each other"},
		{"unknown discovery", Config{Discover: "mdns"}, "--discover must be dns"},
		{"dns without service", Config{Discover: "dns"}, "needs --discover-service"},
		{"no replicas", Config{Replicas: -1}, "--replicas"},
		{"negative shards", Config{Shards: -2}, "--shards"},
		{"bad bind", Config{Bind: "nope"}, "--bind"},
		{"bad raft bind", Config{RaftBind: "nope"}, "--raft-bind"},
		{"bad cors origin", Config{Gateway: gateway.Config{CORSOrigins: []string{"not a url"}}}, "--cors-origin"},
		{"negative memory", Config{MaxMemory: -1}, "--max-memory must be positive"},
		{"tiny memory", Config{MaxMemory: 1 << 20}, "--max-memory must be at least 256MiB"},
		{"pprof off loopback", Config{PprofBind: "0.0.0.0:6060"}, "loopback only"},
		{"pprof on every interface", Config{PprofBind: ":6060"}, "loopback only"},
		{"unknown auth mode", Config{Auth: "maybe"}, "--auth must be"},
		{"malformed admin key", Config{AdminKey: "hunter2"}, "not a Corvo API key"},
		{"oidc secret without issuer", Config{OIDCClientSecretFile: "/nonexistent"}, "--oidc-client-secret-file needs --oidc-issuer"},
		{"oidc without redirect", Config{Gateway: gateway.Config{OIDC: gateway.OIDCConfig{Issuer: "https://id.example", ClientID: "c"}}}, "--oidc-redirect-url"},
		{"oidc unreadable secret", Config{OIDCClientSecretFile: "/nonexistent/secret", Gateway: gateway.Config{OIDC: gateway.OIDCConfig{Issuer: "https://id.example",
			ClientID: "c", RedirectURL: "https://c.example/auth/oidc/callback", RoleMap: []gateway.RoleMapping{{Group: "g", Namespace: "default", Role: "admin"}}}}}, "--oidc-client-secret-file: open"},
	} {
		err := c.cfg.WithDefaults().Validate()
		require.ErrorContains(t, err, c.want, c.name)
	}
}

// TestMemoryPlan: --max-memory is the budget when given; else half of
// what the system reader finds (cgroup limit or RAM), and Open fails
// plainly when it finds nothing.
func TestMemoryPlan(t *testing.T) {
	sys := membudget.System{ReadFile: func(name string) ([]byte, error) {
		if name == "/sys/fs/cgroup/memory.max" {
			return []byte("2147483648\n"), nil
		}
		return nil, fs.ErrNotExist
	}}
	p, from, err := Config{MaxMemory: 1 << 30}.memoryPlan(4, sys)
	require.NoError(t, err)
	require.Equal(t, membudget.NewPlan(1<<30, 4), p)
	require.Equal(t, "--max-memory", from)
	p, from, err = Config{}.memoryPlan(4, sys)
	require.NoError(t, err)
	require.Equal(t, membudget.NewPlan(1<<30, 4), p)
	require.Equal(t, "50% of /sys/fs/cgroup/memory.max", from)
	_, _, err = Config{}.memoryPlan(4, membudget.System{ReadFile: func(string) ([]byte, error) { return nil, fs.ErrNotExist }})
	require.ErrorContains(t, err, "--max-memory is not set")
}

func TestLoadClusterSecret(t *testing.T) {
	log := zerolog.Nop()
	dir := t.TempDir()
	// A founding node generates one, 256 random bits in hex, mode 0600.
	s1, err := LoadClusterSecret(dir, "", "", false, log)
	require.NoError(t, err)
	raw, err := hex.DecodeString(s1)
	require.NoError(t, err)
	require.Len(t, raw, 32)
	fi, err := os.Stat(filepath.Join(dir, ClusterSecretFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	// It is kept: the next start reads it, even as a joined node.
	s2, err := LoadClusterSecret(dir, "", "", true, log)
	require.NoError(t, err)
	require.Equal(t, s1, s2)
	// A given one replaces it (rotation), from a file or directly.
	f := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(f, []byte(strings.Repeat("k", 40)+"\n"), 0o600))
	s3, err := LoadClusterSecret(dir, f, "", true, log)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("k", 40), s3)
	s4, err := LoadClusterSecret(dir, "", "", true, log)
	require.NoError(t, err)
	require.Equal(t, s3, s4, "stored")
	// A joining node never makes its own; short or spaced ones are refused.
	_, err = LoadClusterSecret(t.TempDir(), "", "", true, log)
	require.ErrorContains(t, err, "--cluster-secret-file")
	_, err = LoadClusterSecret(t.TempDir(), "", "short", false, log)
	require.ErrorContains(t, err, "at least 32")
	_, err = LoadClusterSecret(t.TempDir(), "", strings.Repeat("a", 20)+" "+strings.Repeat("b", 20), false, log)
	require.ErrorContains(t, err, "without spaces")
	_, err = LoadClusterSecret(t.TempDir(), filepath.Join(t.TempDir(), "missing"), "", false, log)
	require.ErrorContains(t, err, "--cluster-secret-file")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func testConfig(t *testing.T, dir string) Config {
	return Config{DataDir: dir, Bind: "127.0.0.1:0", RaftBind: freeAddr(t), Logger: zerolog.Nop(),
		Test: TestConfig{RTTMillisecond: 10, ElectionRTT: 10, TickInterval: 20 * time.Millisecond}}
}

// TestNodeOpenServeShutdownReopen: a node opened in a fresh dir serves the
// API; after Shutdown its data dir opens again with the job it took, and
// settings that contradict the data dir are refused as ConfigErrors.
func TestNodeOpenServeShutdownReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	n, err := Open(context.Background(), cfg)
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	url := "http://" + n.Addr()
	req, _ := http.NewRequest("POST", url+"/api/v1/enqueue", strings.NewReader(`{"queue":"nodeq","payload":{}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode, string(body))
	id := strings.Split(strings.Split(string(body), `"job_id":"`)[1], `"`)[0]
	require.NoError(t, n.Shutdown(context.Background()))
	require.NoError(t, n.Shutdown(context.Background()), "a second Shutdown is a no-op")
	_, err = os.Stat(filepath.Join(dir, MetaFile))
	require.NoError(t, err)

	// The shard count is fixed: a contradicting one is a usage error.
	bad := cfg
	bad.Shards = 7
	_, err = Open(context.Background(), bad)
	var ce *ConfigError
	require.True(t, errors.As(err, &ce), "%v", err)

	n, err = Open(context.Background(), cfg)
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	defer n.Close()
	resp, err = http.Get("http://" + n.Addr() + "/api/v1/jobs/" + id)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

// TestNodeOpenUnwindsOnError: when a step of Open fails after the listener
// was opened (here the mirror's file cannot be created), everything opened
// before is closed again: the HTTP port is free.
func TestNodeOpenUnwindsOnError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "mirror.db", "x"), 0o755)) // a directory where the SQLite file goes
	cfg := testConfig(t, dir)
	cfg.Bind = freeAddr(t)
	_, err := Open(context.Background(), cfg)
	require.ErrorContains(t, err, "mirror")
	l, err := net.Listen("tcp", cfg.Bind)
	require.NoError(t, err, "the listener was closed")
	l.Close()
}

// TestAdminKeys: off loopback with no key, the first start writes an admin
// key file (0600) and registers it; a configured admin key is registered
// at start; a revoked one stays revoked across a restart.
func TestAdminKeys(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Bind = "0.0.0.0:0"
	n, err := Open(context.Background(), cfg)
	require.NoError(t, err)
	info, err := os.Stat(filepath.Join(dir, AdminKeyFile))
	require.NoError(t, err, "no admin key file")
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	b, err := os.ReadFile(filepath.Join(dir, AdminKeyFile))
	require.NoError(t, err)
	made, ok := auth.KeyID(strings.TrimSpace(string(b)))
	require.True(t, ok, "the file holds no key")
	k, ok := n.host.Keys().Key(made)
	require.True(t, ok, "the made key is not in the table")
	require.Equal(t, auth.RoleAdmin, k.Role)
	require.Equal(t, -1, k.RateWrite, "the operator's admin key is rate-limited")
	n.Close()

	dir2 := t.TempDir()
	cfg2 := testConfig(t, dir2)
	given, id, _ := auth.NewKey()
	cfg2.AdminKey = given
	n, err = Open(context.Background(), cfg2)
	require.NoError(t, err)
	_, ok = n.host.Keys().Key(id)
	require.True(t, ok, "the configured admin key is not in the table")
	_, err = n.host.ProposeKeys(context.Background(), auth.Cmd{Op: "delete", ID: id, At: 1})
	require.NoError(t, err)
	n.Close()
	n, err = Open(context.Background(), cfg2)
	require.NoError(t, err)
	defer n.Close()
	_, ok = n.host.Keys().Key(id)
	require.False(t, ok, "a revoked admin key came back at a restart")
	require.True(t, n.host.Keys().Revoked(id))
}
