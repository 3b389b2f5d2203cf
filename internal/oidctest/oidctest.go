// Package oidctest is an OpenID Connect issuer for tests: discovery, a
// JWKS with an RSA key made at start, an authorization endpoint that logs
// the configured user in at once (no page) and redirects back with a code,
// and a token endpoint that checks the client's secret and the PKCE
// verifier and answers a signed ID token carrying the login's nonce. It
// serves over plain HTTP on loopback; nothing here is for production.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// User is who the issuer logs in.
type User struct {
	Subject string
	Email   string
	Name    string
	// Groups is the groups claim: a []string, a string, or nil (absent).
	Groups any
}

// Config is an issuer's settings.
type Config struct {
	ClientID, ClientSecret string
	GroupsClaim            string // default "groups"
	User                   User
}

// Issuer is the test issuer. Set URL before it serves (Handler reads it).
type Issuer struct {
	URL string

	cfg    Config
	key    *rsa.PrivateKey
	kid    string
	signer jose.Signer

	mu       sync.Mutex
	user     User
	ttl      time.Duration // of the ID tokens; negative: already expired
	nonce    *string       // replaces the login's nonce when set
	audience string        // replaces the client ID as aud when set
	deny     string        // when set, /authorize answers error=<deny>
	down     bool          // every endpoint answers 503
	codes    map[string]grant
	// Tokens counts the ID tokens issued.
	tokens int
}

// grant is one authorization code's login.
type grant struct {
	challenge, nonce, redirect string
	user                       User
}

// New makes an issuer (its RSA key included); set URL, then serve Handler.
func New(cfg Config) (*Issuer, error) {
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("oidctest: rsa key: %w", err)
	}
	kid := randomString(8)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("oidctest: signer: %w", err)
	}
	return &Issuer{cfg: cfg, key: key, kid: kid, signer: signer, user: cfg.User, ttl: 5 * time.Minute, codes: map[string]grant{}}, nil
}

// SetUser changes who the next login is.
func (i *Issuer) SetUser(u User) { i.mu.Lock(); i.user = u; i.mu.Unlock() }

// SetTokenTTL sets how long the next ID tokens last (negative: expired).
func (i *Issuer) SetTokenTTL(d time.Duration) { i.mu.Lock(); i.ttl = d; i.mu.Unlock() }

// SetNonce makes the next ID tokens carry nonce instead of the login's
// ("": the login's again).
func (i *Issuer) SetNonce(nonce string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.nonce = nil
	if nonce != "" {
		i.nonce = &nonce
	}
}

// SetAudience makes the next ID tokens name aud instead of the client.
func (i *Issuer) SetAudience(aud string) { i.mu.Lock(); i.audience = aud; i.mu.Unlock() }

// Deny makes the next logins fail with the OAuth error code e ("" again
// lets them through).
func (i *Issuer) Deny(e string) { i.mu.Lock(); i.deny = e; i.mu.Unlock() }

// SetDown makes every endpoint answer 503 (an issuer that is away).
func (i *Issuer) SetDown(down bool) { i.mu.Lock(); i.down = down; i.mu.Unlock() }

// Tokens is how many ID tokens the issuer has handed out.
func (i *Issuer) Tokens() int { i.mu.Lock(); defer i.mu.Unlock(); return i.tokens }

// Handler serves the issuer's endpoints.
func (i *Issuer) Handler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /.well-known/openid-configuration", i.discovery)
	m.HandleFunc("GET /keys", i.jwks)
	m.HandleFunc("GET /authorize", i.authorize)
	m.HandleFunc("POST /token", i.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i.mu.Lock()
		down := i.down
		i.mu.Unlock()
		if down {
			http.Error(w, "the test issuer is down", http.StatusServiceUnavailable)
			return
		}
		m.ServeHTTP(w, r)
	})
}

// Start serves a new issuer on loopback until the test ends.
func Start(t testing.TB, cfg Config) *Issuer {
	t.Helper()
	i, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(i.Handler())
	i.URL = srv.URL
	t.Cleanup(srv.Close)
	return i
}

func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{
		"issuer":                                i.URL,
		"authorization_endpoint":                i.URL + "/authorize",
		"token_endpoint":                        i.URL + "/token",
		"jwks_uri":                              i.URL + "/keys",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"scopes_supported":                      []string{"openid", "email", "profile", "groups"},
	})
}

func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: "RS256", Use: "sig"}}})
}

// authorize logs the configured user in and redirects back with a code.
func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect := q.Get("redirect_uri")
	switch {
	case q.Get("client_id") != i.cfg.ClientID:
		http.Error(w, "unknown client_id", 400)
		return
	case q.Get("response_type") != "code" || !strings.Contains(" "+q.Get("scope")+" ", " openid "):
		http.Error(w, "response_type must be code and scope must hold openid", 400)
		return
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		http.Error(w, "PKCE S256 is required", 400)
		return
	case q.Get("state") == "" || q.Get("nonce") == "":
		http.Error(w, "state and nonce are required", 400)
		return
	}
	back, err := url.Parse(redirect)
	if err != nil || redirect == "" {
		http.Error(w, "bad redirect_uri", 400)
		return
	}
	v := url.Values{"state": {q.Get("state")}}
	i.mu.Lock()
	if i.deny != "" {
		v.Set("error", i.deny)
		v.Set("error_description", "the test issuer denies this login")
	} else {
		code := randomString(16)
		i.codes[code] = grant{challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: redirect, user: i.user}
		v.Set("code", code)
	}
	i.mu.Unlock()
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token exchanges a code for an ID token.
func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, 400, "invalid_request", err.Error())
		return
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != i.cfg.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(i.cfg.ClientSecret)) != 1 {
		tokenError(w, 401, "invalid_client", "wrong client ID or secret")
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" {
		tokenError(w, 400, "unsupported_grant_type", "only authorization_code")
		return
	}
	i.mu.Lock()
	g, ok := i.codes[r.PostForm.Get("code")]
	delete(i.codes, r.PostForm.Get("code")) // one use
	ttl, nonce, aud := i.ttl, g.nonce, i.cfg.ClientID
	if i.nonce != nil {
		nonce = *i.nonce
	}
	if i.audience != "" {
		aud = i.audience
	}
	i.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case !ok:
		tokenError(w, 400, "invalid_grant", "unknown or used code")
		return
	case r.PostForm.Get("redirect_uri") != g.redirect:
		tokenError(w, 400, "invalid_grant", "redirect_uri differs from the authorization request's")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		tokenError(w, 400, "invalid_grant", "the PKCE verifier does not match the challenge")
		return
	}
	now := time.Now()
	claims := map[string]any{
		"iss": i.URL, "sub": g.user.Subject, "aud": aud, "nonce": nonce,
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(),
	}
	if g.user.Email != "" {
		claims["email"] = g.user.Email
	}
	if g.user.Name != "" {
		claims["name"] = g.user.Name
	}
	if g.user.Groups != nil {
		claims[i.cfg.GroupsClaim] = g.user.Groups
	}
	payload, _ := json.Marshal(claims)
	jws, err := i.signer.Sign(payload)
	if err != nil {
		tokenError(w, 500, "server_error", err.Error())
		return
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		tokenError(w, 500, "server_error", err.Error())
		return
	}
	i.mu.Lock()
	i.tokens++
	i.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, 200, map[string]any{"access_token": randomString(16), "token_type": "Bearer", "expires_in": 300, "id_token": raw})
}

func tokenError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
