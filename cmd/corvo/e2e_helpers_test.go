package main

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corvohq/corvo/internal/testcerts"
	"github.com/corvohq/corvo/peer"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// corvoBin is the binary built once for the end-to-end tests.
var corvoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corvo-e2e-bin-")
	if err != nil {
		panic(err)
	}
	corvoBin = filepath.Join(dir, "corvo")
	// Every HTTP client of the tests (the partition lab's, SSE readers')
	// and every CLI they run carry the servers' admin key.
	http.DefaultTransport.(*http.Transport).TLSClientConfig = e2eTLS // servers started with TLS certificates of e2eCA
	http.DefaultTransport = withAdminKey{http.DefaultTransport}
	os.Setenv("CORVO_API_KEY", testAdminKey)
	// -tags corvotest: the binary logs each command it runs to
	// CORVO_CMD_LOG, for the every-command check below.
	cmdLog := filepath.Join(dir, "commands.log")
	os.Setenv("CORVO_CMD_LOG", cmdLog)
	args := []string{"build", "-tags", "corvotest", "-o", corvoBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		panic("building corvo: " + err.Error())
	}
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		if missing := unexercised(cmdLog); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test ran these commands: %s\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// server is one real `corvo server` process.
type server struct {
	t      *testing.T
	dir    string
	http   string
	raft   string
	url    string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	extra  []string
	env    []string
	// bind is the --bind address when it differs from http (the address
	// other nodes reach it on), e.g. 0.0.0.0:8080 in a network namespace.
	bind string
	// command builds the process from corvo's arguments; nil: run corvoBin.
	command  func(args []string) *exec.Cmd
	exited   chan struct{}
	exitCode int
}

func newServer(t *testing.T, extra ...string) *server {
	t.Helper()
	s := &server{t: t, dir: t.TempDir(), http: freeAddr(t), raft: freeAddr(t), extra: extra}
	s.url = schemeOf(extra) + s.http
	s.start()
	t.Cleanup(func() {
		if s.cmd != nil && s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

func (s *server) start() {
	s.t.Helper()
	bind := s.http
	if s.bind != "" {
		bind = s.bind
	}
	args := append([]string{"server", "--bind", bind, "--raft-bind", s.raft, "--data-dir", s.dir, "--log-level", cmp.Or(os.Getenv("CORVO_TEST_LOG_LEVEL"), "warn")}, s.extra...)
	if s.command != nil {
		s.cmd = s.command(args)
	} else {
		s.cmd = exec.Command(corvoBin, args...)
		dieWithTest(s.cmd)
	}
	s.cmd.Env = append(append(os.Environ(), "CORVO_ADMIN_KEY="+testAdminKey), s.env...)
	s.stderr = &lockedBuffer{}
	s.cmd.Stderr = s.stderr
	require.NoError(s.t, s.cmd.Start())
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		s.exitCode = s.cmd.ProcessState.ExitCode()
		close(s.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			s.t.Fatalf("server exited during start-up: %s", s.stderr.String())
		default:
		}
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("server did not become healthy: %s", s.stderr.String())
}

// kill9 SIGKILLs the process: no shutdown code runs.
func (s *server) kill9() {
	require.NoError(s.t, s.cmd.Process.Signal(syscall.SIGKILL))
	<-s.exited
}

// stop sends SIGTERM and returns how long the process took to exit.
func (s *server) stop() time.Duration {
	start := time.Now()
	require.NoError(s.t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		// Dump its goroutines (SIGQUIT) into the stderr the test prints.
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		<-s.exited
		s.t.Fatal("server did not stop within 30s of SIGTERM")
	}
	return time.Since(start)
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: withAdminKey{&http.Transport{MaxIdleConnsPerHost: 256, TLSClientConfig: e2eTLS}}}

// e2eCA issues the certificates of servers the tests run with TLS; every
// HTTP client of the tests trusts it (e2eTLS).
var (
	e2eCA  = testcerts.MustCA("corvo e2e CA")
	e2eTLS = &tls.Config{RootCAs: e2eCA.Pool()}
)

// schemeOf is the scheme of a server started with these flags.
func schemeOf(args []string) string {
	if slices.Contains(args, "--tls-cert") || slices.Contains(args, "--peer-tls-ca") {
		return "https://"
	}
	return "http://"
}

// testAdminKey is an admin key of every server the tests start (given as
// CORVO_ADMIN_KEY), so servers that need keys (bound off loopback, as in
// the partition lab) take the tests' calls; the tests' HTTP clients send
// it unless a call sets its own Authorization header.
const testAdminKey = "corvo_00000000000e2e00_e2e-test-admin-key-0123456789abcdefABCDEF_x"

// withAdminKey adds testAdminKey to requests that carry no Authorization.
type withAdminKey struct{ base http.RoundTripper }

func (w withAdminKey) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, set := r.Header["Authorization"]; !set {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+testAdminKey)
	}
	return w.base.RoundTrip(r)
}

// testClusterSecret is the cluster secret of the test clusters' nodes.
const testClusterSecret = "e2e-cluster-secret-0123456789abcdef"

// do sends a JSON request and returns status and body.
func do(t testing.TB, method, url string, body any) (int, []byte) {
	t.Helper()
	return doWith(t, method, url, body, nil)
}

// doPeer is do with the test clusters' secret: a node-to-node call.
func doPeer(t testing.TB, method, url string, body any) (int, []byte) {
	t.Helper()
	return doWith(t, method, url, body, map[string]string{peer.SecretHeader: testClusterSecret})
}

func doWith(t testing.TB, method, url string, body any, header map[string]string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

type fetched struct {
	JobID      string          `json:"job_id"`
	Queue      string          `json:"queue"`
	Payload    json.RawMessage `json:"payload"`
	Priority   string          `json:"priority"`
	Attempt    int             `json:"attempt"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

type jobDoc struct {
	ID       string `json:"id"`
	Queue    string `json:"queue"`
	State    string `json:"state"`
	Attempt  int    `json:"attempt"`
	Priority string `json:"priority"`
	Errors   []struct {
		Attempt int    `json:"attempt"`
		Error   string `json:"error"`
	} `json:"errors"`
	Checkpoint json.RawMessage `json:"checkpoint"`
	Progress   json.RawMessage `json:"progress"`
}

func (s *server) job(t testing.TB, id string) jobDoc {
	t.Helper()
	code, body := do(t, "GET", s.url+"/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, string(body))
	return decode[jobDoc](t, body)
}

// lockedBuffer is an io.Writer a child process writes to while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func queueName(i int) string { return fmt.Sprintf("q%02d", i) }

// unexercised lists the runnable commands of the CLI that no test ran (by
// the log the test binary keeps).
func unexercised(log string) []string {
	data, _ := os.ReadFile(log)
	ran := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		ran[l] = true
	}
	var missing []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Name() != "completion" && !ran[c.CommandPath()] {
			missing = append(missing, c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	return missing
}
