package gateway

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Namespaces in the gateway: a request acts in one namespace (its key's,
// or the one it names: authn.go's enter). Queue names cross the API as the
// namespace sees them and are stored as router.NamespacedQueue makes them:
// a handler maps a name in with storedQueue as soon as it is validated,
// answers with appendQueueName (which drops the prefix), and lists or
// searches only what inNamespace admits. A job, batch or schedule named by
// ID belongs to the namespace of its queue; another namespace's is "not
// found".

// storedQueue is the stored name of queue q of the request's namespace.
func storedQueue(ctx *fasthttp.RequestCtx, q string) string {
	return router.NamespacedQueue(principal(ctx).Namespace, q)
}

// inNamespace reports whether the stored queue name belongs to the
// request's namespace.
func inNamespace(ctx *fasthttp.RequestCtx, stored string) bool {
	return router.QueueInNamespace(stored, principal(ctx).Namespace)
}

// appendQueueName appends a stored queue name as its namespace sees it.
func appendQueueName(b []byte, stored string) []byte {
	return appendString(b, router.DisplayQueue(stored))
}

// batchInNamespace reports whether batch b was made in the request's
// namespace.
func batchInNamespace(ctx *fasthttp.RequestCtx, b *statemachine.Batch) bool {
	ns := b.Namespace
	if ns == "" {
		ns = router.DefaultNamespace
	}
	return ns == principal(ctx).Namespace
}

// ---- /api/v1/namespaces: the namespaces, for admins ----

// namespaceRequest is POST /api/v1/namespaces's body.
type namespaceRequest struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

const maxNamespaceDescription = 256

// GET /api/v1/namespaces
func (s *Server) handleListNamespaces(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	st := keys.Keys()
	b := append(make([]byte, 0, 256), `{"namespaces":[`...)
	for i, n := range st.Namespaces() {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendNamespace(b, &n, len(st.NamespaceInUse(n.Name)))
	}
	writeJSON(ctx, 200, append(b, "]}"...))
}

// POST /api/v1/namespaces {"name": "acme", "description": "…"}
func (s *Server) handleCreateNamespace(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var req namespaceRequest
	if e := decodeBody(ctx.PostBody(), &req, false); e != nil {
		writeError(ctx, e)
		return
	}
	if err := router.ValidateNamespace(req.Name); err != nil {
		writeError(ctx, invalid("field \"name\": %v", err))
		return
	}
	if len(req.Description) > maxNamespaceDescription {
		writeError(ctx, invalid("field \"description\" is at most %d bytes", maxNamespaceDescription))
		return
	}
	if keys.Keys().NamespaceExists(req.Name) {
		writeError(ctx, codeConflict.errf("namespace %s exists", req.Name))
		return
	}
	n := auth.Namespace{Name: req.Name, Description: req.Description, CreatedAt: time.Now().UnixNano()}
	made := func(st *auth.State) bool { return st.NamespaceExists(n.Name) }
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "ns.put", Namespace: &n}, made); aerr != nil {
		if aerr.status == 404 {
			aerr = codeConflict.errf("namespace %s could not be made", n.Name)
		}
		writeError(ctx, aerr)
		return
	}
	auditNote(ctx, "namespace "+n.Name)
	writeJSON(ctx, 201, appendNamespace(nil, &n, 0))
}

// DELETE /api/v1/namespaces/{name} — only an empty namespace: no key, no
// queue, no schedule.
func (s *Server) handleDeleteNamespace(ctx *fasthttp.RequestCtx) {
	keys, aerr := s.keyTable()
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	name, _ := ctx.UserValue("name").(string)
	st := keys.Keys()
	switch {
	case name == router.DefaultNamespace:
		writeError(ctx, invalid("the default namespace cannot be deleted"))
		return
	case !st.NamespaceExists(name):
		writeError(ctx, codeNotFound.errf("no namespace %q", name))
		return
	}
	if ids := st.NamespaceInUse(name); len(ids) > 0 {
		writeError(ctx, codeConflict.errf("namespace %s has %d key(s) (%v): revoke them first", name, len(ids), ids))
		return
	}
	vs, err := s.readEach(func(int) any { return statemachine.ListQueuesQuery{} })
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	for _, v := range vs {
		for _, q := range v.([]statemachine.QueueInfo) {
			if router.QueueInNamespace(q.Name, name) {
				writeError(ctx, codeConflict.errf("namespace %s still has queue %s: delete its queues first", name, router.DisplayQueue(q.Name)))
				return
			}
		}
	}
	vs, err = s.readEach(func(int) any { return statemachine.SchedulesQuery{} })
	if err != nil {
		writeError(ctx, engineError(err))
		return
	}
	for _, v := range vs {
		for _, sc := range v.([]statemachine.Schedule) {
			if router.QueueInNamespace(sc.Queue, name) {
				writeError(ctx, codeConflict.errf("namespace %s still has schedule %s (%s): delete it first", name, sc.ID, sc.Name))
				return
			}
		}
	}
	gone := func(st *auth.State) bool { return !st.NamespaceExists(name) }
	if aerr := s.proposeKeys(keys, auth.Cmd{Op: "ns.delete", Name: name}, gone); aerr != nil {
		if aerr.status == 404 {
			aerr = codeConflict.errf("namespace %s could not be deleted: a key was made in it meanwhile", name)
		}
		writeError(ctx, aerr)
		return
	}
	b := append([]byte(`{"name":`), appendString(nil, name)...)
	writeJSON(ctx, 200, append(b, `,"deleted":true}`...))
}

// appendNamespace renders a namespace with its number of keys.
func appendNamespace(b []byte, n *auth.Namespace, keys int) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, n.Name)
	b = append(b, `,"description":`...)
	b = appendString(b, n.Description)
	b = append(b, `,"keys":`...)
	b = appendInt(b, int64(keys))
	b = append(b, `,"created_at":`...)
	b = appendTime(b, n.CreatedAt)
	return append(b, '}')
}
