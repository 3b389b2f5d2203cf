package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/router"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// API keys: /api/v1/auth/keys (create, list, read, change, revoke) and
// /api/v1/auth/whoami. The key table is the meta group's (Config.Keys);
// a key is made here, shown once, and only its hash is proposed.

// Limits of a key's fields.
const (
	maxKeyNameLen   = 128
	maxKeyQueueGlob = 64 // globs in one key's queue scope
)

// keyTable is the key table, or 503 when this server has none.
func (s *Server) keyTable() (Keys, *apiError) {
	if s.cfg.Keys == nil {
		return nil, codeUnavailable.err("this server has no key table (it runs without the meta group)")
	}
	return s.cfg.Keys, nil
}

func checkKeyName(n string) *apiError {
	if n == "" || len(n) > maxKeyNameLen || !utf8.ValidString(n) {
		return invalid("field \"name\" must be 1–%d bytes of UTF-8", maxKeyNameLen)
	}
	return nil
}

func checkKeyRole(st *auth.State, r string) *apiError {
	if !st.RoleExists(r) {
		return invalid("field \"role\": unknown role %q (built in: %v; or a custom role of /api/v1/auth/roles)", r, auth.RoleNames)
	}
	return nil
}

func checkKeyQueues(qs []string) *apiError {
	if len(qs) > maxKeyQueueGlob {
		return invalid("field \"queues\": at most %d globs", maxKeyQueueGlob)
	}
	for _, g := range qs {
		if why := auth.CheckQueueGlob(g); why != "" {
			return invalid("field \"queues\": %s", why)
		}
	}
	return nil
}

// maxKeyRate bounds a key's own request rates.
const maxKeyRate = 1_000_000

func checkKeyRate(field string, r int) *apiError {
	if r < -1 || r > maxKeyRate {
		return invalid("field %q must be -1 (unlimited), 0 (the server's default) or 1–%d", field, maxKeyRate)
	}
	return nil
}

func checkKeyExpiry(at *time.Time, now time.Time) (int64, *apiError) {
	if at == nil {
		return 0, nil
	}
	if !at.After(now) {
		return 0, invalid("field \"expires_at\" must be in the future")
	}
	return at.UnixNano(), nil
}

// POST /api/v1/auth/keys
func (s *Server) handleCreateKey(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var req corvo.CreateKeyRequest
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	p := principal(ctx)
	if req.Namespace == "" {
		req.Namespace = p.Namespace
	}
	if !p.Admin() && (req.Namespace != p.Namespace || req.Role == auth.RoleAdmin) {
		writeError(ctx, codeForbidden.errf("%q may make keys of namespace %s only, and no admin keys", p.Name, p.Namespace))
		return
	}
	if req.Role == "" {
		req.Role = auth.RoleReadonly
	}
	now := time.Now()
	expires, aerr := checkKeyExpiry(req.ExpiresAt, now)
	for _, e := range []*apiError{checkKeyName(req.Name), checkKeyRole(keys.Keys(), req.Role), checkKeyQueues(req.Queues), aerr,
		checkKeyRate("rate_read", req.RateRead), checkKeyRate("rate_write", req.RateWrite)} {
		if e != nil {
			writeError(ctx, e)
			return
		}
	}
	if err := router.ValidateNamespace(req.Namespace); err != nil {
		writeError(ctx, invalid("field \"namespace\": %v", err))
		return
	}
	if !keys.Keys().NamespaceExists(req.Namespace) {
		writeError(ctx, invalid("field \"namespace\": no namespace %q (create it first: POST /api/v1/namespaces)", req.Namespace))
		return
	}
	secret, id, hash := auth.NewKey()
	k := auth.Key{ID: id, Hash: hash, Name: req.Name, Namespace: req.Namespace, Role: req.Role, Queues: req.Queues,
		Enabled: true, CreatedAt: now.UnixNano(), ExpiresAt: expires, CreatedBy: principal(ctx).KeyID,
		RateRead: req.RateRead, RateWrite: req.RateWrite}
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "put", Key: &k}, func(st *auth.State) bool {
		got, ok := st.Key(id) // a retried put that had applied
		return ok && got.Hash == hash
	}); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	auditNote(ctx, "key "+k.ID+" "+strconv.Quote(k.Name)+", role "+k.Role+", namespace "+k.Namespace)
	b := appendKey(make([]byte, 0, 512), &k)
	b = append(b[:len(b)-1], `,"key":`...)
	b = appendString(b, secret)
	writeJSON(ctx, 201, append(b, '}'))
}

// proposeKeys commits c; applied tells, when c changed nothing, whether
// that is because an earlier attempt of the same command applied it.
func (s *Server) proposeKeys(keys Keys, c auth.Cmd, applied func(*auth.State) bool) *apiError {
	pctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	changed, err := keys.ProposeKeys(pctx, c)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return codeUnavailable.err("the cluster did not commit the key change in time; it may or may not have applied")
		}
		return engineError(err)
	}
	if !changed && (applied == nil || !applied(keys.Keys())) {
		return codeNotFound.err("no API key " + c.ID)
	}
	return nil
}

// GET /api/v1/auth/keys
func (s *Server) handleListKeys(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	ks := keys.Keys().Keys()
	if p := principal(ctx); !p.Admin() {
		ks = slices.DeleteFunc(ks, func(k auth.Key) bool { return k.Namespace != p.Namespace })
	}
	b := append(make([]byte, 0, 64+len(ks)*256), `{"keys":[`...)
	for i := range ks {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKey(b, &ks[i])
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// keyParam reads {id} and finds the key; it answers the request itself
// (false) when there is none.
func (s *Server) keyParam(ctx *fasthttp.RequestCtx) (Keys, auth.Key, bool) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return nil, auth.Key{}, false
	}
	id, _ := ctx.UserValue("id").(string)
	k, ok := keys.Keys().Key(id)
	if p := principal(ctx); ok && !p.Admin() && k.Namespace != p.Namespace {
		ok = false // another namespace's key is not the caller's business
	}
	if !ok {
		writeError(ctx, codeNotFound.err("no API key "+id))
		return nil, k, false
	}
	return keys, k, true
}

// GET /api/v1/auth/keys/{id}
func (s *Server) handleGetKey(ctx *fasthttp.RequestCtx) {
	if _, k, ok := s.keyParam(ctx); ok {
		writeJSON(ctx, 200, appendKey(nil, &k))
	}
}

// PATCH /api/v1/auth/keys/{id}
func (s *Server) handleUpdateKey(ctx *fasthttp.RequestCtx) {
	keys, k, ok := s.keyParam(ctx)
	if !ok {
		return
	}
	var req corvo.UpdateKeyRequest
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	u := auth.Update{Name: req.Name, Role: req.Role, Queues: req.Queues, Enabled: req.Enabled, RateRead: req.RateRead, RateWrite: req.RateWrite}
	var errs []*apiError
	if req.Name != nil {
		errs = append(errs, checkKeyName(*req.Name))
	}
	if req.Role != nil {
		errs = append(errs, checkKeyRole(keys.Keys(), *req.Role))
		if *req.Role == auth.RoleAdmin && !principal(ctx).Admin() {
			errs = append(errs, codeForbidden.err("only an admin may make a key an admin"))
		}
	}
	if req.Queues != nil {
		errs = append(errs, checkKeyQueues(*req.Queues))
	}
	if req.RateRead != nil {
		errs = append(errs, checkKeyRate("rate_read", *req.RateRead))
	}
	if req.RateWrite != nil {
		errs = append(errs, checkKeyRate("rate_write", *req.RateWrite))
	}
	if req.ExpiresAt != nil {
		at, e := checkKeyExpiry(req.ExpiresAt, time.Now())
		u.ExpiresAt = &at
		errs = append(errs, e)
	}
	for _, e := range errs {
		if e != nil {
			writeError(ctx, e)
			return
		}
	}
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "update", ID: k.ID, Update: &u}, nil); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	k, _ = keys.Keys().Key(k.ID)
	writeJSON(ctx, 200, appendKey(nil, &k))
}

// DELETE /api/v1/auth/keys/{id}
func (s *Server) handleRevokeKey(ctx *fasthttp.RequestCtx) {
	keys, k, ok := s.keyParam(ctx)
	if !ok {
		return
	}
	gone := func(st *auth.State) bool { _, ok := st.Key(k.ID); return !ok }
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "delete", ID: k.ID, At: time.Now().UnixNano()}, gone); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"id":`), appendString(nil, k.ID)...)
	writeJSON(ctx, 200, append(b, `,"revoked":true}`...))
}

// GET /api/v1/auth/whoami
func (s *Server) handleWhoAmI(ctx *fasthttp.RequestCtx) {
	p := principal(ctx)
	b := append(make([]byte, 0, 512), `{"auth":`...)
	b = appendString(b, s.cfg.Auth.String())
	b = append(b, `,"key_id":`...)
	b = appendString(b, p.KeyID)
	b = append(b, `,"name":`...)
	b = appendString(b, p.Name)
	b = append(b, `,"namespace":`...)
	b = appendString(b, p.Namespace)
	b = append(b, `,"role":`...)
	b = appendString(b, p.Role)
	b = append(b, `,"queues":`...)
	b = appendStrings(b, p.Queues)
	b = append(b, `,"role_queues":`...)
	b = appendStrings(b, p.RoleQueues)
	b = append(b, `,"permissions":[`...)
	for i, perm := range p.Permissions() {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, string(perm))
	}
	// A single sign-on session: the namespaces it may act in, with the
	// role its groups give it in each (empty for a key).
	b = append(b, `],"sso":`...)
	b = strconv.AppendBool(b, p.Grants != nil)
	b = append(b, `,"grants":{`...)
	for i, ns := range slices.Sorted(maps.Keys(p.Grants)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, ns)
		b = append(b, ':')
		b = appendString(b, p.Grants[ns])
	}
	writeJSON(ctx, 200, append(b, "}}"...))
}

// appendKey renders a key's record (never its hash).
func appendKey(b []byte, k *auth.Key) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, k.ID)
	b = append(b, `,"name":`...)
	b = appendString(b, k.Name)
	b = append(b, `,"namespace":`...)
	b = appendString(b, k.Namespace)
	b = append(b, `,"role":`...)
	b = appendString(b, k.Role)
	b = append(b, `,"queues":`...)
	b = appendStrings(b, k.Queues)
	b = append(b, `,"enabled":`...)
	if k.Enabled {
		b = append(b, "true"...)
	} else {
		b = append(b, "false"...)
	}
	b = append(b, `,"created_at":`...)
	b = appendTime(b, k.CreatedAt)
	b = append(b, `,"created_by":`...)
	b = appendString(b, k.CreatedBy)
	b = append(b, `,"expires_at":`...)
	b = appendTime(b, k.ExpiresAt)
	b = append(b, `,"last_used_at":`...)
	b = appendTime(b, k.LastUsedAt)
	b = append(b, `,"rate_read":`...)
	b = appendInt(b, int64(k.RateRead))
	b = append(b, `,"rate_write":`...)
	b = appendInt(b, int64(k.RateWrite))
	return append(b, '}')
}

// POST /api/v1/auth/session {"key": "corvo_…"} — the web UI's login: the
// key is checked, then a session token for it (session.go, never the key)
// is kept in an HttpOnly, SameSite=Strict cookie that every later call
// (EventSource included) carries. It answers whoami.
func (s *Server) handleLogin(ctx *fasthttp.RequestCtx) {
	var req corvo.LoginRequest
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	if req.Key == "" {
		writeError(ctx, invalid("field \"key\" is required"))
		return
	}
	st := auth.Empty
	if s.cfg.Keys != nil {
		st = s.cfg.Keys.Keys()
	}
	k, why := st.Authenticate([]byte(req.Key), time.Now().UnixNano())
	if why != auth.Accepted {
		s.refuse(ctx, codeUnauthorized.err("the API key is "+why.String()))
		return
	}
	ctx.SetUserValue(principalKey, k.Principal())
	s.touched.see(k.ID, time.Now().UnixNano())
	end := time.Now().Add(SessionTTL).UnixNano()
	if k.ExpiresAt != 0 && k.ExpiresAt < end {
		end = k.ExpiresAt
	}
	setSessionCookie(ctx, s.newSession(k.ID, end), time.Unix(0, end))
	s.handleWhoAmI(ctx)
}

// DELETE /api/v1/auth/session — log out: the cookie is cleared (a key's
// session or a single sign-on one alike).
func (s *Server) handleLogout(ctx *fasthttp.RequestCtx) {
	// Who logs out, for the audit log.
	if token := ctx.Request.Header.Cookie(SessionCookie); len(token) > 0 {
		now := time.Now().UnixNano()
		if ss, ok := s.readSSOSession(token, now); ok {
			ctx.SetUserValue(principalKey, ss.principal())
		} else if k, why := s.sessionKeyOf(s.keyState(), token, now); why == auth.Accepted {
			ctx.SetUserValue(principalKey, k.Principal())
		}
	}
	setSessionCookie(ctx, "", fasthttp.CookieExpireDelete)
	clearNamespaceCookie(ctx)
	writeJSON(ctx, 200, []byte(`{"logged_out":true}`))
}

// clearNamespaceCookie drops the UI's namespace choice (at logout, and at a
// single sign-on: the next user may have no grant where the last acted).
// (The callback's request never carries the SameSite=Strict cookie: the
// issuer's redirect is cross-site; the answer clears it all the same.)
func clearNamespaceCookie(ctx *fasthttp.RequestCtx) {
	var c fasthttp.Cookie
	c.SetKey(NamespaceCookie)
	c.SetValue("")
	c.SetPath("/")
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetExpire(fasthttp.CookieExpireDelete)
	ctx.Response.Header.SetCookie(&c)
}
