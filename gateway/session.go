package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/corvohq/corvo/auth"
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
