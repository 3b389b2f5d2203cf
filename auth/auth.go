// Package auth is who may do what: API keys (their format, hashing and
// records), the permissions a route can need, the built-in roles, and the
// replicated key table (State) that the meta group applies. It is pure: no
// I/O, no clock, no randomness except in NewKey (the gateway makes a key,
// then proposes only its hash).
//
// The gateway maps every route to one Permission (its permission table)
// and asks the caller's Principal whether it holds it.
package auth

import (
	"path"
	"slices"
	"strings"

	"github.com/corvohq/corvo/router"
)

// Permission is one thing a route needs.
type Permission string

// The permissions. Each route of the API needs exactly one (the gateway's
// permission table); PermNone routes are open to anyone (health, the UI's
// static files).
const (
	PermNone Permission = ""

	PermJobsEnqueue Permission = "jobs:enqueue" // enqueue, batch enqueue
	PermJobsWork    Permission = "jobs:work"    // fetch, ack, fail, heartbeat
	PermJobsRead    Permission = "jobs:read"    // a job, a batch, search, dead letters, events, workers
	PermJobsManage  Permission = "jobs:manage"  // cancel, retry, move, delete, approve, bulk

	PermQueuesRead   Permission = "queues:read"   // list queues
	PermQueuesManage Permission = "queues:manage" // pause, resume, concurrency, throttle, clear, drain, delete

	PermSchedulesRead   Permission = "schedules:read"
	PermSchedulesManage Permission = "schedules:manage"

	PermClusterRead   Permission = "cluster:read"   // cluster status
	PermClusterManage Permission = "cluster:manage" // rebuild the mirror (node removal takes the cluster secret)

	PermMetricsRead Permission = "metrics:read"

	PermKeysManage Permission = "keys:manage" // API keys (create, list, change, revoke)

	PermAuditRead Permission = "audit:read" // the audit log (a non-admin: its namespace's)

	PermNamespacesManage Permission = "namespaces:manage" // create, list, delete namespaces (admins)

	PermClusterBackup Permission = "cluster:backup" // back up and restore jobs, settings and keys (admins)
)

// Permissions lists every permission, in a stable order.
var Permissions = []Permission{
	PermJobsEnqueue, PermJobsWork, PermJobsRead, PermJobsManage,
	PermQueuesRead, PermQueuesManage,
	PermSchedulesRead, PermSchedulesManage,
	PermClusterRead, PermClusterManage,
	PermMetricsRead, PermKeysManage, PermAuditRead, PermNamespacesManage, PermClusterBackup,
}

// Built-in roles.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleProducer = "producer"
	RoleWorker   = "worker"
	RoleReadonly = "readonly"
)

// readPerms is every permission that only reads.
var readPerms = []Permission{PermJobsRead, PermQueuesRead, PermSchedulesRead, PermClusterRead, PermMetricsRead}

// Roles holds the built-in roles' permissions.
var Roles = map[string][]Permission{
	RoleAdmin: Permissions,
	RoleOperator: append(slices.Clone(readPerms),
		PermJobsEnqueue, PermJobsManage, PermQueuesManage, PermSchedulesManage, PermAuditRead),
	RoleProducer: {PermJobsEnqueue, PermJobsRead, PermClusterRead},
	RoleWorker:   {PermJobsWork, PermJobsRead, PermClusterRead},
	RoleReadonly: readPerms,
}

// RoleNames lists the built-in roles, most powerful first.
var RoleNames = []string{RoleAdmin, RoleOperator, RoleProducer, RoleWorker, RoleReadonly}

// ValidRole reports whether role is a built-in role.
func ValidRole(role string) bool { _, ok := Roles[role]; return ok }

// Principal is who a request acts as.
type Principal struct {
	KeyID     string // "" for an open server's anonymous caller
	Name      string
	Namespace string
	Role      string
	// Queues, when not empty, limits the key to queues matching one of
	// these globs (path.Match syntax).
	Queues []string
	// Perms, when not nil, are a custom role's permissions (nil: the
	// built-in Roles[Role]); RoleQueues its queue scope, which applies
	// on top of Queues.
	Perms      []Permission
	RoleQueues []string
	// Grants, for a single sign-on session, are the built-in roles the
	// user's groups map to, by namespace: a request in one of those
	// namespaces acts with its role (Namespace and Role are the first
	// grant's).
	Grants map[string]string
}

// In is p acting in namespace ns: p itself in its own namespace; an admin
// anywhere; a single sign-on user in a namespace it has a grant for. The
// second result is false when p may not act in ns.
func (p *Principal) In(ns string) (*Principal, bool) {
	if ns == p.Namespace {
		return p, true
	}
	if p.Admin() {
		c := *p
		c.Namespace = ns
		return &c, true
	}
	if role, ok := p.Grants[ns]; ok {
		c := *p
		c.Namespace, c.Role, c.Perms, c.RoleQueues = ns, role, nil, nil
		return &c, true
	}
	return nil, false
}

// Anonymous is the caller of a server that runs open (loopback, or
// --auth=off): an admin of the default namespace.
var Anonymous = Principal{Name: "anonymous", Namespace: DefaultNamespace, Role: RoleAdmin}

// DefaultNamespace is the namespace of everything not placed in another.
const DefaultNamespace = router.DefaultNamespace

// Can reports whether p's role grants perm.
func (p *Principal) Can(perm Permission) bool {
	if perm == PermNone {
		return true
	}
	return slices.Contains(p.Permissions(), perm)
}

// Permissions are what p's role grants.
func (p *Principal) Permissions() []Permission {
	if p.Perms != nil {
		return p.Perms
	}
	return Roles[p.Role]
}

// Admin reports whether p is an admin (who may cross namespaces).
func (p *Principal) Admin() bool { return p.Role == RoleAdmin }

// AllowsQueue reports whether p's queue scope (its key's and its role's)
// admits queue. Globs match the name inside the namespace: queue may be a
// stored name (router.NamespacedQueue) or a name as the namespace sees it.
func (p *Principal) AllowsQueue(queue string) bool {
	if len(p.Queues) == 0 && len(p.RoleQueues) == 0 {
		return true
	}
	queue = router.DisplayQueue(queue)
	return matchesAny(p.Queues, queue) && matchesAny(p.RoleQueues, queue)
}

// Scoped reports whether p is limited to some queues.
func (p *Principal) Scoped() bool { return len(p.Queues) > 0 || len(p.RoleQueues) > 0 }

// matchesAny reports whether queue matches one of globs (an empty list
// matches every queue).
func matchesAny(globs []string, queue string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, queue); ok {
			return true
		}
	}
	return false
}

// ValidPermission reports whether p is one of Permissions.
func ValidPermission(p Permission) bool { return slices.Contains(Permissions, p) }

// CheckQueueGlob says what is wrong with a queue-scope glob, or "".
func CheckQueueGlob(g string) string {
	switch {
	case g == "":
		return "a queue glob may not be empty"
	case len(g) > 128:
		return "a queue glob is at most 128 bytes"
	case strings.ContainsAny(g, "/\\"):
		return "a queue glob may not contain / or \\"
	}
	if _, err := path.Match(g, ""); err != nil {
		return "bad queue glob " + g + ": " + err.Error()
	}
	return ""
}
