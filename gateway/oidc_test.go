package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/internal/oidctest"
	"github.com/corvohq/corvo/peer"
	corvo "github.com/corvohq/corvo/sdk/go"
)

const (
	ssoClientID     = "corvo-test"
	ssoClientSecret = "test-client-secret"
)

// ssoServer is a gateway that requires keys and signs users in at iss,
// with roleMap (group=namespace:role entries). It listens before it is
// built: the redirect URL names its port.
func ssoServer(t *testing.T, iss *oidctest.Issuer, roleMap ...string) (string, Keys) {
	t.Helper()
	keys, ok := testEngine.(Keys)
	require.True(t, ok, "the test engine has no key table")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	rm, err := ParseRoleMap(roleMap)
	require.NoError(t, err)
	cfg := Config{Auth: AuthRequired, Keys: keys, Logger: zerolog.Nop(),
		Peer: peer.New(peer.Config{Secret: testClusterSecret, Logger: zerolog.Nop()}),
		OIDC: OIDCConfig{Issuer: iss.URL, ClientID: ssoClientID, ClientSecret: ssoClientSecret,
			RedirectURL: base + "/auth/oidc/callback", RoleMap: rm, DiscoveryTimeout: 2 * time.Second},
		ProviderRebalance: -1} // the shared engine's providers are other tests'
	srv := New(cfg, testEngine)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	go func() { _ = srv.Serve(ln) }()
	return base, keys
}

// browser is an HTTP client with cookies that stops at every redirect.
type browser struct {
	t   *testing.T
	c   *http.Client
	jar *cookiejar.Jar
}

func newBrowser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	return &browser{t: t, c: c, jar: jar}
}

// do sends one request (no redirect followed); it returns the answer with
// its body read.
func (b *browser) do(method, u string, headers ...string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(b.t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.c.Do(req)
	require.NoError(b.t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// signIn runs the whole login from base's login URL, following redirects;
// it returns the last answer (the callback's, or a refusal on the way).
func (b *browser) signIn(base string) (*http.Response, string) {
	b.t.Helper()
	u := base + OIDCLoginPath
	for range 5 {
		resp, body := b.do("GET", u)
		if resp.StatusCode != http.StatusFound || strings.HasPrefix(u, base+oidcCallback) {
			return resp, body
		}
		next, err := resp.Location()
		require.NoError(b.t, err)
		u = next.String()
	}
	b.t.Fatal("too many redirects")
	return nil, ""
}

func (b *browser) cookie(base, name string) *http.Cookie {
	u, _ := url.Parse(base)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func setCookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// TestSSOSignIn: the whole flow against the test's own issuer — a PKCE
// S256 redirect with state and nonce in a Lax login cookie; back at the
// callback, an HttpOnly, SameSite=Strict session ending with the ID token;
// whoami shows the user and their grants (the most powerful role per
// namespace); the session acts in a granted namespace with that role, is
// refused in another, is recorded in the audit log; a tampered cookie is
// 401; logout clears it.
func TestSSOSignIn(t *testing.T) {
	iss := oidctest.Start(t, oidctest.Config{ClientID: ssoClientID, ClientSecret: ssoClientSecret,
		User: oidctest.User{Subject: "u-42", Email: "ada@example.test", Groups: []string{"ops", "viewers", "unrelated"}}})
	base, keys := ssoServer(t, iss, "ops=default:operator", "viewers=default:readonly", "viewers=sso-team-a:readonly", "admins=sso-team-b:admin")
	for _, ns := range []string{"sso-team-a", "sso-team-b"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := keys.ProposeKeys(ctx, auth.Cmd{Op: "ns.put", Namespace: &auth.Namespace{Name: ns}})
		cancel()
		require.NoError(t, err)
	}
	b := newBrowser(t)

	_, methods := b.do("GET", base+"/api/v1/auth/methods")
	require.JSONEq(t, `{"api_key":true,"sso":{"enabled":true,"login_url":"/auth/oidc/login"}}`, methods)

	resp, _ := b.do("GET", base+OIDCLoginPath)
	require.Equal(t, http.StatusFound, resp.StatusCode)
	to, err := resp.Location()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(to.String(), iss.URL+"/authorize?"), to.String())
	q := to.Query()
	require.Equal(t, "S256", q.Get("code_challenge_method"))
	require.NotEmpty(t, q.Get("code_challenge"))
	require.NotEmpty(t, q.Get("state"))
	require.NotEmpty(t, q.Get("nonce"))
	require.Equal(t, ssoClientID, q.Get("client_id"))
	require.Equal(t, base+"/auth/oidc/callback", q.Get("redirect_uri"))
	flow := setCookie(resp, oidcFlowCookie)
	require.NotNil(t, flow)
	require.True(t, flow.HttpOnly)
	require.Equal(t, http.SameSiteLaxMode, flow.SameSite)
	require.NotContains(t, flow.Value, q.Get("state"), "the login cookie shows its state in the clear")

	resp, body := b.signIn(base)
	require.Equal(t, http.StatusFound, resp.StatusCode, body)
	require.Equal(t, "/ui/", resp.Header.Get("Location"))
	session := setCookie(resp, SessionCookie)
	require.NotNil(t, session, "no session cookie")
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.True(t, strings.HasPrefix(session.Value, "v2."))
	require.True(t, session.Expires.Before(time.Now().Add(5*time.Minute+time.Minute)), "the session outlives the ID token: %s", session.Expires)
	require.Nil(t, b.cookie(base+"/auth/oidc/", oidcFlowCookie), "the login cookie outlived the callback")

	_, out := b.do("GET", base+"/api/v1/auth/whoami")
	who := strictDecode[corvo.WhoAmI](t, "whoami", []byte(out))
	require.True(t, who.SSO)
	require.Equal(t, "ada@example.test", who.Name)
	require.Equal(t, "sso:u-42", who.KeyID)
	require.Equal(t, "default", who.Namespace)
	require.Equal(t, "operator", who.Role, "the most powerful of the roles its groups give in default")
	require.Equal(t, map[string]string{"default": "operator", "sso-team-a": "readonly"}, who.Grants)

	// In default, an operator: may pause a queue. In sso-team-a, readonly:
	// may list, may not pause. In sso-team-b (no grant): refused.
	resp, body = b.do("POST", base+"/api/v1/queues/sso-q/pause", "Content-Type", "application/json")
	require.NotContains(t, []int{401, 403}, resp.StatusCode, body)
	resp, body = b.do("GET", base+"/api/v1/queues", NamespaceHeader, "sso-team-a")
	require.Equal(t, 200, resp.StatusCode, body)
	resp, body = b.do("POST", base+"/api/v1/queues/sso-q/pause", NamespaceHeader, "sso-team-a", "Content-Type", "application/json")
	require.Equal(t, 403, resp.StatusCode, body)
	resp, body = b.do("GET", base+"/api/v1/queues", NamespaceHeader, "sso-team-b")
	require.Equal(t, 403, resp.StatusCode, body)
	require.Contains(t, body, `may not act in namespace \"sso-team-b\"`)
	_, out = b.do("GET", base+"/api/v1/auth/whoami", NamespaceHeader, "sso-team-a")
	require.Equal(t, "readonly", strictDecode[corvo.WhoAmI](t, "whoami", []byte(out)).Role)

	// The sign-in is in the audit log under the user.
	admin := putKey(t, keys, auth.Key{Name: "sso-auditor", Role: auth.RoleAdmin, Enabled: true})
	st, _, raw := callKey(t, "GET", base+"/api/v1/audit?key_id=sso:u-42", admin, nil)
	require.Equal(t, 200, st, string(raw))
	require.Contains(t, string(raw), "sign in with single sign-on")
	require.Contains(t, string(raw), "ada@example.test")

	// A tampered token is refused.
	u, _ := url.Parse(base)
	real := *session
	bad := real
	bad.Value = real.Value[:len(real.Value)-2] + "AA"
	if bad.Value == real.Value {
		bad.Value = real.Value[:len(real.Value)-2] + "BB"
	}
	b.jar.SetCookies(u, []*http.Cookie{&bad})
	resp, body = b.do("GET", base+"/api/v1/queues")
	require.Equal(t, 401, resp.StatusCode, body)
	b.jar.SetCookies(u, []*http.Cookie{&real})
	resp, _ = b.do("GET", base+"/api/v1/queues")
	require.Equal(t, 200, resp.StatusCode)

	// Log out: the cookie is cleared; the browser is out.
	resp, body = b.do("DELETE", base+"/api/v1/auth/session")
	require.Equal(t, 200, resp.StatusCode, body)
	require.Nil(t, b.cookie(base, SessionCookie), "logout left the session cookie")
	resp, _ = b.do("GET", base+"/api/v1/auth/whoami")
	require.Equal(t, 401, resp.StatusCode)
	st, _, raw = callKey(t, "GET", base+"/api/v1/audit?key_id=sso:u-42&method=DELETE", admin, nil)
	require.Equal(t, 200, st)
	require.Contains(t, string(raw), "log out", "the logout is not recorded under the user")
}

// TestSSORefusals: every way a sign-in must fail does, with a message
// that says why, and sets no session.
func TestSSORefusals(t *testing.T) {
	user := oidctest.User{Subject: "u-7", Email: "bob@example.test", Groups: []string{"ops"}}
	iss := oidctest.Start(t, oidctest.Config{ClientID: ssoClientID, ClientSecret: ssoClientSecret, User: user})
	base, _ := ssoServer(t, iss, "ops=default:readonly")

	refused := func(t *testing.T, b *browser, resp *http.Response, body string, status int, want string) {
		t.Helper()
		require.Equal(t, status, resp.StatusCode, body)
		require.Contains(t, body, want)
		require.Nil(t, setCookie(resp, SessionCookie), "a refused sign-in set a session")
		require.Nil(t, b.cookie(base, SessionCookie))
	}
	// startAt starts a login and returns the issuer's redirect back.
	startAt := func(b *browser) *url.URL {
		resp, _ := b.do("GET", base+OIDCLoginPath)
		to, err := resp.Location()
		require.NoError(t, err)
		resp, _ = b.do("GET", to.String())
		back, err := resp.Location()
		require.NoError(t, err)
		return back
	}

	t.Run("state mismatch", func(t *testing.T) {
		b := newBrowser(t)
		back := startAt(b)
		q := back.Query()
		q.Set("state", "not-the-state")
		back.RawQuery = q.Encode()
		resp, body := b.do("GET", back.String())
		refused(t, b, resp, body, 400, "the state does not match")
	})
	t.Run("no login cookie", func(t *testing.T) {
		b := newBrowser(t)
		back := startAt(b)
		resp, body := newBrowser(t).do("GET", back.String())
		refused(t, b, resp, body, 400, "not started by this browser")
	})
	t.Run("a code used twice", func(t *testing.T) {
		b := newBrowser(t)
		back := startAt(b)
		flow := b.cookie(base+"/auth/oidc/", oidcFlowCookie)
		resp, _ := b.do("GET", back.String())
		require.Equal(t, 302, resp.StatusCode)
		b2 := newBrowser(t)
		u, _ := url.Parse(base + "/auth/oidc/")
		b2.jar.SetCookies(u, []*http.Cookie{flow})
		resp, body := b2.do("GET", back.String())
		refused(t, b2, resp, body, 401, "the identity provider refused the code: invalid_grant")
	})
	t.Run("wrong nonce", func(t *testing.T) {
		iss.SetNonce("someone-elses-nonce")
		defer iss.SetNonce("")
		b := newBrowser(t)
		resp, body := b.signIn(base)
		refused(t, b, resp, body, 401, "nonce")
	})
	t.Run("expired ID token", func(t *testing.T) {
		iss.SetTokenTTL(-time.Minute)
		defer iss.SetTokenTTL(5 * time.Minute)
		b := newBrowser(t)
		resp, body := b.signIn(base)
		refused(t, b, resp, body, 401, "expired")
	})
	t.Run("another audience", func(t *testing.T) {
		iss.SetAudience("some-other-client")
		defer iss.SetAudience("")
		b := newBrowser(t)
		resp, body := b.signIn(base)
		refused(t, b, resp, body, 401, "audience")
	})
	t.Run("the issuer's error", func(t *testing.T) {
		iss.Deny("access_denied")
		defer iss.Deny("")
		b := newBrowser(t)
		resp, body := b.signIn(base)
		refused(t, b, resp, body, 401, "access_denied: the test issuer denies this login")
	})
	t.Run("unmapped groups", func(t *testing.T) {
		iss.SetUser(oidctest.User{Subject: "u-8", Email: "eve@example.test", Groups: []string{"interns", "guests"}})
		defer iss.SetUser(user)
		b := newBrowser(t)
		resp, body := b.signIn(base)
		refused(t, b, resp, body, 403, `eve@example.test signed in, but none of their groups [\"interns\" \"guests\"] is mapped`)
		var e corvo.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(body), &e))
		require.Equal(t, "forbidden", e.Code)
	})
	t.Run("no groups claim, as a page", func(t *testing.T) {
		iss.SetUser(oidctest.User{Subject: "u-9", Email: "sam@example.test"})
		defer iss.SetUser(user)
		b := newBrowser(t)
		back := startAt(b)
		resp, body := b.do("GET", back.String(), "Accept", "text/html")
		refused(t, b, resp, body, 403, `the ID token has no &#34;groups&#34; claim`)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	})
	t.Run("one group as a string", func(t *testing.T) {
		iss.SetUser(oidctest.User{Subject: "u-10", Email: "kim@example.test", Groups: "ops"})
		defer iss.SetUser(user)
		b := newBrowser(t)
		resp, body := b.signIn(base)
		require.Equal(t, 302, resp.StatusCode, body)
		require.NotNil(t, setCookie(resp, SessionCookie))
	})
}

// TestSSOIssuerAwayAtStart: a server whose issuer cannot be read at start
// still starts; a login then answers 503 and, once the issuer is back,
// works (discovery retried lazily).
func TestSSOIssuerAwayAtStart(t *testing.T) {
	iss := oidctest.Start(t, oidctest.Config{ClientID: ssoClientID, ClientSecret: ssoClientSecret,
		User: oidctest.User{Subject: "u-1", Email: "al@example.test", Groups: []string{"ops"}}})
	iss.SetDown(true)
	base, _ := ssoServer(t, iss, "ops=default:readonly")
	b := newBrowser(t)
	resp, body := b.do("GET", base+OIDCLoginPath)
	require.Equal(t, 503, resp.StatusCode, body)
	require.Contains(t, body, "cannot be reached")
	iss.SetDown(false)
	resp, body = b.signIn(base)
	require.Equal(t, 302, resp.StatusCode, body)
	require.NotNil(t, setCookie(resp, SessionCookie))
}

// TestSSOOff: without an issuer the login routes are 404 and the UI is
// told to ask for a key.
func TestSSOOff(t *testing.T) {
	_, url, _ := keysServer(t, Config{})
	st, code, out := callKey(t, "GET", url+OIDCLoginPath, "", nil)
	require.Equal(t, 404, st, string(out))
	require.Equal(t, "not_found", code)
	st, _, out = callKey(t, "GET", url+"/api/v1/auth/methods", "", nil)
	require.Equal(t, 200, st)
	require.JSONEq(t, `{"api_key":true,"sso":{"enabled":false}}`, string(out))
}

// TestOIDCConfig: the role map's syntax, roles and namespaces, and the
// settings an issuer needs, are checked with errors naming the flag.
func TestOIDCConfig(t *testing.T) {
	rm, err := ParseRoleMap([]string{"ops=default:operator", " a=b:readonly "})
	require.NoError(t, err)
	require.Equal(t, []RoleMapping{{"ops", "default", "operator"}, {"a", "b", "readonly"}}, rm)
	for _, bad := range []string{"ops", "ops=default", "=default:admin"} {
		_, err := ParseRoleMap([]string{bad})
		require.ErrorContains(t, err, "want group=namespace:role", bad)
	}
	ok := OIDCConfig{Issuer: "https://id.example", ClientID: "c", RedirectURL: "https://corvo.example/auth/oidc/callback", RoleMap: rm}
	require.NoError(t, ok.Validate())
	for _, c := range []struct {
		mod  func(*OIDCConfig)
		want string
	}{
		{func(c *OIDCConfig) { c.Issuer = "id.example" }, "not an http(s) URL"},
		{func(c *OIDCConfig) { c.ClientID = "" }, "--oidc-client-id"},
		{func(c *OIDCConfig) { c.RedirectURL = "" }, "needs --oidc-redirect-url"},
		{func(c *OIDCConfig) { c.RedirectURL = "https://corvo.example/callback" }, "ending in /auth/oidc/callback"},
		{func(c *OIDCConfig) { c.RoleMap = nil }, "needs --oidc-role-map"},
		{func(c *OIDCConfig) { c.RoleMap = []RoleMapping{{"g", "default", "boss"}} }, `"boss" is not a built-in role`},
		{func(c *OIDCConfig) { c.RoleMap = []RoleMapping{{"g", "bad/ns", "admin"}} }, "namespace"},
		{func(c *OIDCConfig) { c.Issuer = "" }, "need --oidc-issuer"},
	} {
		cfg := ok
		c.mod(&cfg)
		require.ErrorContains(t, cfg.Validate(), c.want)
		require.ErrorContains(t, Config{OIDC: cfg}.WithDefaults().Validate(), c.want, "gateway.Config.Validate skips OIDC")
	}
	// Several roles in one namespace: the most powerful.
	g := (&OIDCConfig{RoleMap: []RoleMapping{{"a", "x", "readonly"}, {"b", "x", "operator"}, {"c", "x", "admin"}, {"a", "y", "worker"}}}).grants([]string{"a", "b"})
	require.Equal(t, map[string]string{"x": "operator", "y": "worker"}, g)
}
