package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/internal/testcerts"
	"github.com/corvohq/corvo/peer"
)

func TestConfigValidateTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "corvo test CA")
	other := testcerts.NewCA(t, "another CA")
	caFile := ca.WriteCA(t, dir, "ca")
	node := ca.IssueFiles(t, dir, "node", "127.0.0.1")
	stranger := other.IssueFiles(t, dir, "stranger", "127.0.0.1")
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	missing := filepath.Join(dir, "missing.pem")

	ok := Config{TLSCert: node.Cert, TLSKey: node.Key, PeerTLSCA: caFile, PeerTLSCert: node.Cert, PeerTLSKey: node.Key}
	require.NoError(t, ok.WithDefaults().Validate())
	require.NoError(t, Config{TLSCert: stranger.Cert, TLSKey: stranger.Key}.WithDefaults().Validate(), "the API certificate may come from any CA")

	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"cert without key", Config{TLSCert: node.Cert}, "--tls-cert and --tls-key go together"},
		{"key without cert", Config{TLSKey: node.Key}, "--tls-cert and --tls-key go together"},
		{"missing cert", Config{TLSCert: missing, TLSKey: node.Key}, "--tls-cert"},
		{"cert of another key", Config{TLSCert: node.Cert, TLSKey: stranger.Key}, "private key does not match"},
		{"unreadable cert", Config{TLSCert: garbage, TLSKey: node.Key}, "--tls-cert"},
		{"peer CA alone", Config{PeerTLSCA: caFile}, "go together"},
		{"peer cert without CA", Config{PeerTLSCert: node.Cert, PeerTLSKey: node.Key}, "go together"},
		{"missing peer CA", Config{PeerTLSCA: missing, PeerTLSCert: node.Cert, PeerTLSKey: node.Key}, "--peer-tls-ca"},
		{"peer CA not PEM", Config{PeerTLSCA: garbage, PeerTLSCert: node.Cert, PeerTLSKey: node.Key}, "no PEM certificate"},
		{"peer cert of another CA", Config{PeerTLSCA: caFile, PeerTLSCert: stranger.Cert, PeerTLSKey: stranger.Key}, "does not verify against --peer-tls-ca"},
		{"peer cert of another key", Config{PeerTLSCA: caFile, PeerTLSCert: node.Cert, PeerTLSKey: stranger.Key}, "--peer-tls-cert"},
	} {
		err := c.cfg.WithDefaults().Validate()
		require.ErrorContains(t, err, c.want, c.name)
	}
}

const testAdminKey = "corvo_00000000000e2e00_e2e-test-admin-key-0123456789abcdefABCDEF_x"

// TestNodeTLSReloadKeepsConnections: the API is served over TLS; ReloadTLS
// (SIGHUP) makes new handshakes use the new certificate while an open
// keep-alive connection keeps working; a bad file leaves the certificate
// in use. The UI's session cookie is Secure over TLS.
func TestNodeTLSReloadKeepsConnections(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "corvo test CA")
	first := ca.IssueFiles(t, dir, "api", "127.0.0.1")
	cfg := testConfig(t, filepath.Join(dir, "data"))
	cfg.TLSCert, cfg.TLSKey, cfg.AdminKey = first.Cert, first.Key, testAdminKey
	n, err := Open(context.Background(), cfg)
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	defer n.Close()
	tc := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	dial := func() (*tls.Conn, *bufio.Reader) {
		conn, err := tls.Dial("tcp", n.Addr(), tc)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return conn, bufio.NewReader(conn)
	}
	old, oldR := dial()
	require.Equal(t, 200, testcerts.Get(t, old, oldR, "/healthz"))
	s1 := testcerts.LeafSerial(old)

	// TLS 1.1 is refused.
	_, err = tls.Dial("tcp", n.Addr(), &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11})
	require.Error(t, err)

	// Plain HTTP gets nothing.
	_, err = http.Get("http://" + n.Addr() + "/healthz")
	require.Error(t, err)

	// The new pair replaces the files; ReloadTLS takes it.
	c2, k2 := ca.Issue(t, "api-2", "127.0.0.1")
	require.NoError(t, os.WriteFile(first.Cert, c2, 0o600))
	require.NoError(t, os.WriteFile(first.Key, k2, 0o600))
	require.NoError(t, n.ReloadTLS())
	fresh, freshR := dial()
	s2 := testcerts.LeafSerial(fresh)
	require.NotEqual(t, s1, s2, "a new connection sees the new certificate")
	require.Equal(t, 200, testcerts.Get(t, fresh, freshR, "/healthz"))
	require.Equal(t, 200, testcerts.Get(t, old, oldR, "/healthz"), "the open connection was kept")
	require.Equal(t, s1, testcerts.LeafSerial(old))

	// A broken file is refused and the certificate in use stays.
	require.NoError(t, os.WriteFile(first.Cert, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), 0o600))
	require.Error(t, n.ReloadTLS())
	again, againR := dial()
	require.Equal(t, s2, testcerts.LeafSerial(again))
	require.Equal(t, 200, testcerts.Get(t, again, againR, "/healthz"))

	// Logging in over TLS sets a Secure cookie.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	req, _ := http.NewRequest("POST", "https://"+n.Addr()+"/api/v1/auth/session", strings.NewReader(`{"key":"`+testAdminKey+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	require.True(t, resp.Cookies()[0].Secure, "the session cookie is Secure over TLS")
}

// TestNodePeerRoutesNeedAPeerCertificate: with mutual TLS between nodes,
// the node-to-node routes admit a caller only with a client certificate
// of the peer CA and the cluster secret; user routes still take callers
// without a certificate; a certificate of another CA fails the handshake.
func TestNodePeerRoutesNeedAPeerCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "corvo peer CA")
	other := testcerts.NewCA(t, "another CA")
	caFile := ca.WriteCA(t, dir, "ca")
	nodeFiles := ca.IssueFiles(t, dir, "node", "127.0.0.1")
	cfg := testConfig(t, filepath.Join(dir, "data"))
	cfg.PeerTLSCA, cfg.PeerTLSCert, cfg.PeerTLSKey = caFile, nodeFiles.Cert, nodeFiles.Key
	cfg.AdminKey, cfg.Auth = testAdminKey, AuthOn
	const secret = "node-test-cluster-secret-0123456789abcdef"
	cfg.ClusterSecret = secret
	n, err := Open(context.Background(), cfg)
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	defer n.Close()

	call := func(cert *tls.Certificate, alpn bool, path string, hdr map[string]string) (int, string, error) {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			// Presented whatever CAs the server asks for.
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		if alpn {
			tc.NextProtos = []string{peer.ALPN}
		}
		return testcerts.Post(tc, "https://"+n.Addr()+path, hdr)
	}
	nodeCert, err := tls.LoadX509KeyPair(nodeFiles.Cert, nodeFiles.Key)
	require.NoError(t, err)
	sc, sk := other.Issue(t, "stranger", "127.0.0.1")
	strangerCert, err := tls.X509KeyPair(sc, sk)
	require.NoError(t, err)
	const internal = "/internal/v1/shards/0/read"
	withSecret := map[string]string{peer.SecretHeader: secret}

	// No certificate: refused, with the secret or a user key.
	st, body, err := call(nil, false, internal, withSecret)
	require.NoError(t, err)
	require.Equal(t, 401, st, body)
	require.Contains(t, body, "peer_certificate_required")
	st, body, err = call(nil, false, internal, map[string]string{"Authorization": "Bearer " + testAdminKey})
	require.NoError(t, err)
	require.Equal(t, 401, st, body)
	// A user route with the secret and no certificate is refused too:
	// the secret alone no longer stands for a node.
	st, body, err = call(nil, false, "/api/v1/queues/q/pause", withSecret)
	require.NoError(t, err)
	require.Equal(t, 401, st, body)
	require.Contains(t, body, "peer_certificate_required")
	// A user route with a key and no certificate works (browsers, SDKs).
	st, body, err = call(nil, false, "/api/v1/queues/q/pause", map[string]string{"Authorization": "Bearer " + testAdminKey})
	require.NoError(t, err)
	require.Equal(t, 200, st, body)

	// The node's certificate and the secret: admitted (the empty body is
	// then the handler's 400), whether or not it says it is a peer.
	for _, alpn := range []bool{false, true} {
		st, body, err = call(&nodeCert, alpn, internal, withSecret)
		require.NoError(t, err)
		require.Equal(t, 400, st, body)
		// The certificate without the secret is not enough.
		st, body, err = call(&nodeCert, alpn, internal, nil)
		require.NoError(t, err)
		require.Equal(t, 401, st, body)
		require.Contains(t, body, "cluster_secret_required")
	}

	// A certificate of another CA, or none when saying it is a peer:
	// the handshake fails.
	_, _, err = call(&strangerCert, false, internal, withSecret)
	require.Error(t, err)
	_, _, err = call(&strangerCert, true, internal, withSecret)
	require.Error(t, err)
	_, _, err = call(nil, true, internal, withSecret)
	require.Error(t, err)
}
