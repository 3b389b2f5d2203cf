package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
)

// An API key reads "corvo_<id>_<secret>": id is 16 hex digits (64 random
// bits) that name the key in lists, logs and the audit trail; secret is
// 32 random bytes, base64url. Only SHA-256 of the whole key is stored: the
// key has 256 bits of entropy, so a slow password hash would buy nothing
// and cost every request.

// KeyPrefix starts every API key.
const KeyPrefix = "corvo_"

const (
	keyIDLen     = 16
	keySecretLen = 43 // base64url of 32 bytes, no padding
	// KeyLen is the length of every API key.
	KeyLen = len(KeyPrefix) + keyIDLen + 1 + keySecretLen
)

// NewKey makes a random key and returns it with its ID and hash.
func NewKey() (key, id, hash string) {
	var b [8 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("auth: no randomness: " + err.Error())
	}
	id = hex.EncodeToString(b[:8])
	key = KeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(b[8:])
	return key, id, HashKey(key)
}

// KeyID returns the ID a well-formed key carries.
func KeyID(key string) (string, bool) {
	if !wellFormed([]byte(key)) {
		return "", false
	}
	return key[len(KeyPrefix) : len(KeyPrefix)+keyIDLen], true
}

// wellFormed reports whether key is corvo_<16 lower-case hex>_<43 base64url>.
func wellFormed(key []byte) bool {
	if len(key) != KeyLen || string(key[:len(KeyPrefix)]) != KeyPrefix || key[len(KeyPrefix)+keyIDLen] != '_' {
		return false
	}
	for _, c := range key[len(KeyPrefix) : len(KeyPrefix)+keyIDLen] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	secret := key[len(KeyPrefix)+keyIDLen+1:]
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidKeyID reports whether id is 16 lower-case hex digits.
func ValidKeyID(id string) bool {
	if len(id) != keyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// HashKey is the stored form of a key: hex SHA-256.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// hashMatches compares a key's hash with a stored (hex) one in constant
// time, without allocating.
func hashMatches(key []byte, stored string) bool {
	var want [sha256.Size]byte
	if len(stored) != 2*sha256.Size {
		return false
	}
	if _, err := hex.Decode(want[:], []byte(stored)); err != nil {
		return false
	}
	got := sha256.Sum256(key)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
