// Package testcerts makes certificate authorities and certificates for
// tests of TLS: a CA, and certificates it issues for server and client
// authentication with IP and DNS names, written as PEM files.
package testcerts

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CA is a certificate authority of a test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// nextSerial is a random 127-bit serial number.
func nextSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

// NewCA makes a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := newCA(name)
	require.NoError(t, err)
	return ca
}

// MustCA is NewCA for package variables: it panics on error.
func MustCA(name string) *CA {
	ca, err := newCA(name)
	if err != nil {
		panic(err)
	}
	return ca
}

func newCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue makes a certificate for server and client authentication named
// name, valid for the IPs given and for "localhost", and returns it and
// its key, PEM-encoded.
func (ca *CA) Issue(t testing.TB, name string, ips ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
	}
	for _, ip := range ips {
		parsed := net.ParseIP(ip)
		require.NotNil(t, parsed, ip)
		tmpl.IPAddresses = append(tmpl.IPAddresses, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// Files is where IssueFiles put a certificate and its key.
type Files struct{ Cert, Key string }

// IssueFiles is Issue written to <dir>/<name>.crt and <dir>/<name>.key.
func (ca *CA) IssueFiles(t testing.TB, dir, name string, ips ...string) Files {
	t.Helper()
	c, k := ca.Issue(t, name, ips...)
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	require.NoError(t, os.WriteFile(f.Cert, c, 0o600))
	require.NoError(t, os.WriteFile(f.Key, k, 0o600))
	return f
}

// WriteCA writes the CA certificate to <dir>/<name>.crt and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name+".crt")
	require.NoError(t, os.WriteFile(p, ca.PEM, 0o600))
	return p
}

// Pool is a cert pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Get sends one GET on an open connection (TLS or not) and reads the
// answer's status, for tests that keep a connection across a reload.
func Get(t testing.TB, conn net.Conn, r *bufio.Reader, path string) int {
	t.Helper()
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: corvo\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// LeafSerial is the serial number of the certificate the server showed.
func LeafSerial(c *tls.Conn) *big.Int { return c.ConnectionState().PeerCertificates[0].SerialNumber }

// Post sends POST url with the body {} (JSON) and the headers hdr over a
// client with the TLS configuration tc, and returns the status and body
// (an error when the connection or handshake failed).
func Post(tc *tls.Config, url string, hdr map[string]string) (int, string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest("POST", url, strings.NewReader(`{}`))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}
