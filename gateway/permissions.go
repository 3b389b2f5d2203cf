package gateway

import "github.com/corvohq/corvo/auth"

// The permission table: what every route needs, by "METHOD pattern" as the
// route table registers it. route() refuses to register a route without a
// row (New panics), and TestEveryRouteHasAPermission walks the real route
// table with keys of every role, so a new route cannot ship unguarded.
//
// permCluster marks the node-to-node routes: they take the cluster
// credential (peer.Only) and never a user's key.
// permOpen marks what anyone may read: liveness and the UI's static files
// (the UI's own API calls carry the caller's key).
// permAnyKey needs a valid key (when keys are required) and no permission.
const (
	permCluster = auth.PermNone
	permOpen    = auth.PermNone
	permAnyKey  = auth.Permission("any-key")
)

var permissions = map[string]auth.Permission{
	"POST /api/v1/enqueue":       auth.PermJobsEnqueue,
	"POST /api/v1/enqueue/batch": auth.PermJobsEnqueue,

	"POST /api/v1/fetch":     auth.PermJobsWork,
	"POST /api/v1/ack/batch": auth.PermJobsWork,
	"POST /api/v1/ack/{id}":  auth.PermJobsWork,
	"POST /api/v1/fail/{id}": auth.PermJobsWork,
	"POST /api/v1/heartbeat": auth.PermJobsWork,

	"POST /api/v1/unclaim/{id}": auth.PermJobsWork,

	"GET /api/v1/jobs/{id}":                  auth.PermJobsRead,
	"POST /api/v1/jobs/search":               auth.PermJobsRead,
	"GET /api/v1/usage/summary":              auth.PermQueuesRead,
	"GET /api/v1/scores/summary":             auth.PermQueuesRead,
	"GET /api/v1/scores/compare":             auth.PermQueuesRead,
	"POST /api/v1/jobs/{id}/score":           auth.PermJobsWork,
	"GET /api/v1/budgets":                    auth.PermQueuesRead,
	"PUT /api/v1/budgets":                    auth.PermQueuesManage,
	"POST /api/v1/budgets":                   auth.PermQueuesManage,
	"DELETE /api/v1/budgets/{scope}":         auth.PermQueuesManage,
	"GET /api/v1/providers":                  auth.PermQueuesRead,
	"PUT /api/v1/providers":                  auth.PermQueuesManage,
	"POST /api/v1/providers":                 auth.PermQueuesManage,
	"DELETE /api/v1/providers/{name}":        auth.PermQueuesManage,
	"POST /api/v1/queues/{name}/provider":    auth.PermQueuesManage,
	"DELETE /api/v1/queues/{name}/provider":  auth.PermQueuesManage,
	"GET /api/v1/dead":                       auth.PermJobsRead,
	"GET /api/v1/events":                     auth.PermJobsRead,
	"GET /api/v1/batches/{id}":               auth.PermJobsRead,
	"GET /api/v1/workers":                    auth.PermJobsRead,
	"POST /api/v1/jobs/{id}/cancel":          auth.PermJobsManage,
	"POST /api/v1/jobs/{id}/retry":           auth.PermJobsManage,
	"POST /api/v1/jobs/{id}/move":            auth.PermJobsManage,
	"POST /api/v1/jobs/{id}/approve":         auth.PermJobsManage,
	"POST /api/v1/jobs/{id}/reject":          auth.PermJobsManage,
	"DELETE /api/v1/jobs/{id}":               auth.PermJobsManage,
	"POST /api/v1/jobs/bulk":                 auth.PermJobsManage,
	"GET /api/v1/bulk":                       auth.PermJobsManage,
	"GET /api/v1/bulk/{id}":                  auth.PermJobsManage,
	"DELETE /api/v1/bulk/{id}":               auth.PermJobsManage,
	"GET /api/v1/bulk/{id}/progress":         auth.PermJobsManage,
	"GET /api/v1/queues":                     auth.PermQueuesRead,
	"GET /api/v1/queues/history":             auth.PermQueuesRead,
	"POST /api/v1/queues/{name}/pause":       auth.PermQueuesManage,
	"POST /api/v1/queues/{name}/resume":      auth.PermQueuesManage,
	"POST /api/v1/queues/{name}/concurrency": auth.PermQueuesManage,
	"POST /api/v1/queues/{name}/clear":       auth.PermQueuesManage,
	"POST /api/v1/queues/{name}/drain":       auth.PermQueuesManage,
	"DELETE /api/v1/queues/{name}":           auth.PermQueuesManage,
	"POST /api/v1/queues/{name}/throttle":    auth.PermQueuesManage,
	"DELETE /api/v1/queues/{name}/throttle":  auth.PermQueuesManage,

	"GET /api/v1/schedules":              auth.PermSchedulesRead,
	"POST /api/v1/schedules":             auth.PermSchedulesManage,
	"PUT /api/v1/schedules/{id}":         auth.PermSchedulesManage,
	"DELETE /api/v1/schedules/{id}":      auth.PermSchedulesManage,
	"POST /api/v1/schedules/{id}/pause":  auth.PermSchedulesManage,
	"POST /api/v1/schedules/{id}/resume": auth.PermSchedulesManage,
	"POST /api/v1/schedules/{id}/run":    auth.PermSchedulesManage,

	"GET /api/v1/cluster/status":           auth.PermClusterRead,
	"POST /api/v1/admin/rebuild-mirror":    auth.PermClusterManage,
	"GET /api/v1/backup":                   auth.PermClusterBackup,
	"POST /api/v1/restore":                 auth.PermClusterBackup,
	"GET /internal/v1/shards/{n}/export":   permCluster,
	"GET /api/v1/metrics":                  auth.PermMetricsRead,
	"POST /api/v1/cluster/join":            permCluster,
	"DELETE /api/v1/cluster/nodes/{id}":    permCluster,
	"POST /api/v1/cluster/removed":         permCluster,
	"POST /internal/v1/shards/{n}/propose": permCluster,
	"POST /internal/v1/shards/{n}/read":    permCluster,
	"POST /internal/v1/wait":               permCluster,

	"GET /api/v1/audit": auth.PermAuditRead,

	"GET /api/v1/auth/keys":            auth.PermKeysManage,
	"POST /api/v1/auth/keys":           auth.PermKeysManage,
	"GET /api/v1/auth/keys/{id}":       auth.PermKeysManage,
	"PATCH /api/v1/auth/keys/{id}":     auth.PermKeysManage,
	"DELETE /api/v1/auth/keys/{id}":    auth.PermKeysManage,
	"GET /api/v1/namespaces":           auth.PermNamespacesManage,
	"POST /api/v1/namespaces":          auth.PermNamespacesManage,
	"DELETE /api/v1/namespaces/{name}": auth.PermNamespacesManage,
	"GET /api/v1/auth/roles":           auth.PermKeysManage,
	"GET /api/v1/auth/roles/{name}":    auth.PermKeysManage,
	"PUT /api/v1/auth/roles/{name}":    auth.PermKeysManage,
	"DELETE /api/v1/auth/roles/{name}": auth.PermKeysManage,
	// Who am I: any valid key (or an open server's anonymous admin).
	"GET /api/v1/auth/whoami": permAnyKey,
	// The UI's login checks the key it is given; logout clears a cookie.
	"POST /api/v1/auth/session":   permOpen,
	"DELETE /api/v1/auth/session": permOpen,
	// How the UI's login may sign in; single sign-on's two steps (the
	// browser has no session yet: the issuer vouches for the user).
	"GET /api/v1/auth/methods": permOpen,
	"GET /auth/oidc/login":     permOpen,
	"GET /auth/oidc/callback":  permOpen,

	"GET /healthz":         permOpen,
	"GET /":                permOpen,
	"GET /ui/{filepath:*}": permOpen,
}

// The audit table: which calls the audit log records (audit.go), next to
// the permission table because the two decisions go together. Every
// state-changing route (any method but GET) has a row, or route() panics;
// TestAuditTable checks that every route needing a manage permission is
// audited and that the hot path is audited only with Config.AuditAll.
//
// auditManage routes are recorded on every call, whatever the answer
// (refusals included); auditHot routes (the producers' and workers' path)
// only with Config.AuditAll; auditNever routes never. The action is the
// record's summary, with {param} replaced by the call's path parameter.
type auditClass uint8

const (
	auditNever auditClass = iota
	auditManage
	auditHot
)

type auditRow struct {
	class  auditClass
	action string
}

var audited = map[string]auditRow{
	"POST /api/v1/enqueue":         {auditHot, "enqueue"},
	"POST /api/v1/enqueue/batch":   {auditHot, "enqueue a batch"},
	"POST /api/v1/fetch":           {auditHot, "fetch"},
	"POST /api/v1/ack/batch":       {auditHot, "ack a batch"},
	"POST /api/v1/ack/{id}":        {auditHot, "ack job {id}"},
	"POST /api/v1/fail/{id}":       {auditHot, "fail job {id}"},
	"POST /api/v1/unclaim/{id}":    {auditHot, "unclaim job {id}"},
	"POST /api/v1/heartbeat":       {auditHot, "heartbeat"},
	"POST /api/v1/jobs/{id}/score": {auditHot, "score job {id}"},
	// A read that takes a body.
	"POST /api/v1/jobs/search": {auditNever, ""},

	"POST /api/v1/jobs/{id}/cancel":          {auditManage, "cancel job {id}"},
	"POST /api/v1/jobs/{id}/retry":           {auditManage, "retry job {id}"},
	"POST /api/v1/jobs/{id}/move":            {auditManage, "move job {id}"},
	"POST /api/v1/jobs/{id}/approve":         {auditManage, "approve job {id}"},
	"POST /api/v1/jobs/{id}/reject":          {auditManage, "reject job {id}"},
	"DELETE /api/v1/jobs/{id}":               {auditManage, "delete job {id}"},
	"POST /api/v1/jobs/bulk":                 {auditManage, "bulk action"},
	"DELETE /api/v1/bulk/{id}":               {auditManage, "cancel bulk operation {id}"},
	"POST /api/v1/queues/{name}/pause":       {auditManage, "pause queue {name}"},
	"POST /api/v1/queues/{name}/resume":      {auditManage, "resume queue {name}"},
	"POST /api/v1/queues/{name}/concurrency": {auditManage, "set the concurrency of queue {name}"},
	"POST /api/v1/queues/{name}/clear":       {auditManage, "clear queue {name}"},
	"POST /api/v1/queues/{name}/drain":       {auditManage, "drain queue {name}"},
	"DELETE /api/v1/queues/{name}":           {auditManage, "delete queue {name}"},
	"POST /api/v1/queues/{name}/throttle":    {auditManage, "throttle queue {name}"},
	"DELETE /api/v1/queues/{name}/throttle":  {auditManage, "remove the throttle of queue {name}"},
	"PUT /api/v1/budgets":                    {auditManage, "set a budget"},
	"POST /api/v1/budgets":                   {auditManage, "set a budget"},
	"DELETE /api/v1/budgets/{scope}":         {auditManage, "delete budget {scope}"},
	"PUT /api/v1/providers":                  {auditManage, "set a provider"},
	"POST /api/v1/providers":                 {auditManage, "set a provider"},
	"DELETE /api/v1/providers/{name}":        {auditManage, "delete provider {name}"},
	"POST /api/v1/queues/{name}/provider":    {auditManage, "link queue {name} to a provider"},
	"DELETE /api/v1/queues/{name}/provider":  {auditManage, "unlink queue {name} from its provider"},

	"POST /api/v1/schedules":             {auditManage, "create a schedule"},
	"PUT /api/v1/schedules/{id}":         {auditManage, "update schedule {id}"},
	"DELETE /api/v1/schedules/{id}":      {auditManage, "delete schedule {id}"},
	"POST /api/v1/schedules/{id}/pause":  {auditManage, "pause schedule {id}"},
	"POST /api/v1/schedules/{id}/resume": {auditManage, "resume schedule {id}"},
	"POST /api/v1/schedules/{id}/run":    {auditManage, "run schedule {id} now"},

	"POST /api/v1/admin/rebuild-mirror": {auditManage, "rebuild the mirror"},
	"POST /api/v1/restore":              {auditManage, "restore a backup"},
	"POST /api/v1/cluster/join":         {auditManage, "add a node"},
	"DELETE /api/v1/cluster/nodes/{id}": {auditManage, "remove node {id}"},
	// The notice a removed node gets, from the node that removed it (that
	// removal is recorded); the node is shutting down.
	"POST /api/v1/cluster/removed": {auditNever, ""},
	// Node-to-node plumbing: the calls it carries are recorded where they
	// were made.
	"POST /internal/v1/shards/{n}/propose": {auditNever, ""},
	"POST /internal/v1/shards/{n}/read":    {auditNever, ""},
	"POST /internal/v1/wait":               {auditNever, ""},

	"POST /api/v1/auth/keys":           {auditManage, "create a key"},
	"PATCH /api/v1/auth/keys/{id}":     {auditManage, "change key {id}"},
	"DELETE /api/v1/auth/keys/{id}":    {auditManage, "revoke key {id}"},
	"POST /api/v1/namespaces":          {auditManage, "create namespace"},
	"DELETE /api/v1/namespaces/{name}": {auditManage, "delete namespace {name}"},
	"PUT /api/v1/auth/roles/{name}":    {auditManage, "put role {name}"},
	"DELETE /api/v1/auth/roles/{name}": {auditManage, "delete role {name}"},
	"POST /api/v1/auth/session":        {auditManage, "log in"},
	"DELETE /api/v1/auth/session":      {auditManage, "log out"},
	// A GET, but it makes a session: recorded like the key login.
	"GET /auth/oidc/callback": {auditManage, "sign in with single sign-on"},
}
