package auth

import (
	"encoding/json"
	"maps"
	"sort"

	"github.com/corvohq/corvo/router"
)

// Key is an API key as the cluster stores it: never the key itself.
type Key struct {
	ID        string   `json:"id"`
	Hash      string   `json:"hash"` // HashKey of the key
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Role      string   `json:"role"`
	Queues    []string `json:"queues,omitempty"` // scope globs; empty: every queue
	Enabled   bool     `json:"enabled"`
	CreatedAt int64    `json:"created_at"`           // Unix ns
	ExpiresAt int64    `json:"expires_at,omitempty"` // Unix ns; 0: never
	// LastUsedAt is when a node last saw the key (Unix ns), recorded by
	// a "touch" each node proposes at most once a flush interval for
	// every key it saw since: never a Raft entry per request.
	LastUsedAt int64  `json:"last_used_at,omitempty"`
	CreatedBy  string `json:"created_by,omitempty"` // the creating key's ID ("" when open or bootstrap)
	// RateRead and RateWrite are the key's requests a second per node
	// (0: the server's defaults; -1: unlimited).
	RateRead  int `json:"rate_read,omitempty"`
	RateWrite int `json:"rate_write,omitempty"`

	// who is the principal the key acts as, made when the key (or its
	// role) enters a State: a request then takes it without allocating.
	who *Principal
}

// Principal is who the key acts as. Keys a State returns share one value:
// do not change it.
func (k *Key) Principal() *Principal {
	if k.who != nil {
		return k.who
	}
	return &Principal{KeyID: k.ID, Name: k.Name, Namespace: k.Namespace, Role: k.Role, Queues: k.Queues}
}

// Role is a custom role: a set of permissions, optionally limited to
// queues matching its globs (on top of each key's own scope).
type Role struct {
	Name        string       `json:"name"`
	Permissions []Permission `json:"permissions"`
	Queues      []string     `json:"queues,omitempty"`
	CreatedAt   int64        `json:"created_at"`
	UpdatedAt   int64        `json:"updated_at,omitempty"`
}

// Namespace is a tenant: its queues, jobs, schedules and keys are its own
// (router.NamespacedQueue). The default namespace always exists and is not
// in the table.
type Namespace struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	CreatedAt   int64  `json:"created_at"` // Unix ns
}

// State is the cluster's key table and its custom roles. A *State is
// never changed: Apply returns a new one, so readers need no lock.
type State struct {
	keys  map[string]*Key  // by ID
	roles map[string]*Role // custom roles by name
	// revoked holds the IDs of revoked keys (when): a revoked key never
	// comes back, not even as a configured admin key at a restart.
	revoked map[string]int64
	// namespaces holds the namespaces made besides the default one.
	namespaces map[string]*Namespace
}

// Empty is the state of a cluster with no keys.
var Empty = &State{keys: map[string]*Key{}, roles: map[string]*Role{}, revoked: map[string]int64{}, namespaces: map[string]*Namespace{}}

// NamespaceExists reports whether ns is the default namespace or one made
// with "ns.put".
func (s *State) NamespaceExists(ns string) bool {
	_, ok := s.namespaces[ns]
	return ok || ns == DefaultNamespace
}

// Namespaces lists every namespace by name, the default one included.
func (s *State) Namespaces() []Namespace {
	out := make([]Namespace, 0, len(s.namespaces)+1)
	out = append(out, Namespace{Name: DefaultNamespace})
	for _, n := range s.namespaces {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// MultiTenant reports whether a namespace besides the default one exists.
func (s *State) MultiTenant() bool { return len(s.namespaces) > 0 }

// NamespaceInUse lists the IDs of the keys of namespace ns.
func (s *State) NamespaceInUse(ns string) []string {
	var ids []string
	for id, k := range s.keys {
		if k.Namespace == ns {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Revoked reports whether the key with this ID was revoked.
func (s *State) Revoked(id string) bool { _, ok := s.revoked[id]; return ok }

// stored returns a copy of k ready to enter s: its principal resolved
// against s's roles.
func (s *State) stored(k Key) *Key {
	p := &Principal{KeyID: k.ID, Name: k.Name, Namespace: k.Namespace, Role: k.Role, Queues: k.Queues}
	if r, ok := s.roles[k.Role]; ok {
		p.Perms, p.RoleQueues = r.Permissions, r.Queues
		if p.Perms == nil {
			p.Perms = []Permission{} // a custom role with no permission grants nothing
		}
	}
	k.who = p
	return &k
}

// Role returns a copy of the custom role name.
func (s *State) Role(name string) (Role, bool) {
	r, ok := s.roles[name]
	if !ok {
		return Role{}, false
	}
	return *r, true
}

// Roles lists the custom roles by name.
func (s *State) Roles() []Role {
	out := make([]Role, 0, len(s.roles))
	for _, r := range s.roles {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RoleExists reports whether role is built in or a custom role of s.
func (s *State) RoleExists(role string) bool {
	_, custom := s.roles[role]
	return custom || ValidRole(role)
}

// RoleInUse lists the IDs of the keys that have role.
func (s *State) RoleInUse(role string) []string {
	var ids []string
	for id, k := range s.keys {
		if k.Role == role {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Len is the number of keys.
func (s *State) Len() int { return len(s.keys) }

// Key returns a copy of the key with this ID.
func (s *State) Key(id string) (Key, bool) {
	k, ok := s.keys[id]
	if !ok {
		return Key{}, false
	}
	return *k, true
}

// Keys lists copies of every key, by creation time then ID.
func (s *State) Keys() []Key {
	out := make([]Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Why a key was refused.
type Refusal int

const (
	Accepted  Refusal = iota
	Malformed         // not a Corvo API key
	Unknown           // no such key (or revoked)
	Wrong             // the ID exists but the secret does not match
	Disabled
	Expired
)

func (r Refusal) String() string {
	return [...]string{"accepted", "malformed", "unknown", "wrong", "disabled", "expired"}[r]
}

// Authenticate finds the key's record and says whether it may be used at
// now (Unix ns). It does not allocate.
func (s *State) Authenticate(key []byte, now int64) (*Key, Refusal) {
	if !wellFormed(key) {
		return nil, Malformed
	}
	k, ok := s.keys[string(key[len(KeyPrefix):len(KeyPrefix)+keyIDLen])]
	switch {
	case !ok:
		return nil, Unknown
	case !hashMatches(key, k.Hash):
		return nil, Wrong
	case !k.Enabled:
		return nil, Disabled
	case k.ExpiresAt != 0 && now >= k.ExpiresAt:
		return nil, Expired
	}
	return k, Accepted
}

// KeyByID is Authenticate for a key already proven another way (a UI
// session signed by the cluster): the key must exist and be usable at now.
func (s *State) KeyByID(id string, now int64) (*Key, Refusal) {
	k, ok := s.keys[id]
	switch {
	case !ok:
		return nil, Unknown
	case !k.Enabled:
		return nil, Disabled
	case k.ExpiresAt != 0 && now >= k.ExpiresAt:
		return nil, Expired
	}
	return k, Accepted
}

// Cmd is one change to the key table, proposed to the meta group.
type Cmd struct {
	Op string `json:"op"` // put | update | delete | touch | role.put | role.delete | ns.put | ns.delete
	// put: the new key (refused when its ID exists).
	Key *Key `json:"key,omitempty"`
	// update, delete: the key's ID; update sets the fields that are set.
	ID     string  `json:"id,omitempty"`
	Update *Update `json:"update,omitempty"`
	// touch: last-used times by key ID (only ever moved forward).
	Touch map[string]int64 `json:"touch,omitempty"`
	// role.put: a custom role, created or replaced (never a built-in
	// name); role.delete: Name, refused while a key has the role.
	Role *Role  `json:"role,omitempty"`
	Name string `json:"name,omitempty"`
	// ns.put: a namespace, created (refused when it exists); ns.delete:
	// Name, refused while a key belongs to it.
	Namespace *Namespace `json:"namespace,omitempty"`
	// At is when (Unix ns) a delete revoked the key.
	At int64 `json:"at,omitempty"`
}

// Update is a change to an existing key; nil fields stay.
type Update struct {
	Name      *string   `json:"name,omitempty"`
	Role      *string   `json:"role,omitempty"`
	Queues    *[]string `json:"queues,omitempty"`
	Enabled   *bool     `json:"enabled,omitempty"`
	ExpiresAt *int64    `json:"expires_at,omitempty"`
	RateRead  *int      `json:"rate_read,omitempty"`
	RateWrite *int      `json:"rate_write,omitempty"`
}

// Apply returns the state after c and whether c changed anything (false:
// a put over an existing ID, an update or delete of a missing key). It is
// deterministic: everything it stores comes from c.
func (s *State) Apply(c Cmd) (*State, bool) {
	switch c.Op {
	case "put":
		if c.Key == nil || !ValidKeyID(c.Key.ID) || s.keys[c.Key.ID] != nil || s.Revoked(c.Key.ID) {
			return s, false
		}
		n := s.clone()
		n.keys[c.Key.ID] = n.stored(*c.Key)
		return n, true
	case "update":
		old, ok := s.keys[c.ID]
		if !ok || c.Update == nil {
			return s, false
		}
		k := *old
		u := c.Update
		if u.Name != nil {
			k.Name = *u.Name
		}
		if u.Role != nil {
			k.Role = *u.Role
		}
		if u.Queues != nil {
			k.Queues = *u.Queues
		}
		if u.Enabled != nil {
			k.Enabled = *u.Enabled
		}
		if u.ExpiresAt != nil {
			k.ExpiresAt = *u.ExpiresAt
		}
		if u.RateRead != nil {
			k.RateRead = *u.RateRead
		}
		if u.RateWrite != nil {
			k.RateWrite = *u.RateWrite
		}
		n := s.clone()
		n.keys[k.ID] = n.stored(k)
		return n, true
	case "delete":
		if _, ok := s.keys[c.ID]; !ok {
			return s, false
		}
		n := s.clone()
		delete(n.keys, c.ID)
		n.revoked[c.ID] = c.At
		return n, true
	case "touch":
		var n *State
		for id, at := range c.Touch {
			old, ok := s.keys[id]
			if !ok || at <= old.LastUsedAt {
				continue
			}
			if n == nil {
				n = s.clone()
			}
			k := *old
			k.LastUsedAt = at
			n.keys[id] = &k // who is unchanged
		}
		if n == nil {
			return s, false
		}
		return n, true
	case "role.put":
		if c.Role == nil || c.Role.Name == "" || ValidRole(c.Role.Name) {
			return s, false
		}
		n := s.clone()
		r := *c.Role
		if old, ok := s.roles[r.Name]; ok {
			r.CreatedAt = old.CreatedAt
		}
		n.roles[r.Name] = &r
		n.reresolve(r.Name)
		return n, true
	case "role.delete":
		if _, ok := s.roles[c.Name]; !ok || len(s.RoleInUse(c.Name)) > 0 {
			return s, false
		}
		n := s.clone()
		delete(n.roles, c.Name)
		return n, true
	case "ns.put":
		if c.Namespace == nil || router.ValidateNamespace(c.Namespace.Name) != nil || s.NamespaceExists(c.Namespace.Name) {
			return s, false
		}
		n := s.clone()
		ns := *c.Namespace
		n.namespaces[ns.Name] = &ns
		return n, true
	case "ns.delete":
		if _, ok := s.namespaces[c.Name]; !ok || len(s.NamespaceInUse(c.Name)) > 0 {
			return s, false
		}
		n := s.clone()
		delete(n.namespaces, c.Name)
		return n, true
	}
	return s, false
}

// reresolve gives the keys of role a principal with its new permissions.
func (s *State) reresolve(role string) {
	for id, k := range s.keys {
		if k.Role == role {
			s.keys[id] = s.stored(*k)
		}
	}
}

func (s *State) clone() *State {
	return &State{keys: maps.Clone(s.keys), roles: maps.Clone(s.roles), revoked: maps.Clone(s.revoked), namespaces: maps.Clone(s.namespaces)}
}

// stateJSON is State's form in meta snapshots.
type stateJSON struct {
	Keys    []Key            `json:"keys"`
	Roles   []Role           `json:"roles,omitempty"`
	Revoked map[string]int64 `json:"revoked,omitempty"`
	// Namespaces are the namespaces besides the default one.
	Namespaces []Namespace `json:"namespaces,omitempty"`
}

// MarshalJSON writes the keys and roles (meta snapshots).
func (s *State) MarshalJSON() ([]byte, error) {
	var nss []Namespace
	for _, n := range s.Namespaces() {
		if n.Name != DefaultNamespace {
			nss = append(nss, n)
		}
	}
	return json.Marshal(stateJSON{Keys: s.Keys(), Roles: s.Roles(), Revoked: s.revoked, Namespaces: nss})
}

// UnmarshalJSON reads what MarshalJSON wrote (or a bare list of keys).
func (s *State) UnmarshalJSON(b []byte) error {
	var st stateJSON
	if len(b) > 0 && b[0] == '[' {
		if err := json.Unmarshal(b, &st.Keys); err != nil {
			return err
		}
	} else if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	s.revoked = st.Revoked
	if s.revoked == nil {
		s.revoked = map[string]int64{}
	}
	s.namespaces = make(map[string]*Namespace, len(st.Namespaces))
	for i := range st.Namespaces {
		s.namespaces[st.Namespaces[i].Name] = &st.Namespaces[i]
	}
	s.roles = make(map[string]*Role, len(st.Roles))
	for i := range st.Roles {
		s.roles[st.Roles[i].Name] = &st.Roles[i]
	}
	s.keys = make(map[string]*Key, len(st.Keys))
	for i := range st.Keys {
		s.keys[st.Keys[i].ID] = s.stored(st.Keys[i])
	}
	return nil
}
