package auth

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewKeyRoundTrips(t *testing.T) {
	key, id, hash := NewKey()
	require.Len(t, key, KeyLen)
	require.True(t, strings.HasPrefix(key, KeyPrefix+id+"_"))
	got, ok := KeyID(key)
	require.True(t, ok)
	require.Equal(t, id, got)
	require.Equal(t, HashKey(key), hash)
	key2, id2, _ := NewKey()
	require.NotEqual(t, key, key2)
	require.NotEqual(t, id, id2)
}

func TestKeyIDRefusesMalformedKeys(t *testing.T) {
	key, _, _ := NewKey()
	for _, bad := range []string{
		"", "corvo_", key[:len(key)-1], key + "x", strings.Replace(key, "corvo_", "corva_", 1),
		strings.ToUpper(key[:len(KeyPrefix)+keyIDLen]) + key[len(KeyPrefix)+keyIDLen:],
		key[:len(KeyPrefix)+keyIDLen] + "-" + key[len(KeyPrefix)+keyIDLen+1:],
		key[:len(key)-1] + "=",
	} {
		_, ok := KeyID(bad)
		require.False(t, ok, "%q", bad)
	}
}

func put(t *testing.T, s *State, k Key) (*State, string) {
	t.Helper()
	key, id, hash := NewKey()
	k.ID, k.Hash, k.Enabled = id, hash, true
	n, ok := s.Apply(Cmd{Op: "put", Key: &k})
	require.True(t, ok)
	return n, key
}

func TestAuthenticate(t *testing.T) {
	s, key := put(t, Empty, Key{Name: "a", Namespace: "default", Role: RoleWorker, ExpiresAt: 100})
	require.Equal(t, 0, Empty.Len(), "Apply changed the state it was called on")
	k, r := s.Authenticate([]byte(key), 99)
	require.Equal(t, Accepted, r)
	require.Equal(t, RoleWorker, k.Role)
	_, r = s.Authenticate([]byte(key), 100)
	require.Equal(t, Expired, r)
	_, r = s.Authenticate([]byte("nope"), 1)
	require.Equal(t, Malformed, r)
	other, _, _ := NewKey()
	_, r = s.Authenticate([]byte(other), 1)
	require.Equal(t, Unknown, r)
	// The right ID with another secret.
	forged := key[:len(key)-4] + "AAAA"
	if forged == key {
		forged = key[:len(key)-4] + "BBBB"
	}
	_, r = s.Authenticate([]byte(forged), 1)
	require.Equal(t, Wrong, r)

	off := false
	s2, ok := s.Apply(Cmd{Op: "update", ID: k.ID, Update: &Update{Enabled: &off}})
	require.True(t, ok)
	_, r = s2.Authenticate([]byte(key), 1)
	require.Equal(t, Disabled, r)
	_, r = s.Authenticate([]byte(key), 1)
	require.Equal(t, Accepted, r, "the old state changed")

	s3, ok := s2.Apply(Cmd{Op: "delete", ID: k.ID})
	require.True(t, ok)
	_, r = s3.Authenticate([]byte(key), 1)
	require.Equal(t, Unknown, r)
	_, ok = s3.Apply(Cmd{Op: "delete", ID: k.ID})
	require.False(t, ok)
}

func TestApplyRefusesDuplicatesAndKeepsTouchMonotonic(t *testing.T) {
	s, key := put(t, Empty, Key{Name: "a", Role: RoleAdmin})
	id, _ := KeyID(key)
	dup, _ := s.Key(id)
	_, ok := s.Apply(Cmd{Op: "put", Key: &dup})
	require.False(t, ok)
	s, ok = s.Apply(Cmd{Op: "touch", Touch: map[string]int64{id: 50, "0000000000000000": 9}})
	require.True(t, ok)
	_, ok = s.Apply(Cmd{Op: "touch", Touch: map[string]int64{id: 40}})
	require.False(t, ok, "a touch moved last-used backwards")
	k, _ := s.Key(id)
	require.Equal(t, int64(50), k.LastUsedAt)
	_, ok = s.Apply(Cmd{Op: "nonsense"})
	require.False(t, ok)
}

func TestStateJSONRoundTrip(t *testing.T) {
	s, _ := put(t, Empty, Key{Name: "a", Namespace: "default", Role: RoleOperator, Queues: []string{"emails.*"}, CreatedAt: 2})
	s, _ = put(t, s, Key{Name: "b", Namespace: "default", Role: RoleReadonly, CreatedAt: 1})
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back State
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, s.Keys(), back.Keys())
	require.Equal(t, "b", back.Keys()[0].Name, "keys list in creation order")
}

func TestRolesAndScopes(t *testing.T) {
	for _, role := range RoleNames {
		require.True(t, ValidRole(role))
		for _, p := range Roles[role] {
			require.Contains(t, Permissions, p, "role %s has an unlisted permission", role)
		}
	}
	require.False(t, ValidRole("root"))
	admin := Principal{Role: RoleAdmin}
	for _, p := range Permissions {
		require.True(t, admin.Can(p), "admin lacks %s", p)
	}
	w := Principal{Role: RoleWorker, Queues: []string{"emails.*", "sms"}}
	require.True(t, w.Can(PermJobsWork))
	require.False(t, w.Can(PermJobsEnqueue))
	require.False(t, w.Can(PermKeysManage))
	require.True(t, w.Can(PermNone))
	require.True(t, w.AllowsQueue("emails.welcome"))
	require.True(t, w.AllowsQueue("sms"))
	require.False(t, w.AllowsQueue("billing"))
	ro := Principal{Role: RoleReadonly}
	require.False(t, ro.Can(PermJobsManage))
	require.True(t, ro.Can(PermMetricsRead))
	require.Equal(t, "", CheckQueueGlob("emails.*"))
	require.NotEqual(t, "", CheckQueueGlob("[a"))
	require.NotEqual(t, "", CheckQueueGlob(""))
}

func FuzzKeyID(f *testing.F) {
	key, _, _ := NewKey()
	f.Add(key)
	f.Add("corvo_0123456789abcdef_")
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := KeyID(s)
		if ok && (len(s) != KeyLen || !ValidKeyID(id) || !strings.Contains(s, id)) {
			t.Fatalf("KeyID(%q) = %q", s, id)
		}
	})
}

func TestCustomRoles(t *testing.T) {
	s, ok := Empty.Apply(Cmd{Op: "role.put", Role: &Role{Name: "billing", Permissions: []Permission{PermJobsRead, PermQueuesManage}, Queues: []string{"billing.*"}, CreatedAt: 5}})
	require.True(t, ok)
	_, ok = s.Apply(Cmd{Op: "role.put", Role: &Role{Name: RoleAdmin, Permissions: []Permission{PermJobsRead}}})
	require.False(t, ok, "a built-in role was replaced")
	require.True(t, s.RoleExists("billing"))
	require.True(t, s.RoleExists(RoleWorker))
	require.False(t, s.RoleExists("nope"))

	s, key := put(t, s, Key{Name: "b", Role: "billing", Queues: []string{"billing.eu*"}})
	k, r := s.Authenticate([]byte(key), 1)
	require.Equal(t, Accepted, r)
	p := k.Principal()
	require.True(t, p.Can(PermQueuesManage))
	require.False(t, p.Can(PermJobsEnqueue))
	require.True(t, p.AllowsQueue("billing.eu-1"))
	require.False(t, p.AllowsQueue("billing.us-1"), "the key's own scope was ignored")
	require.False(t, p.AllowsQueue("emails.eu"), "the role's scope was ignored")

	// Changing the role changes what its keys may do, at once.
	s2, ok := s.Apply(Cmd{Op: "role.put", Role: &Role{Name: "billing", Permissions: []Permission{PermJobsEnqueue}, CreatedAt: 9}})
	require.True(t, ok)
	k2, _ := s2.Authenticate([]byte(key), 1)
	require.True(t, k2.Principal().Can(PermJobsEnqueue))
	require.False(t, k2.Principal().Can(PermQueuesManage))
	require.True(t, k.Principal().Can(PermQueuesManage), "the old state's principal changed")
	role, _ := s2.Role("billing")
	require.Equal(t, int64(5), role.CreatedAt, "replacing a role reset its creation time")

	_, ok = s2.Apply(Cmd{Op: "role.delete", Name: "billing"})
	require.False(t, ok, "a role a key has was deleted")
	require.Equal(t, []string{k.ID}, s2.RoleInUse("billing"))
	s3, _ := s2.Apply(Cmd{Op: "delete", ID: k.ID})
	s3, ok = s3.Apply(Cmd{Op: "role.delete", Name: "billing"})
	require.True(t, ok)
	require.False(t, s3.RoleExists("billing"))

	// Snapshots keep roles and resolve keys against them; a bare list of
	// keys (the first snapshot format) still reads.
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back State
	require.NoError(t, json.Unmarshal(b, &back))
	kb, r := back.Authenticate([]byte(key), 1)
	require.Equal(t, Accepted, r)
	require.True(t, kb.Principal().Can(PermQueuesManage), "a restored key lost its custom role")
	var old State
	require.NoError(t, json.Unmarshal([]byte(`[{"id":"0123456789abcdef","hash":"x","name":"o","role":"admin","enabled":true,"created_at":1}]`), &old))
	require.Equal(t, 1, old.Len())
}

func TestRevokedKeysStayRevoked(t *testing.T) {
	s, key := put(t, Empty, Key{Name: "a", Role: RoleAdmin})
	id, _ := KeyID(key)
	k, _ := s.Key(id)
	s, ok := s.Apply(Cmd{Op: "delete", ID: id, At: 7})
	require.True(t, ok)
	require.True(t, s.Revoked(id))
	_, ok = s.Apply(Cmd{Op: "put", Key: &k})
	require.False(t, ok, "a revoked key was put back")
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back State
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.Revoked(id), "a snapshot forgot a revocation")
}

func TestNamespaceCommands(t *testing.T) {
	s := Empty
	if !s.NamespaceExists(DefaultNamespace) || s.NamespaceExists("acme") || s.MultiTenant() {
		t.Fatal("a new state has only the default namespace")
	}
	s, ok := s.Apply(Cmd{Op: "ns.put", Namespace: &Namespace{Name: "acme", CreatedAt: 5}})
	if !ok || !s.NamespaceExists("acme") || !s.MultiTenant() {
		t.Fatal("ns.put did not make acme")
	}
	for _, bad := range []Cmd{
		{Op: "ns.put", Namespace: &Namespace{Name: "acme"}},           // exists
		{Op: "ns.put", Namespace: &Namespace{Name: DefaultNamespace}}, // always exists
		{Op: "ns.put", Namespace: &Namespace{Name: "Bad/Name"}},
		{Op: "ns.put"},
		{Op: "ns.delete", Name: DefaultNamespace},
		{Op: "ns.delete", Name: "nope"},
	} {
		if _, changed := s.Apply(bad); changed {
			t.Fatalf("%+v changed the state", bad)
		}
	}
	s, _ = s.Apply(Cmd{Op: "put", Key: &Key{ID: "0123456789abcdef", Namespace: "acme", Role: RoleWorker, Enabled: true}})
	if _, changed := s.Apply(Cmd{Op: "ns.delete", Name: "acme"}); changed {
		t.Fatal("a namespace with a key was deleted")
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Namespaces(); len(got) != 2 || got[0].Name != "acme" || got[0].CreatedAt != 5 || got[1].Name != DefaultNamespace {
		t.Fatalf("namespaces after a snapshot round trip: %+v", got)
	}
	s, _ = s.Apply(Cmd{Op: "delete", ID: "0123456789abcdef", At: 1})
	if s, ok = s.Apply(Cmd{Op: "ns.delete", Name: "acme"}); !ok || s.NamespaceExists("acme") {
		t.Fatal("an unused namespace was not deleted")
	}
}
