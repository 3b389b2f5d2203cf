package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/node"
	corvo "github.com/corvohq/corvo/sdk/go"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Cluster topology: status, remove a node"}
	status := apiCommand("status", "Nodes, leader and replicas of every shard, replication and mirror lag, proposal latency", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/cluster/status", nil, nil
		},
		printClusterStatus)
	cmd.AddCommand(status, newClusterRemoveCmd())
	return cmd
}

// peerCertHint says what a node-to-node route under mutual TLS wants.
const peerCertHint = "the cluster has mutual TLS between nodes: pass a node's certificate and key, issued by the peer CA, with --peer-tls-cert and --peer-tls-key (env CORVO_PEER_TLS_CERT, CORVO_PEER_TLS_KEY) and that CA with --peer-tls-ca (env CORVO_PEER_TLS_CA)"

// newClusterRemoveCmd is `corvo cluster remove NODE_ID`. Node removal is a
// node-to-node route: it needs the cluster secret, not a user key, and
// under mutual TLS between nodes a node certificate too. With one, the
// handshake offers the node-to-node ALPN (corvo.PeerALPN), so the server
// asks for it and answers with its own node certificate, which is
// verified against --peer-tls-ca (else --tls-ca).
func newClusterRemoveCmd() *cobra.Command {
	var c clientFlags
	var secretFile, peerCA, peerCert, peerKey string
	cmd := &cobra.Command{
		Use:   "remove NODE_ID",
		Short: "Take a node out of the cluster: its replicas move to other nodes, then it stops; its ID is never reused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			if _, err := strconv.ParseUint(args[0], 10, 64); err != nil {
				return &exitError{exitUsage, fmt.Errorf("node id must be a number, not %q", args[0])}
			}
			secret := strings.TrimSpace(os.Getenv("CORVO_CLUSTER_SECRET"))
			if secretFile != "" {
				b, err := os.ReadFile(secretFile)
				if err != nil {
					return &exitError{exitUsage, fmt.Errorf("--cluster-secret-file: %w", err)}
				}
				secret = strings.TrimSpace(string(b))
			}
			if secret == "" {
				return &exitError{exitUsage, errors.New("removing a node needs the cluster secret: --cluster-secret-file (a node's <data-dir>/" + node.ClusterSecretFile + ") or CORVO_CLUSTER_SECRET")}
			}
			c.clusterSecret = secret
			if (peerCert == "") != (peerKey == "") {
				return &exitError{exitUsage, errors.New("--peer-tls-cert and --peer-tls-key go together")}
			}
			if peerCert != "" {
				tc, err := corvo.PeerTLSConfig(peerCA, peerCert, peerKey)
				if err != nil {
					return &exitError{exitUsage, fmt.Errorf("--peer-tls-cert: %w", err)}
				}
				if peerCA == "" && clientTLS != nil {
					tc.RootCAs = clientTLS.RootCAs
				}
				t := http.DefaultTransport.(*http.Transport).Clone()
				t.TLSClientConfig = tc
				c.client = &http.Client{Timeout: httpClient.Timeout, Transport: t}
			}
			out, _, err := c.call("DELETE", "/api/v1/cluster/nodes/"+args[0], nil)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if c.output == "json" {
				_, err = fmt.Fprintln(w, strings.TrimSpace(string(out)))
				return err
			}
			_, err = fmt.Fprintf(w, "%s: removed from the cluster; stop its process\n", bytes.TrimSpace(out))
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().StringVar(&secretFile, "cluster-secret-file", "", "file holding the cluster secret (env CORVO_CLUSTER_SECRET)")
	cmd.Flags().StringVar(&peerCert, "peer-tls-cert", os.Getenv("CORVO_PEER_TLS_CERT"), "mutual TLS between nodes: a node's PEM certificate, issued by the peer CA (default $CORVO_PEER_TLS_CERT)")
	cmd.Flags().StringVar(&peerKey, "peer-tls-key", os.Getenv("CORVO_PEER_TLS_KEY"), "PEM private key of --peer-tls-cert (default $CORVO_PEER_TLS_KEY)")
	cmd.Flags().StringVar(&peerCA, "peer-tls-ca", os.Getenv("CORVO_PEER_TLS_CA"), "with --peer-tls-cert: PEM CA the node's certificate is verified against, the peer CA (default $CORVO_PEER_TLS_CA, else --tls-ca)")
	return cmd
}

func printClusterStatus(w io.Writer, out []byte) error {
	var st corvo.ClusterStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return &exitError{exitError_, fmt.Errorf("bad answer: %w", err)}
	}
	fmt.Fprintf(w, "answered by node %d · %d shards · %d replicas wanted\n\n", st.NodeID, st.ShardCount, st.Replicas)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAME\tSTATUS\tHTTP\tRAFT\tLEADS\tMIRROR LAG")
	for _, n := range st.Nodes {
		lag := "-"
		if n.MirrorLag != nil {
			lag = strconv.FormatInt(*n.MirrorLag, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n.NodeID, n.Name, n.Status, n.HTTPAddress, n.RaftAddress, joinIDs(n.LeaderOf), lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tLEADER\tTERM\tREPLICAS (node:applied/lag, *leader, ~learner)\tPROPOSE p50/p90/p99 ms")
	for _, g := range st.Shards {
		var reps []string
		for _, r := range g.Replicas {
			s := strconv.FormatUint(r.NodeID, 10)
			switch r.Role {
			case "leader":
				s += "*"
			case "learner":
				s += "~"
			}
			if r.Applied != nil {
				s += ":" + strconv.FormatUint(*r.Applied, 10)
			}
			if r.Lag != nil {
				s += "/" + strconv.FormatUint(*r.Lag, 10)
			}
			reps = append(reps, s)
		}
		lat := "-"
		if g.ProposalLatency != nil {
			lat = fmt.Sprintf("%.1f/%.1f/%.1f", g.ProposalLatency.P50, g.ProposalLatency.P90, g.ProposalLatency.P99)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", g.ShardID, g.LeaderNode, g.Term, strings.Join(reps, " "), lat)
	}
	return tw.Flush()
}

func joinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}
