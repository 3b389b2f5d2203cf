package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/statemachine"
)

// The web UI's session: after its login checks an API key, the browser
// keeps a signed token in the corvo_session cookie (HttpOnly,
// SameSite=Strict), never the key itself. The token names the key and when
// the session ends; each request re-checks the key in the table, so a
// revoked, disabled or expired key ends its sessions at once. Tokens are
// signed with HMAC-SHA-256 under Config.SessionKey (derived from the
// cluster secret by the node, so a session works on every node).

// SessionTTL is how long a UI session lasts (never past its key's expiry).
const SessionTTL = 12 * time.Hour

const sessionPrefix = "v1."

// sessionKey is the signing key: the configured one, else one made for
// this process (sessions then hold on this node only).
func (s *Server) sessionKey() []byte {
	s.sessionOnce.Do(func() {
		s.sessionSecret = s.cfg.SessionKey
		if len(s.sessionSecret) == 0 {
			s.sessionSecret = make([]byte, 32)
			if _, err := rand.Read(s.sessionSecret); err != nil {
				panic("gateway: no randomness: " + err.Error())
			}
		}
	})
	return s.sessionSecret
}

// SessionKeyFrom derives the session signing key from the cluster secret.
func SessionKeyFrom(clusterSecret string) []byte {
	m := hmac.New(sha256.New, []byte(clusterSecret))
	m.Write([]byte("corvo ui session v1"))
	return m.Sum(nil)
}

// newSession is a token for key id, ending at end (Unix ns).
func (s *Server) newSession(id string, end int64) string {
	payload := make([]byte, 0, 8+len(id))
	payload = binary.BigEndian.AppendUint64(payload, uint64(end))
	payload = append(payload, id...)
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write(payload)
	return sessionPrefix + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session reads a token: the key ID it names, or false when it is not one
// this cluster signed or it has ended.
func (s *Server) session(token []byte, now int64) (string, bool) {
	if len(token) < len(sessionPrefix) || string(token[:len(sessionPrefix)]) != sessionPrefix {
		return "", false
	}
	rest := token[len(sessionPrefix):]
	dot := -1
	for i, c := range rest {
		if c == '.' {
			dot = i
			break
		}
	}
	if dot < 0 {
		return "", false
	}
	strict := base64.RawURLEncoding.Strict() // one spelling per token
	payload, err := strict.AppendDecode(nil, rest[:dot])
	if err != nil || len(payload) <= 8 {
		return "", false
	}
	sig, err := strict.AppendDecode(nil, rest[dot+1:])
	if err != nil {
		return "", false
	}
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write(payload)
	if !hmac.Equal(sig, m.Sum(nil)) {
		return "", false
	}
	if int64(binary.BigEndian.Uint64(payload[:8])) <= now {
		return "", false
	}
	id := string(payload[8:])
	return id, auth.ValidKeyID(id)
}

// Single sign-on sessions (oidc.go) are a second kind of token, "v2.": the
// user is not in the key table, so the token itself carries who they are
// and what their groups granted, signed under a key derived from the
// session key (so neither kind can pass for the other). A grant changed at
// the identity provider takes effect at the next login.

const ssoSessionPrefix = "v2."

// ssoSession is what a v2 token says.
type ssoSession struct {
	End     int64             `json:"e"` // Unix ns
	Subject string            `json:"s"` // the ID token's sub
	Name    string            `json:"n"` // email, else name, else sub
	Grants  map[string]string `json:"g"` // namespace → built-in role
}

// derivedKey is the session key for one purpose.
func (s *Server) derivedKey(purpose string) []byte {
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// sealToken is prefix + payload + "." + its HMAC under key (base64url).
func sealToken(key []byte, prefix string, payload []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return prefix + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// openToken is the payload of a sealToken token, or false when key did
// not sign it.
func openToken(key []byte, prefix string, token []byte) ([]byte, bool) {
	if !bytes.HasPrefix(token, []byte(prefix)) {
		return nil, false
	}
	b64, sig64, ok := bytes.Cut(token[len(prefix):], []byte("."))
	if !ok {
		return nil, false
	}
	strict := base64.RawURLEncoding.Strict()
	payload, err := strict.AppendDecode(nil, b64)
	if err != nil {
		return nil, false
	}
	sig, err := strict.AppendDecode(nil, sig64)
	if err != nil {
		return nil, false
	}
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return payload, hmac.Equal(sig, m.Sum(nil))
}

// newSSOSession is a v2 token for ss.
func (s *Server) newSSOSession(ss *ssoSession) string {
	payload, _ := json.Marshal(ss) // strings and a map of strings: cannot fail
	return sealToken(s.derivedKey("corvo sso session v2"), ssoSessionPrefix, payload)
}

// readSSOSession reads a v2 token, or false when it is not one this
// cluster signed, it has ended or it grants nothing.
func (s *Server) readSSOSession(token []byte, now int64) (*ssoSession, bool) {
	payload, ok := openToken(s.derivedKey("corvo sso session v2"), ssoSessionPrefix, token)
	if !ok {
		return nil, false
	}
	var ss ssoSession
	if json.Unmarshal(payload, &ss) != nil || ss.End <= now || len(ss.Grants) == 0 {
		return nil, false
	}
	return &ss, true
}

// principal is who an SSO session acts as: its first grant's namespace
// (the default namespace when granted, else the first by name) and role,
// with every grant for the namespaces it may switch to (auth.Principal.In).
// KeyID names the user ("sso:<sub>") so the audit log can tell users apart
// and filter by one.
func (ss *ssoSession) principal() *auth.Principal {
	ns := auth.DefaultNamespace
	if _, ok := ss.Grants[ns]; !ok {
		ns = slices.Sorted(maps.Keys(ss.Grants))[0]
	}
	return &auth.Principal{KeyID: truncate(ssoKeyIDPrefix+ss.Subject, statemachine.AuditFieldMax), Name: ss.Name,
		Namespace: ns, Role: ss.Grants[ns], Grants: ss.Grants}
}

// ssoKeyIDPrefix marks the KeyID of a single sign-on principal.
const ssoKeyIDPrefix = "sso:"
