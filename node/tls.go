package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/peer"
)

// TLS. The API (and the UI) is served over TLS when Config.TLSCert and
// TLSKey are set. Nodes authenticate each other with mutual TLS when the
// peer files (PeerTLSCA, PeerTLSCert, PeerTLSKey) are set: dragonboat's
// Raft transport requires and verifies a client certificate against the
// peer CA, and node-to-node HTTP calls present this node's certificate and
// verify the other node's against the same CA. The HTTP listener is the
// API's: it asks for a client certificate without requiring one (browsers
// and SDKs have none), and the node-to-node routes admit only a caller
// whose certificate verified (peer.Client.Only). A node-to-node call says
// so in its ClientHello (ALPN peer.ALPN): it is then served this node's
// peer certificate, so the API's may come from another CA (a public one).
// With peer TLS and no API certificate, the API is served with the peer
// certificate. Certificates are read again on SIGHUP (ReloadTLS), except
// the Raft transport's listener, which keeps the one it started with.

// certFile is a certificate and key read from files, swapped atomically
// when read again: handshakes take whichever pair is current.
type certFile struct {
	certPath, keyPath string
	cur               atomic.Pointer[tls.Certificate]
}

func newCertFile(certPath, keyPath string) (*certFile, error) {
	c := &certFile{certPath: certPath, keyPath: keyPath}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads the pair; on error the current one stays.
func (c *certFile) load() error {
	pair, err := loadPair(c.certPath, c.keyPath)
	if err != nil {
		return err
	}
	c.cur.Store(&pair)
	return nil
}

func loadPair(certPath, keyPath string) (tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s with key %s: %w", certPath, keyPath, err)
	}
	return pair, nil
}

func (c *certFile) server(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }

func (c *certFile) client(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// loadCA reads a PEM bundle of CA certificates.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--peer-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--peer-tls-ca %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// tlsOn reports whether the API is served over TLS (an API certificate,
// or the peer one).
func (c Config) tlsOn() bool { return c.TLSCert != "" || c.peerTLSOn() }

func (c Config) peerTLSOn() bool { return c.PeerTLSCA != "" }

// validateTLS checks the TLS settings: each set complete, every file
// readable, each pair a certificate with its key, and the node's
// certificate issued by the peer CA.
func (c Config) validateTLS() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSCert != "" {
		if _, err := loadPair(c.TLSCert, c.TLSKey); err != nil {
			return fmt.Errorf("--tls-cert: %w", err)
		}
	}
	set := 0
	for _, f := range []string{c.PeerTLSCA, c.PeerTLSCert, c.PeerTLSKey} {
		if f != "" {
			set++
		}
	}
	if set == 0 {
		return nil
	}
	if set != 3 {
		return errors.New("--peer-tls-ca, --peer-tls-cert and --peer-tls-key go together")
	}
	pool, err := loadCA(c.PeerTLSCA)
	if err != nil {
		return err
	}
	pair, err := loadPair(c.PeerTLSCert, c.PeerTLSKey)
	if err != nil {
		return fmt.Errorf("--peer-tls-cert: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("--peer-tls-cert: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	// The node presents it both as a server and as a client.
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			return fmt.Errorf("--peer-tls-cert %s does not verify against --peer-tls-ca %s for %s: %w", c.PeerTLSCert, c.PeerTLSCA, usageName(use), err)
		}
	}
	return nil
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageClientAuth {
		return "client authentication"
	}
	return "server authentication"
}

// nodeTLS is a node's TLS material, read at Open and again on ReloadTLS.
type nodeTLS struct {
	api   *certFile // nil without --tls-cert
	peer  *certFile // nil without peer TLS
	ca    *x509.CertPool
	roots *x509.CertPool // what node-to-node calls verify servers against
}

// loadTLS reads the configured files (nil when TLS is off).
func loadTLS(c Config) (*nodeTLS, error) {
	if !c.tlsOn() {
		return nil, nil
	}
	t := &nodeTLS{}
	var err error
	if c.TLSCert != "" {
		if t.api, err = newCertFile(c.TLSCert, c.TLSKey); err != nil {
			return nil, err
		}
	}
	if c.peerTLSOn() {
		if t.ca, err = loadCA(c.PeerTLSCA); err != nil {
			return nil, err
		}
		if t.peer, err = newCertFile(c.PeerTLSCert, c.PeerTLSKey); err != nil {
			return nil, err
		}
		t.roots = t.ca
		return t, nil
	}
	// API TLS only: other nodes' API certificates are trusted as the
	// system trusts them, or when they are one of this node's own chain
	// (a self-signed certificate shared by the nodes).
	if t.roots, err = x509.SystemCertPool(); err != nil || t.roots == nil {
		t.roots = x509.NewCertPool()
	}
	for _, der := range t.api.cur.Load().Certificate {
		if cert, err := x509.ParseCertificate(der); err == nil {
			t.roots.AddCert(cert)
		}
	}
	return t, nil
}

// serverConfig is the API listener's TLS: the API certificate (else the
// peer one); with peer TLS, client certificates are asked for and
// verified against the peer CA, and a node-to-node handshake gets the
// peer certificate and must present one.
func (t *nodeTLS) serverConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.api != nil {
		cfg.GetCertificate = t.api.server
	} else {
		cfg.GetCertificate = t.peer.server
	}
	if t.peer == nil {
		return cfg
	}
	cfg.ClientCAs = t.ca
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	peerCfg := cfg.Clone()
	peerCfg.GetCertificate = t.peer.server
	peerCfg.ClientAuth = tls.RequireAndVerifyClientCert
	peerCfg.NextProtos = []string{peer.ALPN}
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(hello.SupportedProtos, peer.ALPN) {
			return peerCfg, nil
		}
		return nil, nil
	}
	return cfg
}

// clientConfig is node-to-node HTTP calls' TLS: servers verified against
// the peer CA (else the system's roots and this node's own certificate),
// this node's peer certificate presented.
func (t *nodeTLS) clientConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: t.roots}
	if t.peer != nil {
		cfg.GetClientCertificate = t.peer.client
		cfg.NextProtos = []string{peer.ALPN}
	}
	return cfg
}

// reload reads every certificate again; a pair that fails to load keeps
// the one in use, and the error says why.
func (t *nodeTLS) reload(log zerolog.Logger) error {
	var errs []error
	for _, c := range []*certFile{t.api, t.peer} {
		if c == nil {
			continue
		}
		if err := c.load(); err != nil {
			log.Error().Err(err).Msg("TLS reload: keeping the certificate in use")
			errs = append(errs, err)
			continue
		}
		log.Info().Str("cert", c.certPath).Msg("TLS certificate reloaded")
	}
	return errors.Join(errs...)
}

// ReloadTLS reads the TLS certificates again (SIGHUP): new handshakes use
// them, open connections are not touched. A file that fails to load
// leaves the certificate in use, and the error says why. Without TLS it
// does nothing.
func (n *Node) ReloadTLS() error {
	if n.tls == nil {
		return nil
	}
	return n.tls.reload(n.log)
}

// joinTLS is the TLS of the join call (nil without TLS).
func (n *Node) joinTLS() *tls.Config {
	if n.tls == nil {
		return nil
	}
	return n.tls.clientConfig()
}
