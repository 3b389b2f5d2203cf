package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/shard"
)

// Secure by default: a server that listens on anything but loopback needs
// API keys. With none in the cluster and none given, its first start makes
// an admin key, writes it to <data-dir>/admin-key (mode 0600) and logs
// where it is. --admin-key-file or CORVO_ADMIN_KEY give one instead.
// --auth=off turns keys off altogether, for trusted networks, and says so.

// Auth modes (Config.Auth).
const (
	AuthAuto = "auto" // keys unless the server listens only on loopback
	AuthOn   = "on"
	AuthOff  = "off"
)

// AdminKeyFile is where a node keeps the admin key it made, mode 0600.
const AdminKeyFile = "admin-key"

// Loopback reports whether the listen address bind accepts only loopback
// connections (127.0.0.0/8, ::1 or localhost; an empty host listens on
// every interface).
func Loopback(bind string) bool {
	host, _, err := net.SplitHostPort(bind)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authMode is the gateway's mode for this config.
func (c Config) authMode() gateway.AuthMode {
	switch {
	case c.Auth == AuthOff:
		return gateway.AuthOff
	case c.Auth == AuthOn || !Loopback(c.Bind):
		return gateway.AuthRequired
	}
	return gateway.AuthOpen
}

// givenAdminKey is the admin key the config names, and where it came from.
func (c Config) givenAdminKey() (key, from string, err error) {
	if c.AdminKey != "" {
		key, from = strings.TrimSpace(c.AdminKey), "CORVO_ADMIN_KEY"
	} else if c.AdminKeyFile != "" {
		b, err := os.ReadFile(c.AdminKeyFile)
		if err != nil {
			return "", "", fmt.Errorf("--admin-key-file: %w", err)
		}
		key, from = strings.TrimSpace(string(b)), c.AdminKeyFile
	}
	if key != "" {
		if _, ok := auth.KeyID(key); !ok {
			return "", "", fmt.Errorf("%s: not a Corvo API key (corvo_<16 hex>_<43 base64url>; make one with corvo auth keys create)", from)
		}
	}
	return key, from, nil
}

// ensureAdminKey makes sure the admin key this node was given (or made)
// is in the cluster's key table.
func (n *Node) ensureAdminKey(ctx context.Context) error {
	cfg := n.cfg
	mode := cfg.authMode()
	if mode == gateway.AuthOff {
		n.log.Warn().Msg("--auth=off: every caller of the API is an admin, with no key. Use it only on a trusted network")
		return nil
	}
	key, from, err := cfg.givenAdminKey()
	if err != nil {
		return &ConfigError{err}
	}
	path := filepath.Join(cfg.DataDir, AdminKeyFile)
	if key == "" {
		// One this node made before (it may have stopped before the
		// cluster took it).
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			// Only while the table is empty: an operator may have
			// revoked it since.
			if n.host.Keys().Len() > 0 {
				return nil
			}
			key, from = strings.TrimSpace(string(b)), path
		case !errors.Is(err, os.ErrNotExist):
			return err
		case mode == gateway.AuthRequired && n.host.Keys().Len() == 0:
			key, _, _ = auth.NewKey()
			if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
				return fmt.Errorf("write the admin key: %w", err)
			}
			from = path
			n.log.Warn().Str("file", path).Str("bind", cfg.Bind).
				Msg("this server is not on loopback only and the cluster has no API key: created an admin key in this file (mode 0600). " +
					"Send it as Authorization: Bearer <key>, or give it to the CLI as CORVO_API_KEY")
		default:
			return nil
		}
	}
	return registerAdminKey(ctx, n.host, key, from, n.log)
}

// registerAdminKey puts key in the table as an admin key, unless it is there.
func registerAdminKey(ctx context.Context, host *shard.Host, key, from string, log zerolog.Logger) error {
	id, ok := auth.KeyID(key)
	if !ok {
		return &ConfigError{fmt.Errorf("%s: not a Corvo API key", from)}
	}
	hash := auth.HashKey(key)
	if host.Keys().Revoked(id) {
		// Revocation is for good: a configured key does not undo it.
		log.Warn().Str("key_id", id).Str("from", from).Msg("the configured admin key was revoked: it stays revoked (give the server another one)")
		return nil
	}
	if k, ok := host.Keys().Key(id); ok {
		if k.Hash != hash {
			return &ConfigError{fmt.Errorf("%s: the cluster has another key with this key's ID %s", from, id)}
		}
		return nil
	}
	// The operator's own key: no request rate (keys made through the API
	// get the server's defaults).
	k := auth.Key{ID: id, Hash: hash, Name: "admin (" + filepath.Base(from) + ")", Namespace: auth.DefaultNamespace,
		Role: auth.RoleAdmin, Enabled: true, CreatedAt: time.Now().UnixNano(), RateRead: -1, RateWrite: -1}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := host.ProposeKeys(pctx, auth.Cmd{Op: "put", Key: &k}); err != nil {
		return fmt.Errorf("register the admin key: %w", err)
	}
	if got, ok := host.Keys().Key(id); !ok || got.Hash != hash {
		return fmt.Errorf("register the admin key: the cluster did not take it")
	}
	return nil
}
