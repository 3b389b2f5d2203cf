package gateway

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// Roles: /api/v1/auth/roles lists the built-in roles and the custom ones;
// PUT creates or replaces a custom role (a set of permissions, optionally
// limited to queue globs), DELETE removes one no key has. They live in the
// meta group's key table, so a change reaches every node and every key of
// the role at once.

const maxRoleNameLen = 64

func checkRoleName(n string) *apiError {
	if n == "" || len(n) > maxRoleNameLen {
		return invalid("a role name is 1–%d characters", maxRoleNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return invalid("role name %q: lower-case letters, digits, - _ . only", n)
		}
	}
	if auth.ValidRole(n) {
		return invalid("%q is a built-in role: it cannot be changed", n)
	}
	return nil
}

// GET /api/v1/auth/roles
func (s *Server) handleListRoles(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b := append(make([]byte, 0, 2048), `{"roles":[`...)
	for i, name := range auth.RoleNames {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRole(b, &auth.Role{Name: name, Permissions: auth.Roles[name]}, true)
	}
	for _, r := range keys.Keys().Roles() {
		b = append(b, ',')
		b = appendRole(b, &r, false)
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// GET /api/v1/auth/roles/{name}
func (s *Server) handleGetRole(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	name, _ := ctx.UserValue("name").(string)
	if perms, ok := auth.Roles[name]; ok {
		writeJSON(ctx, 200, appendRole(nil, &auth.Role{Name: name, Permissions: perms}, true))
		return
	}
	r, ok := keys.Keys().Role(name)
	if !ok {
		writeError(ctx, codeNotFound.err("no role "+name))
		return
	}
	writeJSON(ctx, 200, appendRole(nil, &r, false))
}

// PUT /api/v1/auth/roles/{name}
func (s *Server) handlePutRole(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	name, _ := ctx.UserValue("name").(string)
	var req corvo.PutRoleRequest
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	if e := checkRoleName(name); e != nil {
		writeError(ctx, e)
		return
	}
	if len(req.Permissions) == 0 {
		writeError(ctx, invalid("field \"permissions\" must list at least one of %v", auth.Permissions))
		return
	}
	perms := make([]auth.Permission, 0, len(req.Permissions))
	for _, p := range req.Permissions {
		if !auth.ValidPermission(auth.Permission(p)) {
			writeError(ctx, invalid("field \"permissions\": unknown permission %q (one of %v)", p, auth.Permissions))
			return
		}
		perms = append(perms, auth.Permission(p))
	}
	if e := checkKeyQueues(req.Queues); e != nil {
		writeError(ctx, e)
		return
	}
	now := time.Now().UnixNano()
	r := auth.Role{Name: name, Permissions: perms, Queues: req.Queues, CreatedAt: now, UpdatedAt: now}
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "role.put", Role: &r}, func(*auth.State) bool { return true }); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	got, _ := keys.Keys().Role(name)
	writeJSON(ctx, 200, appendRole(nil, &got, false))
}

// DELETE /api/v1/auth/roles/{name}
func (s *Server) handleDeleteRole(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	name, _ := ctx.UserValue("name").(string)
	if auth.ValidRole(name) {
		writeError(ctx, invalid("%q is a built-in role: it cannot be deleted", name))
		return
	}
	st := keys.Keys()
	if _, ok := st.Role(name); !ok {
		writeError(ctx, codeNotFound.err("no role "+name))
		return
	}
	if ids := st.RoleInUse(name); len(ids) > 0 {
		writeError(ctx, codeConflict.errf("role %s is the role of %d key(s) (%v): give them another role first", name, len(ids), ids))
		return
	}
	gone := func(st *auth.State) bool { _, ok := st.Role(name); return !ok }
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "role.delete", Name: name}, gone); aerr != nil {
		if aerr.status == 404 {
			aerr = codeConflict.errf("role %s could not be deleted: a key took it meanwhile", name)
		}
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"name":`), appendString(nil, name)...)
	writeJSON(ctx, 200, append(b, `,"deleted":true}`...))
}

// appendRole renders a role.
func appendRole(b []byte, r *auth.Role, builtIn bool) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"built_in":`...)
	if builtIn {
		b = append(b, "true"...)
	} else {
		b = append(b, "false"...)
	}
	b = append(b, `,"permissions":[`...)
	for i, p := range r.Permissions {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, string(p))
	}
	b = append(b, `],"queues":`...)
	b = appendStrings(b, r.Queues)
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, r.UpdatedAt)
	return append(b, '}')
}
