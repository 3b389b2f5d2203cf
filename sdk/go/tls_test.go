package corvo

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
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
