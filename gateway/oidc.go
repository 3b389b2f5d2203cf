package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"golang.org/x/oauth2"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/router"
)

// Single sign-on for the web UI with OpenID Connect (authorization code
// flow with PKCE). GET /auth/oidc/login sends the browser to the issuer
// with a state, a nonce and an S256 code challenge; the three travel in a
// short-lived signed cookie (HttpOnly, SameSite=Lax: the issuer's redirect
// back is a cross-site top-level GET), so no node keeps anything and any
// node can finish the login. GET /auth/oidc/callback checks the state,
// exchanges the code with the verifier, verifies the ID token against the
// issuer's keys (issuer, audience, expiry; then the nonce), maps the
// token's groups to a role per namespace (OIDCConfig.RoleMap) and keeps
// them in a v2 session token (session.go) in the corvo_session cookie. A
// user whose groups map to nothing gets a 403 naming their groups.

// OIDCGroupsClaimDefault is the ID token claim read for the user's groups.
const OIDCGroupsClaimDefault = "groups"

// OIDCDiscoveryTimeoutDefault bounds the issuer's discovery at start (and
// at a login that retries it).
const OIDCDiscoveryTimeoutDefault = 10 * time.Second

// oidcFlowTTL is how long a started login may take at the issuer.
const oidcFlowTTL = 10 * time.Minute

// Cookie and routes of the login flow.
const (
	oidcFlowCookie = "corvo_oidc"
	oidcFlowPrefix = "f1."
	OIDCLoginPath  = "/auth/oidc/login"
	oidcCallback   = "/auth/oidc/callback"
	// uiHome is where a signed-in browser lands.
	uiHome = "/ui/"
)

// OIDCConfig is single sign-on's settings; an empty Issuer turns it off.
type OIDCConfig struct {
	Issuer       string // the issuer URL (its /.well-known/openid-configuration is read)
	ClientID     string
	ClientSecret string // "" for a public client (PKCE alone)
	// RedirectURL is the public URL of GET /auth/oidc/callback, as
	// registered at the issuer.
	RedirectURL string
	// GroupsClaim names the ID token claim holding the user's groups (a
	// list of strings, or one string); default OIDCGroupsClaimDefault.
	GroupsClaim string
	// RoleMap maps groups to a built-in role in a namespace. A user gets,
	// in each namespace, the most powerful role their groups map to there.
	RoleMap []RoleMapping
	// DiscoveryTimeout bounds reading the issuer's discovery document;
	// default OIDCDiscoveryTimeoutDefault.
	DiscoveryTimeout time.Duration
}

// RoleMapping is one --oidc-role-map entry: group=namespace:role.
type RoleMapping struct{ Group, Namespace, Role string }

// Enabled reports whether single sign-on is configured.
func (c *OIDCConfig) Enabled() bool { return c.Issuer != "" }

// ParseRoleMap reads --oidc-role-map entries (group=namespace:role).
func ParseRoleMap(entries []string) ([]RoleMapping, error) {
	var out []RoleMapping
	for _, e := range entries {
		group, target, ok := strings.Cut(strings.TrimSpace(e), "=")
		ns, role, ok2 := strings.Cut(target, ":")
		if !ok || !ok2 || group == "" {
			return nil, fmt.Errorf("--oidc-role-map %q: want group=namespace:role", e)
		}
		out = append(out, RoleMapping{Group: group, Namespace: ns, Role: role})
	}
	return out, nil
}

// Validate checks an enabled config (a disabled one must be empty).
func (c *OIDCConfig) Validate() error {
	if !c.Enabled() {
		if c.ClientID != "" || c.ClientSecret != "" || c.RedirectURL != "" || len(c.RoleMap) > 0 {
			return errors.New("--oidc-client-id, --oidc-client-secret, --oidc-redirect-url and --oidc-role-map need --oidc-issuer")
		}
		return nil
	}
	if u, err := url.Parse(c.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("--oidc-issuer %q is not an http(s) URL", c.Issuer)
	}
	if c.ClientID == "" {
		return errors.New("--oidc-issuer needs --oidc-client-id")
	}
	if c.RedirectURL == "" {
		return fmt.Errorf("--oidc-issuer needs --oidc-redirect-url (the public URL of %s on this cluster)", oidcCallback)
	}
	if u, err := url.Parse(c.RedirectURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != oidcCallback {
		return fmt.Errorf("--oidc-redirect-url %q must be an http(s) URL ending in %s", c.RedirectURL, oidcCallback)
	}
	if len(c.RoleMap) == 0 {
		return errors.New("--oidc-issuer needs --oidc-role-map (group=namespace:role): without it no one could sign in")
	}
	for _, m := range c.RoleMap {
		if err := router.ValidateNamespace(m.Namespace); err != nil {
			return fmt.Errorf("--oidc-role-map %s=%s:%s: namespace: %w", m.Group, m.Namespace, m.Role, err)
		}
		if !auth.ValidRole(m.Role) {
			return fmt.Errorf("--oidc-role-map %s=%s:%s: %q is not a built-in role (%s)", m.Group, m.Namespace, m.Role, m.Role, strings.Join(auth.RoleNames, ", "))
		}
	}
	if c.DiscoveryTimeout < 0 {
		return fmt.Errorf("oidc discovery timeout must not be negative, got %s", c.DiscoveryTimeout)
	}
	return nil
}

// grants maps groups to the most powerful role each namespace gets.
func (c *OIDCConfig) grants(groups []string) map[string]string {
	var out map[string]string
	for _, m := range c.RoleMap {
		if !slices.Contains(groups, m.Group) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if have, ok := out[m.Namespace]; !ok || slices.Index(auth.RoleNames, m.Role) < slices.Index(auth.RoleNames, have) {
			out[m.Namespace] = m.Role
		}
	}
	return out
}

// sso is the relying party: the issuer, found once (at start, else at the
// first login that reaches it).
type sso struct {
	cfg    OIDCConfig
	log    zerolog.Logger
	client *http.Client // to the issuer; its idle connections close at Shutdown

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier // nil until discovered
	oauth    oauth2.Config
}

func newSSO(cfg OIDCConfig, timeout time.Duration, log zerolog.Logger) *sso {
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = OIDCGroupsClaimDefault
	}
	if cfg.DiscoveryTimeout == 0 {
		cfg.DiscoveryTimeout = OIDCDiscoveryTimeoutDefault
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	s := &sso{cfg: cfg, log: log, client: &http.Client{Timeout: timeout, Transport: tr}}
	if _, err := s.ready(); err != nil {
		log.Warn().Err(err).Str("issuer", cfg.Issuer).Msg("single sign-on: the issuer cannot be read now; the first login will try again")
	}
	return s
}

// httpContext carries the issuer client for go-oidc and oauth2.
func (s *sso) httpContext(ctx context.Context) context.Context {
	return context.WithValue(oidc.ClientContext(ctx, s.client), oauth2.HTTPClient, s.client)
}

// ready discovers the issuer if that has not worked yet, and returns the
// verifier and the OAuth2 settings.
func (s *sso) ready() (*oidc.IDTokenVerifier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verifier != nil {
		return s.verifier, nil
	}
	ctx, cancel := context.WithTimeout(s.httpContext(context.Background()), s.cfg.DiscoveryTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, s.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc discovery of %s: %w", s.cfg.Issuer, err)
	}
	s.oauth = oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: s.cfg.RedirectURL, Scopes: []string{oidc.ScopeOpenID, "email", "profile"}}
	// The key set's fetches use this context's client (its cancellation
	// is ignored by go-oidc).
	s.verifier = p.VerifierContext(s.httpContext(context.Background()), &oidc.Config{ClientID: s.cfg.ClientID})
	s.log.Info().Str("issuer", s.cfg.Issuer).Msg("single sign-on: issuer discovered")
	return s.verifier, nil
}

// oauthConfig is the OAuth2 settings (after ready).
func (s *sso) oauthConfig() oauth2.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oauth
}

// ssoFlow is what the login cookie carries to the callback.
type ssoFlow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	End      int64  `json:"e"` // Unix ns
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic("gateway: no randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// GET /api/v1/auth/methods — how the UI's login may sign in (open).
func (s *Server) handleAuthMethods(ctx *fasthttp.RequestCtx) {
	b := []byte(`{"api_key":true,"sso":{"enabled":false}}`)
	if s.sso != nil {
		b = []byte(`{"api_key":true,"sso":{"enabled":true,"login_url":"` + OIDCLoginPath + `"}}`)
	}
	writeJSON(ctx, 200, b)
}

// ssoFail answers a step of the browser's login: a small HTML page for a
// browser, the JSON error otherwise.
func ssoFail(ctx *fasthttp.RequestCtx, e *apiError) {
	if !bytes.Contains(ctx.Request.Header.Peek("Accept"), []byte("text/html")) {
		writeError(ctx, e)
		return
	}
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	ctx.SetBodyString(`<!doctype html><html lang="en"><meta charset="utf-8"><title>Corvo: sign-in failed</title>` +
		`<h1>Sign-in failed</h1><p id="error" data-code="` + html.EscapeString(e.code) + `">` + html.EscapeString(e.msg) +
		`</p><p><a href="` + uiHome + `">Back to Corvo</a></p></html>`)
}

// setFlowCookie sets (or, with value "", clears) the login flow's cookie.
func setFlowCookie(ctx *fasthttp.RequestCtx, value string, end time.Time) {
	var c fasthttp.Cookie
	c.SetKey(oidcFlowCookie)
	c.SetValue(value)
	c.SetPath("/auth/oidc/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteLaxMode)
	c.SetSecure(ctx.IsTLS())
	if value == "" {
		c.SetExpire(fasthttp.CookieExpireDelete)
	} else {
		c.SetExpire(end)
	}
	ctx.Response.Header.SetCookie(&c)
}

var errSSOOff = codeNotFound.err("single sign-on is not configured on this server (--oidc-issuer)")

// GET /auth/oidc/login — start a login at the issuer.
func (s *Server) handleOIDCLogin(ctx *fasthttp.RequestCtx) {
	if s.sso == nil {
		ssoFail(ctx, errSSOOff)
		return
	}
	if _, err := s.sso.ready(); err != nil {
		s.log.Warn().Err(err).Msg("single sign-on: the issuer cannot be read")
		ssoFail(ctx, codeUnavailable.errf("the identity provider cannot be reached now (%v): try again later, or log in with an API key", err))
		return
	}
	end := time.Now().Add(oidcFlowTTL)
	f := ssoFlow{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(), End: end.UnixNano()}
	payload, _ := json.Marshal(f) // strings and an int: cannot fail
	setFlowCookie(ctx, sealToken(s.derivedKey("corvo oidc login flow"), oidcFlowPrefix, payload), end)
	cfg := s.sso.oauthConfig()
	ctx.Response.Header.Set("Location", cfg.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)))
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(fasthttp.StatusFound)
}

// readFlow reads the login cookie, or false when it is not one this
// cluster signed or the login took too long.
func (s *Server) readFlow(token []byte, now int64) (*ssoFlow, bool) {
	payload, ok := openToken(s.derivedKey("corvo oidc login flow"), oidcFlowPrefix, token)
	if !ok {
		return nil, false
	}
	var f ssoFlow
	if json.Unmarshal(payload, &f) != nil || f.End <= now || f.State == "" || f.Nonce == "" || f.Verifier == "" {
		return nil, false
	}
	return &f, true
}

// GET /auth/oidc/callback — the issuer sends the browser back here.
func (s *Server) handleOIDCCallback(ctx *fasthttp.RequestCtx) {
	if s.sso == nil {
		ssoFail(ctx, errSSOOff)
		return
	}
	now := time.Now()
	args := ctx.QueryArgs()
	flow, ok := s.readFlow(ctx.Request.Header.Cookie(oidcFlowCookie), now.UnixNano())
	setFlowCookie(ctx, "", time.Time{}) // one use, whatever happens
	if e := args.Peek("error"); len(e) > 0 {
		msg := "the identity provider refused the sign-in: " + string(e)
		if d := args.Peek("error_description"); len(d) > 0 {
			msg += ": " + string(d)
		}
		ssoFail(ctx, codeUnauthorized.err(truncate(msg, 1024)))
		return
	}
	if !ok {
		ssoFail(ctx, codeBadRequest.err("this sign-in was not started by this browser, or took over 10 minutes: sign in again"))
		return
	}
	if subtle.ConstantTimeCompare(args.Peek("state"), []byte(flow.State)) != 1 {
		ssoFail(ctx, codeBadRequest.err("the state does not match the sign-in this browser started: sign in again"))
		return
	}
	code := string(args.Peek("code"))
	if code == "" {
		ssoFail(ctx, codeBadRequest.err("the identity provider sent no code"))
		return
	}
	verifier, err := s.sso.ready()
	if err != nil {
		ssoFail(ctx, codeUnavailable.errf("the identity provider cannot be reached now (%v)", err))
		return
	}
	cfg := s.sso.oauthConfig()
	rctx, cancel := context.WithTimeout(s.sso.httpContext(context.Background()), s.cfg.RequestTimeout)
	defer cancel()
	tok, err := cfg.Exchange(rctx, code, oauth2.VerifierOption(flow.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			ssoFail(ctx, codeUnauthorized.errf("the identity provider refused the code: %s %s", re.ErrorCode, re.ErrorDescription))
			return
		}
		ssoFail(ctx, codeUnavailable.errf("the identity provider's token endpoint failed: %v", err))
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		ssoFail(ctx, codeUnauthorized.err("the identity provider answered no ID token"))
		return
	}
	idt, err := verifier.Verify(rctx, raw)
	if err != nil {
		ssoFail(ctx, codeUnauthorized.errf("the ID token was refused: %v", err))
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(flow.Nonce)) != 1 {
		ssoFail(ctx, codeUnauthorized.err("the ID token's nonce is not this sign-in's (a replayed token?)"))
		return
	}
	var claims map[string]json.RawMessage
	if err := idt.Claims(&claims); err != nil {
		ssoFail(ctx, codeUnauthorized.errf("the ID token's claims cannot be read: %v", err))
		return
	}
	name := displayName(claims, idt.Subject)
	groups, gerr := groupsClaim(claims[s.sso.cfg.GroupsClaim])
	grants := s.sso.cfg.grants(groups)
	if len(grants) == 0 {
		why := fmt.Sprintf("%s signed in, but none of their groups %q is mapped to a role in a namespace (--oidc-role-map)", name, groups)
		switch {
		case gerr != nil:
			why = fmt.Sprintf("%s signed in, but the ID token's %q claim is %v", name, s.sso.cfg.GroupsClaim, gerr)
		case claims[s.sso.cfg.GroupsClaim] == nil:
			why = fmt.Sprintf("%s signed in, but the ID token has no %q claim, so no group maps to a role (--oidc-groups-claim, --oidc-role-map)", name, s.sso.cfg.GroupsClaim)
		}
		ssoFail(ctx, codeForbidden.err(truncate(why, 2048)))
		return
	}
	end := now.Add(SessionTTL)
	if idt.Expiry.Before(end) {
		end = idt.Expiry
	}
	ss := &ssoSession{End: end.UnixNano(), Subject: idt.Subject, Name: name, Grants: grants}
	p := ss.principal()
	ctx.SetUserValue(principalKey, p) // for the audit record
	auditNote(ctx, "single sign-on of "+p.Name+", grants "+formatGrants(grants))
	setSessionCookie(ctx, s.newSSOSession(ss), end)
	clearNamespaceCookie(ctx)
	ctx.Response.Header.Set("Location", uiHome)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(fasthttp.StatusFound)
}

// setSessionCookie sets the UI's session cookie (HttpOnly, SameSite=Strict,
// Secure over TLS) until end.
func setSessionCookie(ctx *fasthttp.RequestCtx, value string, end time.Time) {
	var c fasthttp.Cookie
	c.SetKey(SessionCookie)
	c.SetValue(value)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(ctx.IsTLS())
	c.SetExpire(end)
	ctx.Response.Header.SetCookie(&c)
}

// maxDisplayName bounds the name a session carries.
const maxDisplayName = 128

// displayName is the user's email, else name, else subject.
func displayName(claims map[string]json.RawMessage, sub string) string {
	for _, c := range []string{"email", "name", "preferred_username"} {
		var v string
		if json.Unmarshal(claims[c], &v) == nil && v != "" {
			return truncate(v, maxDisplayName)
		}
	}
	return truncate(sub, maxDisplayName)
}

// groupsClaim reads a groups claim: a list of strings, or one string.
func groupsClaim(raw json.RawMessage) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	return nil, errors.New("neither a string nor a list of strings")
}

// formatGrants is grants as "ns=role, …" by namespace.
func formatGrants(g map[string]string) string {
	var b strings.Builder
	for i, ns := range slices.Sorted(maps.Keys(g)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ns + "=" + g[ns])
	}
	return b.String()
}
