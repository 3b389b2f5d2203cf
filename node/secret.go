package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/peer"
)

// The cluster secret is the credential of node-to-node calls (see
// peer/auth.go). The founding node generates one at bootstrap;
// every node that joins is given the same one (--cluster-secret-file or
// CORVO_CLUSTER_SECRET) and keeps it in its data dir.

// ClusterSecretHeader carries the cluster secret on node-to-node calls.
const ClusterSecretHeader = peer.SecretHeader

// ClusterSecretFile is where a node keeps the cluster secret, mode 0600.
const ClusterSecretFile = "cluster-secret"

func clusterSecretPath(dataDir string) string { return filepath.Join(dataDir, ClusterSecretFile) }

// LoadClusterSecret returns this node's cluster secret: the one given
// (given, else the content of file), stored in the data dir so later starts
// need neither; else the one stored there; else, for a node that founds a
// cluster, a new random one. A node that joins, or has joined, a cluster
// never makes its own: it would not match its peers'.
func LoadClusterSecret(dataDir, file, given string, joining bool, log zerolog.Logger) (string, error) {
	from := "the given cluster secret"
	if given == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--cluster-secret-file: %w", err)
		}
		given, from = strings.TrimSpace(string(b)), file
	}
	given = strings.TrimSpace(given)
	path := clusterSecretPath(dataDir)
	stored, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the cluster secret: %w", err)
	}
	if given != "" {
		if err := checkSecret(given); err != nil {
			return "", fmt.Errorf("%s: %w", from, err)
		}
		if strings.TrimSpace(string(stored)) != given {
			if err := writeSecret(path, given); err != nil {
				return "", err
			}
		}
		return given, nil
	}
	if s := strings.TrimSpace(string(stored)); s != "" {
		if err := checkSecret(s); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
	if joining {
		return "", errors.New("a node that joins a cluster needs its cluster secret: pass --cluster-secret-file (the founding node wrote it to " +
			ClusterSecretFile + " in its data dir) or set CORVO_CLUSTER_SECRET")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	s := hex.EncodeToString(b)
	if err := writeSecret(path, s); err != nil {
		return "", err
	}
	log.Info().Str("file", path).Msg("generated the cluster secret: give this file to every node that joins (--cluster-secret-file)")
	return s, nil
}

func checkSecret(s string) error {
	if len(s) < peer.MinSecretLen {
		return fmt.Errorf("the cluster secret must be at least %d characters (e.g. openssl rand -hex 32)", peer.MinSecretLen)
	}
	for _, c := range s {
		if c <= ' ' || c > '~' {
			return errors.New("the cluster secret must be printable ASCII without spaces")
		}
	}
	return nil
}

func writeSecret(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the cluster secret: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the cluster secret: %w", err)
	}
	return nil
}
