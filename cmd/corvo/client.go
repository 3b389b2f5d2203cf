package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/node"
	corvo "github.com/corvohq/corvo/sdk/go"
)

// clientFlags are shared by every command that talks to a server.
type clientFlags struct {
	url    string
	output string
	// clusterSecret, when set, is sent as the cluster credential (the
	// node-to-node routes an operator may call: node removal).
	clusterSecret string
	// client, when set, replaces httpClient (cluster remove with a node
	// certificate).
	client *http.Client
}

func (c *clientFlags) register(cmd *cobra.Command) {
	def := os.Getenv("CORVO_URL")
	if def == "" {
		def = "http://localhost:8080"
	}
	cmd.Flags().StringVar(&c.url, "url", def, "server URL (env CORVO_URL)")
	cmd.Flags().StringVarP(&c.output, "output", "o", "table", "output format: table or json")
}

func (c *clientFlags) validate() error {
	if c.output != "table" && c.output != "json" {
		return &exitError{exitUsage, fmt.Errorf("--output must be table or json, not %q", c.output)}
	}
	return nil
}

var httpClient = &http.Client{Timeout: 60 * time.Second}

// apiKeyFlag is the root's persistent --api-key; every client command sends
// it (apiKey).
var apiKeyFlag string

// apiKey is the key client commands send: --api-key, else $CORVO_API_KEY
// ("" sends none). The flag's default is not the environment's value, so
// that --help never prints a key.
func apiKey() string {
	if apiKeyFlag != "" {
		return strings.TrimSpace(apiKeyFlag)
	}
	return strings.TrimSpace(os.Getenv(corvo.APIKeyEnv))
}

// namespaceFlag is the root's persistent --namespace.
var namespaceFlag string

// namespace is the namespace client commands act in: --namespace, else
// $CORVO_NAMESPACE ("": the key's own).
func namespace() string {
	if namespaceFlag != "" {
		return strings.TrimSpace(namespaceFlag)
	}
	return strings.TrimSpace(os.Getenv(corvo.NamespaceEnv))
}

// authorize adds the caller's credentials to req: the API key, the
// namespace, and the cluster secret when the command needs it.
func (c *clientFlags) authorize(req *http.Request) {
	if k := apiKey(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	if ns := namespace(); ns != "" {
		req.Header.Set(corvo.NamespaceHeader, ns)
	}
	if c.clusterSecret != "" {
		req.Header.Set(node.ClusterSecretHeader, c.clusterSecret)
	}
}

// authHint says what to do about a 401: which key to send and where a
// server keeps the admin key it made.
func authHint() string {
	if apiKey() == "" {
		return "this server needs an API key: pass --api-key or set " + corvo.APIKeyEnv +
			" (a server that made its own admin key wrote it to <data-dir>/" + node.AdminKeyFile + ")"
	}
	return "the API key sent (--api-key or " + corvo.APIKeyEnv + ") was refused: check it is the whole key and not revoked, disabled or expired" +
		" (a server that made its own admin key wrote it to <data-dir>/" + node.AdminKeyFile + ")"
}

// clientTLS is the TLS configuration --tls-ca gave (nil: the system's
// roots); corvo top and corvo bench build their clients with it.
var clientTLS *tls.Config

// trustCA makes the CLI's HTTP clients trust only the CA certificates in
// file for https:// servers (--tls-ca).
func trustCA(file string) error {
	tc, err := corvo.TLSConfigFromCA(file)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("--tls-ca: %w", err)}
	}
	clientTLS = tc
	for _, h := range []*http.Client{httpClient, streamClient} {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		h.Transport = t
	}
	return nil
}

// call sends a request and returns the body of a 2xx answer; other answers
// become exit errors carrying the server's message.
func (c *clientFlags) call(method, path string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequest(method, strings.TrimRight(c.url, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, 0, &exitError{exitUsage, err}
	}
	if body != nil || method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json") // the server wants it even without a body
	}
	c.authorize(req)
	hc := httpClient
	if c.client != nil {
		hc = c.client
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, &exitError{exitError_, fmt.Errorf("cannot reach %s: %w", c.url, err)}
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, &exitError{exitError_, err}
	}
	if resp.StatusCode >= 300 {
		var e corvo.ErrorBody
		msg := strings.TrimSpace(string(out))
		if json.Unmarshal(out, &e) == nil && e.Error != "" {
			msg = e.Error + " (" + e.Code + ")"
		}
		code := exitError_
		switch {
		case resp.StatusCode == http.StatusNotFound:
			code = exitNotFound
		case e.Code == corvo.CodePeerCertificateRequired:
			msg += "\n" + peerCertHint
		case resp.StatusCode == http.StatusUnauthorized && e.Code != corvo.CodeClusterSecretRequired:
			msg += "\n" + authHint()
		}
		return out, resp.StatusCode, &exitError{code, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, msg)}
	}
	return out, resp.StatusCode, nil
}

func newEnqueueCmd() *cobra.Command {
	var c clientFlags
	var priority, scheduledAt string
	var maxRetries int
	var tags, dependsOn []string
	var uniquePeriod, leaseDuration time.Duration
	var req corvo.EnqueueRequest
	cmd := &cobra.Command{
		Use:   "enqueue <queue> <json-payload>",
		Short: "Enqueue a job (every option of POST /api/v1/enqueue but chains)",
		Example: `  corvo enqueue emails.send '{"to":"user@example.com"}'
  corvo enqueue reports '{"day":"2026-02-11"}' --priority high
  corvo enqueue invoices '{"id":42}' --unique-key invoice-42 --unique-period 1h --tag tenant=acme
  corvo enqueue emails.send '{"to":"x"}' --retry-backoff exponential --retry-base-delay 10s --expire-after 1h
  corvo enqueue notify '{}' --depends-on job_0_01KH…,job_1_01KH…`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			if !json.Valid([]byte(args[1])) {
				return &exitError{exitUsage, fmt.Errorf("payload is not valid JSON: %s", args[1])}
			}
			req.Queue, req.Payload, req.Priority = args[0], json.RawMessage(args[1]), priority
			if cmd.Flags().Changed("max-retries") {
				req.MaxRetries = &maxRetries
			}
			if scheduledAt != "" {
				at, err := time.Parse(time.RFC3339Nano, scheduledAt)
				if err != nil {
					return &exitError{exitUsage, fmt.Errorf("--scheduled-at is not an RFC 3339 time: %q", scheduledAt)}
				}
				req.ScheduledAt = &at
			}
			if len(tags) > 0 {
				req.Tags = map[string]string{}
				for _, t := range tags {
					k, v, ok := strings.Cut(t, "=")
					if !ok || k == "" {
						return &exitError{exitUsage, fmt.Errorf("--tag wants key=value, got %q", t)}
					}
					req.Tags[k] = v
				}
			}
			for flag, d := range map[string]time.Duration{"unique-period": uniquePeriod, "lease-duration": leaseDuration} {
				if d < 0 || d%time.Second != 0 {
					return &exitError{exitUsage, fmt.Errorf("--%s is a whole number of seconds (e.g. 90s, 1h), got %s", flag, d)}
				}
			}
			req.UniquePeriod, req.LeaseDuration = int(uniquePeriod/time.Second), int(leaseDuration/time.Second)
			req.DependsOn = dependsOn
			body, _ := json.Marshal(req)
			out, _, err := c.call("POST", "/api/v1/enqueue", body)
			if err != nil {
				return err
			}
			if c.output == "json" {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return err
			}
			var r corvo.Enqueued
			if err := json.Unmarshal(out, &r); err != nil {
				return &exitError{exitError_, err}
			}
			if r.UniqueExisting {
				r.Status += " (an existing job holds the unique key)"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", r.JobID, r.Status)
			return err
		},
	}
	c.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&priority, "priority", "", "critical, high or normal")
	fl.IntVar(&maxRetries, "max-retries", 3, "attempts before the job is dead")
	fl.StringVar(&scheduledAt, "scheduled-at", "", "RFC 3339 time to run at")
	fl.StringArrayVar(&tags, "tag", nil, "tag key=value (repeatable)")
	fl.StringVar(&req.UniqueKey, "unique-key", "", "refuse a second job with this key while it is taken")
	fl.DurationVar(&uniquePeriod, "unique-period", 0, "how long the unique key stays taken (default: until the job finishes)")
	fl.StringVar(&req.ExpireAfter, "expire-after", "", "never hand the job out after created_at + this (e.g. 1h); it goes dead (expired)")
	fl.DurationVar(&leaseDuration, "lease-duration", 0, "how long a fetched job is leased before it is reclaimed (server default 60s)")
	fl.StringVar(&req.RetryBackoff, "retry-backoff", "", "none, fixed, linear or exponential (server default exponential)")
	fl.StringVar(&req.RetryBaseDelay, "retry-base-delay", "", "first retry's delay, e.g. 5s")
	fl.StringVar(&req.RetryMaxDelay, "retry-max-delay", "", "longest retry delay, e.g. 10m")
	fl.StringSliceVar(&dependsOn, "depends-on", nil, "job IDs that must complete first (repeat or comma-separate); the job is held until then")
	return cmd
}

func newInspectCmd() *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   "inspect <job-id>",
		Short: "Show a job in full",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			out, _, err := c.call("GET", "/api/v1/jobs/"+args[0], nil)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if c.output == "json" {
				_, err = fmt.Fprintln(w, string(out))
				return err
			}
			return printJob(w, out)
		},
	}
	c.register(cmd)
	return cmd
}

// printJob renders a job document as aligned "field  value" lines, with
// the errors of each attempt at the end.
func printJob(w io.Writer, doc []byte) error {
	var job map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&job); err != nil {
		return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
	}
	fields := []string{"id", "queue", "state", "priority", "attempt", "max_retries", "attempts_remaining", "retry_backoff",
		"created_at", "scheduled_at", "started_at", "completed_at", "lease_expires_at", "expire_at", "reason", "worker",
		"tags", "payload", "progress", "checkpoint", "result"}
	for _, f := range fields {
		v, ok := job[f]
		if !ok || string(v) == "null" {
			continue
		}
		s := string(v)
		var str string
		if json.Unmarshal(v, &str) == nil {
			s = str
		}
		if _, err := fmt.Fprintf(w, "%-20s %s\n", f, s); err != nil {
			return err
		}
	}
	var errs []corvo.JobError
	_ = json.Unmarshal(job["errors"], &errs)
	for _, e := range errs {
		if _, err := fmt.Fprintf(w, "%-20s #%d %s %s\n", "error", e.Attempt, stamp(e.At), e.Error); err != nil {
			return err
		}
	}
	return nil
}
