package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/internal/testcerts"
	"github.com/corvohq/corvo/peer"
)

// TestE2ETLSReloadOnSIGHUP: a server started with --tls-cert serves
// HTTPS; after its files are replaced and it gets SIGHUP, a new connection
// sees the new certificate while an open keep-alive connection goes on
// working; a broken file on the next SIGHUP is logged and the certificate
// in use stays.
func TestE2ETLSReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := e2eCA.IssueFiles(t, dir, "api", "127.0.0.1")
	s := newServer(t, "--tls-cert", f.Cert, "--tls-key", f.Key)
	require.True(t, strings.HasPrefix(s.url, "https://"))

	dial := func() (*tls.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", s.http, &tls.Config{RootCAs: e2eCA.Pool()})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	old, oldR := dial()
	require.Equal(t, 200, testcerts.Get(t, old, oldR, "/healthz"))
	first := testcerts.LeafSerial(old)

	c2, k2 := e2eCA.Issue(t, "api-2", "127.0.0.1")
	require.NoError(t, os.WriteFile(f.Cert, c2, 0o600))
	require.NoError(t, os.WriteFile(f.Key, k2, 0o600))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	var second *big.Int
	require.Eventually(t, func() bool {
		c, _ := dial()
		second = testcerts.LeafSerial(c)
		return second.Cmp(first) != 0
	}, 10*time.Second, 20*time.Millisecond, "no new connection saw the new certificate")
	require.Equal(t, 200, testcerts.Get(t, old, oldR, "/healthz"), "the open connection was dropped")
	require.Equal(t, first, testcerts.LeafSerial(old))

	require.NoError(t, os.WriteFile(f.Cert, []byte("not a certificate"), 0o600))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(s.stderr.String(), "keeping the certificate in use") },
		10*time.Second, 20*time.Millisecond)
	c, r := dial()
	require.Equal(t, second, testcerts.LeafSerial(c))
	require.Equal(t, 200, testcerts.Get(t, c, r, "/healthz"))
	select {
	case <-s.exited:
		t.Fatal("SIGHUP stopped the server")
	default:
	}

	// The CLI reaches it with --tls-ca (or CORVO_TLS_CA), not without.
	caFile := e2eCA.WriteCA(t, dir, "ca")
	out, code := runCLI(t, s.url, "queues", "--tls-ca", caFile)
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, s.url, "queues")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "certificate")
	cmd := exec.Command(corvoBin, "queues")
	cmd.Env = append(cmd.Environ(), "CORVO_URL="+s.url, "CORVO_TLS_CA="+caFile)
	out, code = runCmd(t, cmd)
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, s.url, "queues", "--tls-ca", filepath.Join(dir, "missing.pem"))
	require.Equal(t, exitUsage, code, out)
	// corvo top and corvo bench take it too.
	out, code = runCLI(t, s.url, "top", "--once", "-o", "json", "--tls-ca", caFile)
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, s.url, "bench", "--mode", "enqueue", "--jobs", "20", "--tls-ca", caFile)
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, s.url, "top", "--once", "-o", "json")
	require.NotEqual(t, 0, code, "corvo top trusted an unknown CA: %s", out)
}

// tlsStatus is the part of the cluster status the mTLS test reads.
type tlsStatus struct {
	Nodes []struct {
		NodeID uint64 `json:"node_id"`
		HTTP   string `json:"http_address"`
		Status string `json:"status"`
	} `json:"nodes"`
	Meta struct {
		Leader uint64 `json:"leader_node"`
	} `json:"meta"`
}

// doKey sends a request with the API key given (no client certificate).
func doKey(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	var b any
	if body != "" {
		b = body
	}
	return doWith(t, method, url, b, map[string]string{"Authorization": "Bearer " + key})
}

// eventually2xx retries a call until it answers 2xx (an election, a node
// catching up), and fails the test with the last answer after d.
func eventually2xx(t *testing.T, d time.Duration, what string, call func() (int, []byte)) []byte {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, body := call()
		if code >= 200 && code < 300 {
			return body
		}
		require.True(t, time.Now().Before(deadline), "%s: %d %s", what, code, body)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterMutualTLS: three processes on 127.0.0.1–3 with mutual TLS
// between nodes (a peer CA) and the API on certificates of another CA.
// They join over TLS; a job enqueued on one node is fetched on another; an
// API key created on node 1 works on nodes 2 and 3, and still does after
// the meta group's leader is SIGKILLed (a key created then works too, and
// on the killed node once it is back). A peer with a certificate of
// another CA, without one, or speaking plain HTTP is refused at the Raft
// port and on the node-to-node routes; /internal/... with a user key is
// refused.
func TestClusterMutualTLS(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	peerCA := testcerts.NewCA(t, "corvo peer CA")
	caFile := peerCA.WriteCA(t, dir, "peer-ca")
	flags := func(i int) []string {
		ip := fmt.Sprintf("127.0.0.%d", i+1)
		p := peerCA.IssueFiles(t, dir, fmt.Sprintf("peer-%d", i+1), ip)
		a := e2eCA.IssueFiles(t, dir, fmt.Sprintf("api-%d", i+1), ip)
		return []string{"--tls-cert", a.Cert, "--tls-key", a.Key,
			"--peer-tls-ca", caFile, "--peer-tls-cert", p.Cert, "--peer-tls-key", p.Key}
	}
	n1 := newClusterNode(t, 0, "", flags(0)...)
	nodes := []*server{n1, newClusterNode(t, 1, "https://"+n1.http, flags(1)...), newClusterNode(t, 2, n1.http, flags(2)...)}
	waitCluster(t, n1, 3)

	// A job enqueued through node 1 is fetched through node 2.
	code, body := do(t, "POST", n1.url+"/api/v1/enqueue", map[string]any{"queue": "tls.q", "payload": map[string]any{"n": 1}})
	require.Equal(t, 201, code, string(body))
	id := decode[struct {
		ID string `json:"job_id"`
	}](t, body).ID
	got := eventually2xx(t, 20*time.Second, "fetch on node 2", func() (int, []byte) {
		return do(t, "POST", nodes[1].url+"/api/v1/fetch", map[string]any{"queues": []string{"tls.q"}, "worker_id": "w", "timeout": 1})
	})
	require.Contains(t, string(got), id)

	// A producer key created on node 1 works on every node.
	code, body = do(t, "POST", n1.url+"/api/v1/auth/keys", map[string]any{"name": "tls producer", "role": "producer"})
	require.Equal(t, 201, code, string(body))
	key := decode[struct {
		Key string `json:"key"`
	}](t, body).Key
	enqueueWith := func(s *server, key string) func() (int, []byte) {
		return func() (int, []byte) {
			return doKey(t, "POST", s.url+"/api/v1/enqueue", key, `{"queue":"tls.keys","payload":{}}`)
		}
	}
	for _, s := range nodes {
		eventually2xx(t, 20*time.Second, "the key on "+s.http, enqueueWith(s, key))
	}
	// A producer may not list keys: the key is this one, not an admin.
	code, _ = doKey(t, "GET", nodes[2].url+"/api/v1/auth/keys", key, "")
	require.Equal(t, 403, code)

	// SIGKILL the meta group's leader.
	st := decode[tlsStatus](t, eventually2xx(t, 20*time.Second, "status", func() (int, []byte) {
		return do(t, "GET", n1.url+"/api/v1/cluster/status", nil)
	}))
	victim := -1
	for _, n := range st.Nodes {
		for k, s := range nodes {
			if n.NodeID == st.Meta.Leader && n.HTTP == s.http {
				victim = k
			}
		}
	}
	require.GreaterOrEqual(t, victim, 0, "no meta leader in %+v", st)
	nodes[victim].kill9()
	var alive []*server
	for k, s := range nodes {
		if k != victim {
			alive = append(alive, s)
		}
	}
	for _, s := range alive {
		eventually2xx(t, 30*time.Second, "the key on "+s.http+" after the kill", enqueueWith(s, key))
	}
	// A key created now (by the new meta leader) works on the other survivor.
	body = eventually2xx(t, 30*time.Second, "create a key after the kill", func() (int, []byte) {
		return do(t, "POST", alive[0].url+"/api/v1/auth/keys", map[string]any{"name": "after the kill", "role": "producer"})
	})
	key2 := decode[struct {
		Key string `json:"key"`
	}](t, body).Key
	eventually2xx(t, 30*time.Second, "the new key on "+alive[1].http, enqueueWith(alive[1], key2))
	// The killed node comes back over mutual TLS and knows both keys.
	nodes[victim].start()
	eventually2xx(t, 60*time.Second, "the first key on the restarted node", enqueueWith(nodes[victim], key))
	eventually2xx(t, 60*time.Second, "the new key on the restarted node", enqueueWith(nodes[victim], key2))

	target := nodes[(victim+1)%3]
	peerCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "peer-1.crt"), filepath.Join(dir, "peer-1.key"))
	require.NoError(t, err)
	other := testcerts.NewCA(t, "another CA")
	sc, sk := other.Issue(t, "stranger", "127.0.0.1", "127.0.0.2", "127.0.0.3")
	stranger, err := tls.X509KeyPair(sc, sk)
	require.NoError(t, err)
	present := func(c *tls.Certificate) *tls.Config {
		// A peer that offers its certificate whatever CA is asked for.
		tc := &tls.Config{RootCAs: peerCA.Pool(), NextProtos: []string{peer.ALPN}}
		tc.RootCAs.AddCert(e2eCA.Cert)
		if c != nil {
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c, nil }
		}
		return tc
	}

	// The Raft port: a node's certificate is accepted (the control); one
	// of another CA, none, or plain TCP is not.
	raftHandshake := func(tc *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", target.raft, tc)
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: a refused client certificate shows on the first read.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // accepted: the server waits for the transport's first message
		}
		return err
	}
	require.NoError(t, raftHandshake(present(&peerCert)))
	require.Error(t, raftHandshake(present(&stranger)), "a certificate of another CA at the Raft port")
	require.Error(t, raftHandshake(present(nil)), "no certificate at the Raft port")
	plain, err := net.DialTimeout("tcp", target.raft, 5*time.Second)
	require.NoError(t, err)
	_, _ = plain.Write([]byte("plain bytes, not a TLS handshake\r\n\r\n"))
	// Its handshake fails in dragonboat's listener, which never hands the
	// connection to the transport (nor closes it: the goutils listener
	// leaves it to the peer), so it gets nothing back.
	_ = plain.SetReadDeadline(time.Now().Add(3 * time.Second))
	k, _ := plain.Read(make([]byte, 64))
	plain.Close()
	require.Zero(t, k, "a plain peer got an answer at the Raft port")

	// The node-to-node routes.
	internal := target.url + "/internal/v1/shards/0/read"
	callWith := testcerts.Post
	secret := map[string]string{peer.SecretHeader: testClusterSecret}
	st1, b1, err := callWith(present(&peerCert), internal, secret)
	require.NoError(t, err)
	require.Equal(t, 400, st1, "a node's certificate and the secret reach the handler: %s", b1)
	_, _, err = callWith(present(&stranger), internal, secret)
	require.Error(t, err, "a certificate of another CA on a node-to-node route")
	noCert := &tls.Config{RootCAs: e2eCA.Pool()}
	st1, b1, err = callWith(noCert, internal, secret)
	require.NoError(t, err)
	require.Equal(t, 401, st1, b1)
	require.Contains(t, b1, "peer_certificate_required")
	st1, b1, err = callWith(noCert, internal, map[string]string{"Authorization": "Bearer " + testAdminKey})
	require.NoError(t, err)
	require.Equal(t, 401, st1, "/internal with a user key: %s", b1)
	_, _, err = callWith(nil, "http://"+target.http+"/internal/v1/shards/0/read", secret)
	require.Error(t, err, "plain HTTP on a node-to-node route")
	// Joining with the secret but no certificate is refused too.
	st1, b1, err = callWith(noCert, target.url+"/api/v1/cluster/join", secret)
	require.NoError(t, err)
	require.Equal(t, 401, st1, b1)

	// corvo cluster remove: the secret alone is refused, saying which
	// flags give a node certificate; with a node's certificate (from the
	// environment, as on a node) it removes the node, which stops.
	gone := nodes[(victim+2)%3]
	var goneID uint64
	st = decode[tlsStatus](t, eventually2xx(t, 20*time.Second, "status", func() (int, []byte) {
		return do(t, "GET", target.url+"/api/v1/cluster/status", nil)
	}))
	for _, n := range st.Nodes {
		if n.HTTP == gone.http {
			goneID = n.NodeID
		}
	}
	require.NotZero(t, goneID, "%+v", st)
	apiCA := e2eCA.WriteCA(t, dir, "api-ca")
	remove := []string{"cluster", "remove", fmt.Sprint(goneID), "--cluster-secret-file", filepath.Join(target.dir, "cluster-secret")}
	out, code := runCLI(t, target.url, append(remove, "--tls-ca", apiCA)...)
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "peer_certificate_required")
	require.Contains(t, out, "--peer-tls-cert")
	require.NotContains(t, out, "API key", "a node-to-node refusal is not about API keys")
	// With a node certificate the node answers with its own, of the peer
	// CA: --tls-ca (the API's CA) does not verify it.
	out, code = runCLI(t, target.url, append(remove, "--tls-ca", apiCA,
		"--peer-tls-cert", filepath.Join(dir, "peer-1.crt"), "--peer-tls-key", filepath.Join(dir, "peer-1.key"))...)
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "certificate")
	cmd := exec.Command(corvoBin, remove...)
	cmd.Env = append(cmd.Environ(), "CORVO_URL="+target.url, "CORVO_PEER_TLS_CA="+caFile,
		"CORVO_PEER_TLS_CERT="+filepath.Join(dir, "peer-1.crt"), "CORVO_PEER_TLS_KEY="+filepath.Join(dir, "peer-1.key"))
	out, code = runCmd(t, cmd)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "removed from the cluster")
	select {
	case <-gone.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the removed node did not stop")
	}
	waitCluster(t, target, 2)
}
