package gateway

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// The audit log. The route wrapper (route, server.go) records a call of an
// audited route (the audit table, permissions.go) after its handler ran, so
// the status is known, and before the answer is released: the record is
// proposed synchronously, so no management call is acknowledged without
// its record. It goes to the shard the caller's namespace hashes to
// (statemachine.AuditOp). A call is recorded once, by the node that
// served it: a node that forwarded a request whole leaves it to the node
// that answered, and a node called by another with the cluster secret on a
// user route (a relay, a fan-out) leaves it to the node the client called. A record that cannot be written does not change
// the answer (the action happened): it is logged and counted
// (corvo_audit_write_failures_total).

// auditNoteKey holds a handler's detail for the record's summary (auditNote).
const auditNoteKey = "corvo.audit.note"

// auditNote adds detail to the summary of the call's audit record (what was
// created, how many jobs a bulk action touched). Never payloads or secrets.
func auditNote(ctx *fasthttp.RequestCtx, note string) { ctx.SetUserValue(auditNoteKey, note) }

var (
	auditWriteFailures = metrics.NewCounter(`corvo_audit_write_failures_total`)
	auditDropped       = metrics.NewCounter(`corvo_audit_dropped_total{reason="unidentified_rate"}`)
)

// Records of refused calls whose caller is unknown (no valid key) are
// rate-limited per node, so a flood of anonymous attempts cannot turn each
// 401 into a Raft write; what is dropped is counted
// (corvo_audit_dropped_total).
const (
	auditUnidentifiedRate  = 20  // records per second
	auditUnidentifiedBurst = 200 // records at once
)

// audit records the call the route wrapper just served: a route needing
// perm, whose handler ran or not (refused by the browser or key checks).
func (s *Server) audit(ctx *fasthttp.RequestCtx, row auditRow, perm auth.Permission, ran bool) {
	p, known := ctx.UserValue(principalKey).(*auth.Principal)
	switch {
	case known:
	case perm == auth.PermNone:
		// An open or node-to-node route: nobody was identified on the
		// way in (login and logout name the key they checked).
		if len(ctx.Request.Header.Peek(peer.SecretHeader)) > 0 && s.peer.Trusted(ctx) {
			p, known = &clusterPrincipal, true
		}
	case ran:
		p, known = &auth.Anonymous, true // an open server's caller without a key, or --auth=off
	}
	if ctx.UserValue(answeredElsewhereKey) != nil {
		return // the node this one forwarded the request to recorded it
	}
	if known && p == &clusterPrincipal && perm != auth.PermNone {
		// Another node calling a user route with the cluster secret (a
		// relayed bulk cancel, a fan-out): the node the caller called
		// records the call.
		return
	}
	r := statemachine.AuditRecord{
		ID:     ulid.Make().String(),
		Method: string(ctx.Method()),
		Path:   truncate(string(ctx.Path()), statemachine.AuditPathMax),
		Status: uint16(ctx.Response.StatusCode()),
		Remote: ctx.RemoteAddr().String(),
	}
	if client := ctx.Request.Header.Peek(ClientAddrHeader); len(client) > 0 && peer.Forwarded(ctx) {
		// Forwarded by another node: the client as that node saw it, then
		// that node (a caller that forges the headers still shows as the
		// second address).
		r.Remote = string(client) + " via " + r.Remote
	}
	r.Remote = truncate(r.Remote, statemachine.AuditFieldMax)
	if known {
		r.KeyID, r.KeyName, r.Role, r.Namespace = p.KeyID, truncate(p.Name, statemachine.AuditFieldMax), p.Role, p.Namespace
	} else {
		// Refused before anyone was identified: the ID of the key it sent,
		// if it was one of ours (an ID is not a secret), in the default
		// namespace.
		r.Namespace = auth.DefaultNamespace
		if key, _, sent := requestKey(ctx); sent && key != nil {
			if id, ok := auth.KeyID(string(key)); ok {
				r.KeyID = id
			}
		}
		if s.unidentified.take(time.Now().UnixNano(), auditUnidentifiedRate, auditUnidentifiedBurst) != 0 {
			auditDropped.Inc()
			return
		}
	}
	r.Summary = truncate(auditSummary(ctx, row), statemachine.AuditSummaryMax)
	sh := s.rt.ShardForQueue(r.Namespace)
	rs, e := s.propose(sh, &statemachine.AuditOp{Record: r})
	switch {
	case e != nil:
	case len(rs) != 1:
		e = codeInternal.errf("%d results for one audit op", len(rs))
	default:
		e = resultError(&rs[0])
	}
	if e != nil {
		auditWriteFailures.Inc()
		s.log.Error().Str("method", r.Method).Str("path", r.Path).Int("status", int(r.Status)).Str("key_id", r.KeyID).
			Str("error", e.msg).Msg("the audit record of a call could not be written")
	}
}

// auditSummary is the row's action with the call's path parameters, the
// handler's note and, for a refusal, the error code.
func auditSummary(ctx *fasthttp.RequestCtx, row auditRow) string {
	var b strings.Builder
	action := row.action
	for {
		i := strings.IndexByte(action, '{')
		j := strings.IndexByte(action, '}')
		if i < 0 || j < i {
			break
		}
		b.WriteString(action[:i])
		v, _ := ctx.UserValue(action[i+1 : j]).(string)
		b.WriteString(v)
		action = action[j+1:]
	}
	b.WriteString(action)
	if note, _ := ctx.UserValue(auditNoteKey).(string); note != "" {
		b.WriteString(": ")
		b.WriteString(note)
	}
	if ctx.Response.StatusCode() >= 400 {
		if code := errorCodeOf(ctx.Response.Body()); code != "" {
			b.WriteString(" (")
			b.WriteString(code)
			b.WriteString(")")
		}
	}
	return b.String()
}

// errorCodeOf reads the code of an error body writeError wrote (the code is
// its last member, a string).
func errorCodeOf(body []byte) string {
	const k = `"code":`
	i := bytes.LastIndex(body, []byte(k))
	if i < 0 || i+len(k) >= len(body) || body[i+len(k)] != '"' {
		return ""
	}
	rest := body[i+len(k)+1:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || j > 64 {
		return ""
	}
	return string(rest[:j])
}

// truncate cuts s to at most n bytes, on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// GET /api/v1/audit?namespace=&key_id=&method=&path_prefix=&status=&since=&until=&limit=50&cursor=
// — the audit log, newest first, in pages. A key that is not an admin's
// sees its own namespace only.
func (s *Server) handleAudit(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	q := statemachine.AuditQuery{
		Namespace:  string(args.Peek("namespace")),
		KeyID:      string(args.Peek("key_id")),
		Method:     strings.ToUpper(string(args.Peek("method"))),
		PathPrefix: string(args.Peek("path_prefix")),
		Limit:      50,
	}
	if q.Namespace != "" {
		if err := router.ValidateQueueName(q.Namespace); err != nil {
			writeError(ctx, invalid("namespace: %v", err))
			return
		}
	}
	if p := principal(ctx); !p.Admin() {
		if q.Namespace != "" && q.Namespace != p.Namespace {
			writeError(ctx, codeForbidden.errf("the key %q may read the audit log of its namespace %q only", p.Name, p.Namespace))
			return
		}
		q.Namespace = p.Namespace
	}
	if len(q.KeyID) > statemachine.AuditFieldMax || len(q.Method) > 16 || len(q.PathPrefix) > statemachine.AuditPathMax {
		writeError(ctx, invalid("key_id, method or path_prefix is too long"))
		return
	}
	if v := args.Peek("status"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 100 || n > 599 {
			writeError(ctx, invalid("status must be an HTTP status (100–599)"))
			return
		}
		q.Status = n
	}
	for _, t := range []struct {
		name string
		to   *int64
	}{{"since", &q.Since}, {"until", &q.Until}} {
		v := string(args.Peek(t.name))
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || at.UnixNano() <= 0 {
			writeError(ctx, invalid("%s must be an RFC 3339 time after 1970, not %q", t.name, v))
			return
		}
		*t.to = at.UnixNano()
	}
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1000 {
			writeError(ctx, invalid("limit must be 1–1000"))
			return
		}
		q.Limit = n
	}
	if c := string(args.Peek("cursor")); c != "" {
		ts, id, ok := strings.Cut(c, "~")
		n, err := strconv.ParseInt(ts, 10, 64)
		if !ok || err != nil || n <= 0 || len(id) > statemachine.AuditFieldMax {
			writeError(ctx, invalid("cursor is not one this endpoint returned"))
			return
		}
		q.Before, q.BeforeID = n, id
	}
	var pages []statemachine.AuditPage
	if q.Namespace != "" {
		v, err := s.read(s.rt.ShardForQueue(q.Namespace), q)
		if err != nil {
			writeError(ctx, engineError(err))
			return
		}
		pages = append(pages, v.(statemachine.AuditPage))
	} else {
		vs, err := s.readEach(func(int) any { return q })
		if err != nil {
			writeError(ctx, engineError(err))
			return
		}
		for _, v := range vs {
			pages = append(pages, v.(statemachine.AuditPage))
		}
	}
	page := statemachine.MergeAuditPages(pages, q.Limit)
	b := []byte(`{"records":[`)
	for i := range page.Records {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAuditRecord(b, &page.Records[i])
	}
	b = append(b, `],"has_more":`...)
	b = appendBool(b, page.More)
	b = append(b, `,"cursor":`...)
	if page.More {
		b = appendString(b, strconv.FormatInt(page.StopAt, 10)+"~"+page.StopID)
	} else {
		b = append(b, "null"...)
	}
	writeJSON(ctx, 200, append(b, '}'))
}

func appendAuditRecord(b []byte, r *statemachine.AuditRecord) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"at":`...)
	b = appendTime(b, r.At)
	b = append(b, `,"key_id":`...)
	b = appendString(b, r.KeyID)
	b = append(b, `,"key_name":`...)
	b = appendString(b, r.KeyName)
	b = append(b, `,"role":`...)
	b = appendString(b, r.Role)
	b = append(b, `,"namespace":`...)
	b = appendString(b, r.Namespace)
	b = append(b, `,"method":`...)
	b = appendString(b, r.Method)
	b = append(b, `,"path":`...)
	b = appendString(b, r.Path)
	b = append(b, `,"status":`...)
	b = appendInt(b, int64(r.Status))
	b = append(b, `,"summary":`...)
	b = appendString(b, r.Summary)
	b = append(b, `,"remote":`...)
	b = appendString(b, r.Remote)
	return append(b, '}')
}
