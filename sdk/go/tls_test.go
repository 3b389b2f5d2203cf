package corvo

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A server whose certificate no system CA issued is reached once the
// client trusts its CA (WithTLSConfig, TLSConfigFromCA); without it the
// call fails.
func TestClientTrustsAGivenCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"queues":[]}`))
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	plain := New(srv.URL)
	plain.MaxRetries = 0
	if _, err := plain.Queues(ctx); err == nil {
		t.Fatal("an unknown CA was trusted")
	}

	tc, err := TLSConfigFromCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Client{
		"default client":  New(srv.URL, WithTLSConfig(tc)),
		"own http.Client": New(srv.URL, WithHTTPClient(&http.Client{}), WithTLSConfig(tc)),
	} {
		if _, err := c.Queues(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	if _, err := TLSConfigFromCA(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	junk := filepath.Join(t.TempDir(), "junk.pem")
	_ = os.WriteFile(junk, []byte("junk"), 0o600)
	if _, err := TLSConfigFromCA(junk); err == nil {
		t.Fatal("a file without certificates was accepted")
	}
}

// testCA issues certificates for 127.0.0.1, for server and client
// authentication; files are PEM in dir.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

func newTestCA(t *testing.T, dir string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test peer CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, dir: dir}
	ca.write(t, "ca.crt", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue writes name.crt and name.key and returns the pair and the paths.
func (ca *testCA) issue(t *testing.T, name string, serial int64) (tls.Certificate, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := ca.write(t, name+".crt", "CERTIFICATE", der), ca.write(t, name+".key", "EC PRIVATE KEY", kder)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certFile, keyFile
}

// RemoveNode on a cluster with mutual TLS between nodes: with
// PeerTLSConfig the handshake offers PeerALPN and presents the node
// certificate, and the call carries the cluster secret. The test server
// does what a node does: a handshake offering PeerALPN must present a
// certificate of the peer CA, any other is not asked for one (and the
// node-to-node route then refuses the call).
func TestRemoveNodeWithPeerTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	srvPair, _, _ := ca.issue(t, "node", 2)
	_, certFile, keyFile := ca.issue(t, "operator", 3)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)

	type seen struct{ client, secret, path string }
	got := make(chan seen, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"no node certificate","code":"peer_certificate_required"}`))
			return
		}
		got <- seen{r.TLS.PeerCertificates[0].Subject.CommonName, r.Header.Get(ClusterSecretHeader), r.Method + " " + r.URL.Path}
		w.WriteHeader(http.StatusNoContent)
	}))
	peerCfg := &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvPair},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if slices.Contains(hello.SupportedProtos, PeerALPN) {
				return peerCfg, nil
			}
			return nil, nil
		}}
	srv.StartTLS()
	defer srv.Close()
	ctx := context.Background()

	tc, err := PeerTLSConfig(filepath.Join(dir, "ca.crt"), certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c := New(srv.URL, WithTLSConfig(tc), WithClusterSecret("the-secret"))
	c.MaxRetries = 0
	if err := c.RemoveNode(ctx, 7); err != nil {
		t.Fatal(err)
	}
	want := seen{"operator", "the-secret", "DELETE /api/v1/cluster/nodes/7"}
	if s := <-got; s != want {
		t.Fatalf("server saw %+v, want %+v", s, want)
	}

	caOnly, err := TLSConfigFromCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	noCert := New(srv.URL, WithTLSConfig(caOnly), WithClusterSecret("the-secret"))
	noCert.MaxRetries = 0
	var e *Error
	if err := noCert.RemoveNode(ctx, 7); !errors.As(err, &e) || e.Code != CodePeerCertificateRequired {
		t.Fatalf("a call without PeerTLSConfig: %v, want %s", err, CodePeerCertificateRequired)
	}

	if _, err := PeerTLSConfig(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "missing.crt"), keyFile); err == nil {
		t.Fatal("a missing certificate file was accepted")
	}
	if _, err := PeerTLSConfig(filepath.Join(dir, "missing-ca.crt"), certFile, keyFile); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
}
