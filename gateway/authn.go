package gateway

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Authentication: who a request acts as. A key comes as
// "Authorization: Bearer <key>" (or, for the web UI, the HttpOnly session
// cookie that holds it: EventSource cannot set headers). The key table is
// the meta group's (Config.Keys), read lock-free per request; the route's
// permission comes from the permission table (permissions.go).

// AuthMode says whether the API needs keys.
type AuthMode int

const (
	// AuthOpen: a request without a key acts as an admin of the default
	// namespace; a key that is sent is still checked and used. For a
	// server that listens only on loopback.
	AuthOpen AuthMode = iota
	// AuthRequired: every route but health and the UI's files needs a
	// valid key.
	AuthRequired
	// AuthOff: keys are ignored altogether (--auth=off, trusted networks).
	AuthOff
)

func (m AuthMode) String() string {
	return [...]string{"open", "keys", "off"}[m]
}

// Keys is the replicated key table (the shard host's meta group).
type Keys interface {
	Keys() *auth.State
	ProposeKeys(ctx context.Context, c auth.Cmd) (bool, error)
}

// SessionCookie holds the web UI's key (HttpOnly, SameSite=Strict).
const SessionCookie = "corvo_session"

// NamespaceHeader picks the namespace a request acts in (default: the
// key's own). Only a principal that may act there (an admin, or a single
// sign-on user with a grant for it) may name another. NamespaceCookie does
// the same for the web UI's requests that cannot set headers (EventSource).
const (
	NamespaceHeader = peer.NamespaceHeader
	NamespaceCookie = "corvo_namespace"
)

// KeyTouchIntervalDefault is how often a node records the last-used time
// of the keys it saw (one meta entry per interval, never one per request).
const KeyTouchIntervalDefault = 30 * time.Second

const principalKey = "corvo.principal"

// clusterPrincipal is who a call from another node (with the cluster
// secret) acts as.
var clusterPrincipal = auth.Principal{Name: "cluster", Namespace: auth.DefaultNamespace, Role: auth.RoleAdmin}

// principal is who the request acts as (set by authorize).
func principal(ctx *fasthttp.RequestCtx) *auth.Principal {
	if p, ok := ctx.UserValue(principalKey).(*auth.Principal); ok {
		return p
	}
	return &auth.Anonymous
}

// requestKey is the key the request carries as a bearer token; cookie is
// the UI's session token when it sends no bearer token.
func requestKey(ctx *fasthttp.RequestCtx) (key, cookie []byte, sent bool) {
	if h := ctx.Request.Header.Peek("Authorization"); len(h) > 0 {
		const bearer = "Bearer "
		if len(h) > len(bearer) && bytes.EqualFold(h[:len(bearer)], []byte(bearer)) {
			return bytes.TrimSpace(h[len(bearer):]), nil, true
		}
		return nil, nil, true // some other scheme: refused below as malformed
	}
	if c := ctx.Request.Header.Cookie(SessionCookie); len(c) > 0 {
		return nil, c, true
	}
	return nil, nil, false
}

// authorize finds the request's principal and checks it holds perm. It
// answers the request itself (false) when it may not go on.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, perm auth.Permission) bool {
	if perm == auth.PermNone {
		return true
	}
	if s.cfg.Auth == AuthOff {
		return s.enter(ctx, &auth.Anonymous, nil)
	}
	if len(ctx.Request.Header.Peek(peer.SecretHeader)) > 0 {
		// Another node: the cluster credential stands for the caller
		// that node authorized (a wrong secret, or no peer certificate
		// under mutual TLS, never falls back to a key).
		if err := s.peer.Verify(ctx); err != nil {
			s.fail(ctx, err)
			return false
		}
		return s.enter(ctx, &clusterPrincipal, nil)
	}
	key, cookie, sent := requestKey(ctx)
	if !sent {
		if s.cfg.Auth == AuthOpen {
			return s.enter(ctx, &auth.Anonymous, nil)
		}
		return s.refuse(ctx, codeUnauthorized.err("this server needs an API key: send Authorization: Bearer <key>"))
	}
	st := s.keyState()
	now := time.Now().UnixNano()
	if bytes.HasPrefix(cookie, []byte(ssoSessionPrefix)) {
		return s.authorizeSSO(ctx, perm, st, cookie, now)
	}
	var k *auth.Key
	why := auth.Accepted
	if cookie != nil {
		k, why = s.sessionKeyOf(st, cookie, now)
	} else {
		k, why = st.Authenticate(key, now)
	}
	if why != auth.Accepted {
		msg := "the API key is " + why.String()
		switch why {
		case auth.Malformed:
			msg = "the Authorization header is not \"Bearer <API key>\" with a Corvo key (corvo_…)"
			if cookie != nil {
				msg = "the session has ended (or was not made by this cluster): log in again"
			}
		case auth.Unknown, auth.Wrong:
			msg = "unknown API key (revoked, or never issued)"
		}
		return s.refuse(ctx, codeUnauthorized.err(msg))
	}
	s.touched.see(k.ID, now)
	p := k.Principal()
	if !s.enter(ctx, p, st) {
		return false
	}
	p = principal(ctx)
	if perm != permAnyKey && !p.Can(perm) {
		writeError(ctx, codeForbidden.errf("the key %q (role %s) lacks the %s permission this endpoint needs", k.Name, k.Role, perm))
		return false
	}
	return s.limit(ctx, limiter{id: k.ID, name: k.Name, read: k.RateRead, write: k.RateWrite}, now)
}

// authorizeSSO is authorize for a single sign-on session (oidc.go): the
// token carries the user's grants, so no key table row is read.
func (s *Server) authorizeSSO(ctx *fasthttp.RequestCtx, perm auth.Permission, st *auth.State, cookie []byte, now int64) bool {
	ss, ok := s.readSSOSession(cookie, now)
	if !ok {
		return s.refuse(ctx, codeUnauthorized.err("the single sign-on session has ended (or was not made by this cluster): sign in again"))
	}
	if !s.enter(ctx, ss.principal(), st) {
		return false
	}
	p := principal(ctx)
	if perm != permAnyKey && !p.Can(perm) {
		writeError(ctx, codeForbidden.errf("%q (role %s in namespace %s) lacks the %s permission this endpoint needs", p.Name, p.Role, p.Namespace, perm))
		return false
	}
	// A user has no key: their bucket is by subject, at the server's
	// rates, so one browser cannot flood the node any more than a key can.
	return s.limit(ctx, limiter{id: p.KeyID, name: p.Name}, now)
}

// requestNamespace is the namespace the request names (header, else the
// UI's cookie), or "".
func requestNamespace(ctx *fasthttp.RequestCtx) []byte {
	if h := ctx.Request.Header.Peek(NamespaceHeader); len(h) > 0 {
		return h
	}
	return ctx.Request.Header.Cookie(NamespaceCookie)
}

// enter sets the request's principal: p, or p acting in the namespace the
// request names. It answers the request (false) when p may not act there
// or the namespace does not exist. st is the key table (nil: read it).
func (s *Server) enter(ctx *fasthttp.RequestCtx, p *auth.Principal, st *auth.State) bool {
	ns := requestNamespace(ctx)
	if len(ns) == 0 || string(ns) == p.Namespace {
		if p != &auth.Anonymous { // principal() falls back to it
			ctx.SetUserValue(principalKey, p)
		}
		return true
	}
	if st == nil {
		st = s.keyState()
	}
	name := string(ns)
	if !st.NamespaceExists(name) {
		writeError(ctx, codeNotFound.errf("namespace %q does not exist", name))
		return false
	}
	q, ok := p.In(name)
	if !ok {
		writeError(ctx, codeForbidden.errf("%q (namespace %s) may not act in namespace %q", p.Name, p.Namespace, name))
		return false
	}
	ctx.SetUserValue(principalKey, q)
	return true
}

// keyState is the key table (an empty one when the server has none).
func (s *Server) keyState() *auth.State {
	if s.cfg.Keys != nil {
		return s.cfg.Keys.Keys()
	}
	return auth.Empty
}

// sessionKeyOf is the key a UI session token stands for, checked as a key
// is: a revoked, disabled or expired key ends its sessions.
func (s *Server) sessionKeyOf(st *auth.State, token []byte, now int64) (*auth.Key, auth.Refusal) {
	id, ok := s.session(token, now)
	if !ok {
		return nil, auth.Malformed
	}
	return st.KeyByID(id, now)
}

// refuse answers 401 with the Bearer challenge.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, e *apiError) bool {
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="corvo"`)
	writeError(ctx, e)
	return false
}

// allowQueue checks the principal's queue scope for queue; it answers the
// request (false) when the key may not touch it.
func allowQueue(ctx *fasthttp.RequestCtx, queue string) bool {
	p := principal(ctx)
	if p.AllowsQueue(queue) {
		return true
	}
	writeError(ctx, codeForbidden.errf("the key %q may not use queue %q (its scope: %v, its role's: %v)", p.Name, queue, p.Queues, p.RoleQueues))
	return false
}

// requireQueues checks, for a key limited to some queues, that a request
// that could reach every queue (a search, a bulk action, the dead-letter
// list, the event stream) names only queues of its scope; it answers the
// request (false) otherwise. what names the request's queue field.
func requireQueues(ctx *fasthttp.RequestCtx, what string, queues ...string) bool {
	p := principal(ctx)
	if !p.Scoped() {
		return true
	}
	if len(queues) == 0 {
		writeError(ctx, codeForbidden.errf("the key %q is limited to some queues: name them in %s", p.Name, what))
		return false
	}
	for _, q := range queues {
		if !allowQueue(ctx, q) {
			return false
		}
	}
	return true
}

// nonEmpty is q as a list, or none when it is "".
func nonEmpty(q string) []string {
	if q == "" {
		return nil
	}
	return []string{q}
}

// checksJobs reports whether p may be refused a job it names by ID: it is
// limited to some queues, or the cluster has more than one namespace.
func (s *Server) checksJobs(p *auth.Principal) bool {
	return p.Scoped() || p.Namespace != router.DefaultNamespace || s.keyState().MultiTenant()
}

// jobInScope reports whether the request may see the job in {id}: its
// queue is of the request's namespace and, for a key limited to some
// queues, of its scope. A job it may not see is answered as not found (its
// existence is not the caller's business). Nothing is read for an
// unscoped caller of a cluster with one namespace.
func (s *Server) jobInScope(ctx *fasthttp.RequestCtx, id string, sh int) bool {
	p := principal(ctx)
	if !s.checksJobs(p) {
		return true
	}
	v, err := s.read(sh, statemachine.GetJobQuery{ID: id})
	jv, _ := v.(*statemachine.JobView)
	return err != nil || jv == nil || (inNamespace(ctx, jv.Job.Queue) && p.AllowsQueue(jv.Job.Queue))
}

// jobsInScope splits job IDs into those the request may act on
// (jobInScope) and, as not-found failures, the others. It reads nothing
// when jobInScope would not.
func (s *Server) jobsInScope(ctx *fasthttp.RequestCtx, ids []string) ([]string, []jobFailure) {
	p := principal(ctx)
	if len(ids) == 0 || !s.checksJobs(p) {
		return ids, nil
	}
	// One read per shard for the queues of its jobs, the shards at once.
	byShard := make([][]string, s.eng.Shards())
	for _, id := range ids {
		if sh, err := s.rt.ShardForJob(id); err == nil && sh < len(byShard) {
			byShard[sh] = append(byShard[sh], id)
		}
	}
	queues := make([][]string, len(byShard))
	var wg sync.WaitGroup
	for sh, shIDs := range byShard {
		if len(shIDs) == 0 {
			continue
		}
		wg.Go(func() {
			if v, err := s.read(sh, statemachine.JobQueuesQuery{IDs: shIDs}); err == nil {
				queues[sh] = v.([]string)
			} // else the action meets the same error, job by job
		})
	}
	wg.Wait()
	outside := map[string]bool{}
	for sh, qs := range queues {
		for i, q := range qs {
			if q != "" && !(inNamespace(ctx, q) && p.AllowsQueue(q)) {
				outside[byShard[sh][i]] = true
			}
		}
	}
	if len(outside) == 0 {
		return ids, nil
	}
	kept := make([]string, 0, len(ids))
	var out []jobFailure
	for _, id := range ids {
		if outside[id] {
			out = append(out, jobFailure{id, codeNotFound.err("job " + id + " not found")})
			continue
		}
		kept = append(kept, id) // missing and malformed IDs fail where they always did
	}
	return kept, out
}

// placeJob checks a new job against the request's scope (allowJob), and
// the jobs it depends on against its namespace, then moves it into the
// request's namespace: its queue and its chain's become stored names. It
// answers the request (false) when the job may not be enqueued.
func (s *Server) placeJob(ctx *fasthttp.RequestCtx, j *statemachine.Job) bool {
	if !allowJob(ctx, j) {
		return false
	}
	if s.checksJobs(principal(ctx)) {
		for _, d := range j.DependsOn {
			if !s.jobInScope(ctx, d.ID, int(d.Shard)) {
				writeError(ctx, invalid("field \"depends_on\": job %s not found", d.ID))
				return false
			}
		}
	}
	ns := principal(ctx).Namespace
	if ns == router.DefaultNamespace {
		return true
	}
	j.Queue = router.NamespacedQueue(ns, j.Queue)
	if c := j.Chain; c != nil {
		place := func(t *statemachine.ChainTarget) {
			t.Queue = router.NamespacedQueue(ns, t.Queue)
			t.Shard = uint32(s.rt.ShardForQueue(t.Queue))
		}
		for i := range c.Steps {
			place(&c.Steps[i])
		}
		for _, t := range []*statemachine.ChainTarget{c.OnFailure, c.OnExit} {
			if t != nil {
				place(t)
			}
		}
	}
	return true
}

// allowJob checks the queue scope for every queue a new job names: its
// own and its chain's.
func allowJob(ctx *fasthttp.RequestCtx, job *statemachine.Job) bool {
	p := principal(ctx)
	if !p.Scoped() {
		return true
	}
	if !allowQueue(ctx, job.Queue) {
		return false
	}
	if c := job.Chain; c != nil {
		for _, t := range c.Steps {
			if !allowQueue(ctx, t.Queue) {
				return false
			}
		}
		for _, t := range []*statemachine.ChainTarget{c.OnFailure, c.OnExit} {
			if t != nil && !allowQueue(ctx, t.Queue) {
				return false
			}
		}
	}
	return true
}

// keyUse collects the last-used times of keys seen on this node since the
// last flush.
type keyUse struct {
	seen sync.Map // key ID → *atomic.Int64 (Unix ns); entries live for the process
	// dirty is set when a key was seen after the last flush.
	dirty atomic.Bool
}

func (u *keyUse) see(id string, now int64) {
	v, ok := u.seen.Load(id)
	if !ok {
		v, _ = u.seen.LoadOrStore(id, new(atomic.Int64))
	}
	v.(*atomic.Int64).Store(now)
	if !u.dirty.Load() {
		u.dirty.Store(true)
	}
}

// since returns the keys seen after the times in sent (and updates sent).
func (u *keyUse) since(sent map[string]int64) map[string]int64 {
	if !u.dirty.Swap(false) {
		return nil
	}
	var out map[string]int64
	u.seen.Range(func(k, v any) bool {
		id := k.(string)
		if at := v.(*atomic.Int64).Load(); at > sent[id] {
			if out == nil {
				out = map[string]int64{}
			}
			out[id] = at
			sent[id] = at
		}
		return true
	})
	return out
}

// keyTouchLoop records last-used times through the meta group, one entry
// per interval at most, until the server closes.
func (s *Server) keyTouchLoop() {
	t := time.NewTicker(s.cfg.KeyTouchInterval)
	defer t.Stop()
	sent := map[string]int64{}
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		touch := s.touched.since(sent)
		if len(touch) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		if _, err := s.cfg.Keys.ProposeKeys(ctx, auth.Cmd{Op: "touch", Touch: touch}); err != nil {
			s.log.Warn().Err(err).Msg("recording when API keys were last used failed (retried next interval)")
			for id := range touch {
				delete(sent, id) // send again next time
			}
			s.touched.dirty.Store(true)
		}
		cancel()
	}
}
