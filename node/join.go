package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/corvohq/corvo/peer"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// The join bodies are the SDK's (the wire types have one Go definition).
type (
	joinRequestBody = corvo.JoinRequest
	joinAnswer      = corvo.JoinAnswer
)

// joinCluster asks a member (any of the comma-separated HTTP addresses) to
// add this node, retrying while the cluster is starting or unreachable,
// until ctx ends. A node only joins with an empty data dir.
//
// With TLS (tc not nil) an address without a scheme is https, the member
// is verified and this node's peer certificate presented with tc.
func joinCluster(ctx context.Context, targets string, body joinRequestBody, secret string, tc *tls.Config, log zerolog.Logger) (joinAnswer, error) {
	b, _ := json.Marshal(body)
	scheme := "http://"
	if tc != nil {
		scheme = "https://"
	}
	var addrs []string
	for _, a := range strings.Split(targets, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if !strings.Contains(a, "://") {
				a = scheme + a
			}
			addrs = append(addrs, strings.TrimRight(a, "/"))
		}
	}
	if len(addrs) == 0 {
		return joinAnswer{}, errors.New("--join needs a host:port")
	}
	client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	backoff := 200 * time.Millisecond
	deadline := time.Now().Add(5 * time.Minute)
	for attempt := 0; ; attempt++ {
		addr := addrs[attempt%len(addrs)]
		req, err := http.NewRequestWithContext(ctx, "POST", addr+"/api/v1/cluster/join", bytes.NewReader(b))
		if err != nil {
			return joinAnswer{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(peer.SecretHeader, secret)
		resp, err := client.Do(req)
		if err == nil {
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				var a joinAnswer
				if err := json.Unmarshal(out, &a); err != nil || a.NodeID == 0 || a.Shards == 0 {
					return joinAnswer{}, fmt.Errorf("join %s: bad answer %q", addr, out)
				}
				log.Info().Uint64("node_id", a.NodeID).Int("shards", a.Shards).Str("via", addr).Msg("joined the cluster")
				return a, nil
			}
			if resp.StatusCode < 500 {
				return joinAnswer{}, fmt.Errorf("join %s: HTTP %d: %s", addr, resp.StatusCode, bytes.TrimSpace(out))
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(out))
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return joinAnswer{}, fmt.Errorf("join the cluster via %s: %w", targets, err)
		}
		log.Info().Err(err).Str("via", addr).Msg("cannot join yet; retrying")
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return joinAnswer{}, ctx.Err()
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// discoverJoin decides, for a pod of a StatefulSet behind a headless
// service, whether to bootstrap (ordinal 0: returns "") or whom to join:
// the pod with ordinal 0 by its stable DNS name, then every other peer the
// service resolves to.
func discoverJoin(hostname, service, bind string, res interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}) (string, error) {
	i := strings.LastIndexByte(hostname, '-')
	if i < 0 {
		return "", fmt.Errorf("--discover=dns: host name %q has no -<ordinal> suffix (run it as a StatefulSet)", hostname)
	}
	ord, err := strconv.Atoi(hostname[i+1:])
	if err != nil || ord < 0 {
		return "", fmt.Errorf("--discover=dns: host name %q has no -<ordinal> suffix (run it as a StatefulSet)", hostname)
	}
	if ord == 0 {
		return "", nil
	}
	_, port, err := net.SplitHostPort(bind)
	if err != nil {
		return "", fmt.Errorf("--bind: %w", err)
	}
	targets := []string{net.JoinHostPort(hostname[:i]+"-0."+service, port)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ips, err := res.LookupHost(ctx, service); err == nil {
		for _, ip := range ips {
			targets = append(targets, net.JoinHostPort(ip, port))
		}
	}
	return strings.Join(targets, ","), nil
}
