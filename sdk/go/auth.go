package corvo

import (
	"context"
	"net/url"
	"time"
)

// API keys: the bodies of /api/v1/auth/keys and /api/v1/auth/whoami (see
// docs/api.md, "Authentication").

// APIKey is an API key as the server lists it: never the key itself, which
// is shown once, when it is created (CreatedKey).
type APIKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	Role      string    `json:"role"`
	Queues    []string  `json:"queues"` // scope globs; empty: every queue
	Enabled   bool      `json:"enabled"`
	CreatedAt time.Time `json:"created_at"`
	// CreatedBy is the ID of the key that created it ("" when the server
	// ran open, or for the bootstrap admin key).
	CreatedBy  string     `json:"created_by"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"` // recorded every 30 s or so, not per request
	// RateRead and RateWrite are the key's requests a second on each node
	// (0: the server's defaults, 2,000 and 1,000; -1: unlimited).
	RateRead  int `json:"rate_read"`
	RateWrite int `json:"rate_write"`
}

// CreateKeyRequest is POST /api/v1/auth/keys.
type CreateKeyRequest struct {
	Name      string     `json:"name"`
	Namespace string     `json:"namespace,omitempty"` // default "default"
	Role      string     `json:"role,omitempty"`      // default "readonly"
	Queues    []string   `json:"queues,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RateRead  int        `json:"rate_read,omitempty"`
	RateWrite int        `json:"rate_write,omitempty"`
}

// CreatedKey is the answer to a creation: the key's record and, this once,
// the key.
type CreatedKey struct {
	APIKey
	Key string `json:"key"`
}

// UpdateKeyRequest is PATCH /api/v1/auth/keys/{id}: the fields that are set
// change.
type UpdateKeyRequest struct {
	Name      *string    `json:"name,omitempty"`
	Role      *string    `json:"role,omitempty"`
	Queues    *[]string  `json:"queues,omitempty"`
	Enabled   *bool      `json:"enabled,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RateRead  *int       `json:"rate_read,omitempty"`
	RateWrite *int       `json:"rate_write,omitempty"`
}

// KeyList is GET /api/v1/auth/keys.
type KeyList struct {
	Keys []APIKey `json:"keys"`
}

// KeyRevoked is DELETE /api/v1/auth/keys/{id}.
type KeyRevoked struct {
	ID      string `json:"id"`
	Revoked bool   `json:"revoked"`
}

// WhoAmI is GET /api/v1/auth/whoami: who the client's key acts as.
type WhoAmI struct {
	// Auth is the server's mode: "keys" (every call needs a key), "open"
	// (loopback: calls without a key act as an admin) or "off".
	Auth      string   `json:"auth"`
	KeyID     string   `json:"key_id"` // "" for an anonymous caller
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Role      string   `json:"role"`
	Queues    []string `json:"queues"`
	// RoleQueues is a custom role's queue scope (on top of Queues).
	RoleQueues  []string `json:"role_queues"`
	Permissions []string `json:"permissions"`
	// SSO is true for the web UI's single sign-on session; Grants are
	// then the namespaces it may act in, with its role in each (KeyID is
	// "sso:<subject>"). Empty for a key.
	SSO    bool              `json:"sso"`
	Grants map[string]string `json:"grants"`
}

// LoginRequest is POST /api/v1/auth/session: the web UI's login with a key
// (the server keeps it in an HttpOnly cookie).
type LoginRequest struct {
	Key string `json:"key"`
}

// LoggedOut is DELETE /api/v1/auth/session.
type LoggedOut struct {
	LoggedOut bool `json:"logged_out"`
}

// RoleInfo is a role as GET /api/v1/auth/roles lists it: a built-in one
// (admin, operator, producer, worker, readonly) or a custom one.
type RoleInfo struct {
	Name        string     `json:"name"`
	BuiltIn     bool       `json:"built_in"`
	Permissions []string   `json:"permissions"`
	Queues      []string   `json:"queues"` // a custom role's queue scope
	CreatedAt   *time.Time `json:"created_at"`
	UpdatedAt   *time.Time `json:"updated_at"`
}

// RoleList is GET /api/v1/auth/roles.
type RoleList struct {
	Roles []RoleInfo `json:"roles"`
}

// PutRoleRequest is PUT /api/v1/auth/roles/{name}: a custom role's
// permissions and optional queue globs.
type PutRoleRequest struct {
	Permissions []string `json:"permissions"`
	Queues      []string `json:"queues,omitempty"`
}

// RoleDeleted is DELETE /api/v1/auth/roles/{name}.
type RoleDeleted struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// Namespace is a namespace as GET /api/v1/namespaces lists it.
type Namespace struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Keys        int        `json:"keys"` // API keys of the namespace
	CreatedAt   *time.Time `json:"created_at"`
}

// NamespaceList is GET /api/v1/namespaces.
type NamespaceList struct {
	Namespaces []Namespace `json:"namespaces"`
}

// CreateNamespaceRequest is POST /api/v1/namespaces.
type CreateNamespaceRequest struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// NamespaceDeleted is DELETE /api/v1/namespaces/{name}.
type NamespaceDeleted struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// Namespaces lists every namespace, the default one included (admins).
func (c *Client) Namespaces(ctx context.Context) ([]Namespace, error) {
	var out NamespaceList
	if _, err := c.do(ctx, "GET", "/api/v1/namespaces", nil, &out); err != nil {
		return nil, err
	}
	return out.Namespaces, nil
}

// CreateNamespace makes a namespace (admins).
func (c *Client) CreateNamespace(ctx context.Context, r CreateNamespaceRequest) (*Namespace, error) {
	var out Namespace
	if _, err := c.do(ctx, "POST", "/api/v1/namespaces", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteNamespace deletes an empty namespace: no key, queue or schedule
// (admins).
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	_, err := c.do(ctx, "DELETE", "/api/v1/namespaces/"+url.PathEscape(name), nil, nil)
	return err
}

// Roles lists the built-in and custom roles.
func (c *Client) Roles(ctx context.Context) ([]RoleInfo, error) {
	var out RoleList
	if _, err := c.do(ctx, "GET", "/api/v1/auth/roles", nil, &out); err != nil {
		return nil, err
	}
	return out.Roles, nil
}

// PutRole creates or replaces a custom role.
func (c *Client) PutRole(ctx context.Context, name string, r PutRoleRequest) (*RoleInfo, error) {
	var out RoleInfo
	if _, err := c.do(ctx, "PUT", "/api/v1/auth/roles/"+url.PathEscape(name), r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteRole deletes a custom role no key has.
func (c *Client) DeleteRole(ctx context.Context, name string) error {
	_, err := c.do(ctx, "DELETE", "/api/v1/auth/roles/"+url.PathEscape(name), nil, nil)
	return err
}

// CreateKey creates an API key; the answer holds the key, shown only now.
func (c *Client) CreateKey(ctx context.Context, r CreateKeyRequest) (*CreatedKey, error) {
	var out CreatedKey
	if _, err := c.do(ctx, "POST", "/api/v1/auth/keys", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keys lists the API keys.
func (c *Client) Keys(ctx context.Context) ([]APIKey, error) {
	var out KeyList
	if _, err := c.do(ctx, "GET", "/api/v1/auth/keys", nil, &out); err != nil {
		return nil, err
	}
	return out.Keys, nil
}

// Key reads one API key by ID.
func (c *Client) Key(ctx context.Context, id string) (*APIKey, error) {
	var out APIKey
	if _, err := c.do(ctx, "GET", "/api/v1/auth/keys/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateKey changes an API key (enable, disable, rename, role, scope,
// expiry).
func (c *Client) UpdateKey(ctx context.Context, id string, r UpdateKeyRequest) (*APIKey, error) {
	var out APIKey
	if _, err := c.do(ctx, "PATCH", "/api/v1/auth/keys/"+url.PathEscape(id), r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeKey deletes an API key: it stops working on every node at once.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	_, err := c.do(ctx, "DELETE", "/api/v1/auth/keys/"+url.PathEscape(id), nil, nil)
	return err
}

// WhoAmI says who the client's key acts as.
func (c *Client) WhoAmI(ctx context.Context) (*WhoAmI, error) {
	var out WhoAmI
	if _, err := c.do(ctx, "GET", "/api/v1/auth/whoami", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RestoreReport is POST /api/v1/restore's answer: records restored and
// records that already existed (left as they were), by kind (namespace,
// role, key, queue, schedule, job, batch, budget, cache, usage_day, provider);
// records left out because they had expired by the time they were
// restored (cache entries); the failures (207) with the first messages;
// how many jobs and batches got a new ID on the target.
type RestoreReport struct {
	Restored map[string]int `json:"restored"`
	Exists   map[string]int `json:"exists"`
	Expired  map[string]int `json:"expired,omitempty"`
	Failed   int            `json:"failed"`
	Errors   []string       `json:"errors,omitempty"`
	Remapped int            `json:"remapped"`
	Shards   int            `json:"shards"`
}
