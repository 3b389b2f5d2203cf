package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// newBackupCmd is `corvo backup`: a namespace's (or every namespace's)
// jobs, queue settings (provider links included), schedules, batches,
// budgets, providers, cache entries, daily usage totals and keys, to a
// file.
func newBackupCmd() *cobra.Command {
	var cf clientFlags
	var ns, out, keys string
	var all bool
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Write a consistent snapshot of a namespace (or the whole cluster) to a file (needs an admin key)",
		Long: `Streams GET /api/v1/backup to a file (-o, default stdout): jobs in
every state with their error history, usage records, scores and routing,
queue settings (with their provider links), schedules, batches, budgets
with their daily spend, providers, result cache entries, the queues' daily
usage totals, namespaces, roles and keys.
Each shard is read from one snapshot. A name
ending in .gz is gzip-compressed. --keys=full also saves each key's hash, so
that restored keys keep working; keep such a file as secret as the keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && ns != "" {
				return &exitError{exitUsage, fmt.Errorf("--all and --namespace exclude each other")}
			}
			if ns == "" {
				ns = "all"
			}
			q := url.Values{"namespace": {ns}, "keys": {keys}}
			req, err := http.NewRequest("GET", strings.TrimRight(cf.url, "/")+"/api/v1/backup?"+q.Encode(), nil)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			cf.authorize(req)
			resp, err := streamClient.Do(req)
			if err != nil {
				return &exitError{exitError_, fmt.Errorf("cannot reach %s: %w", cf.url, err)}
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				return &exitError{exitError_, fmt.Errorf("GET /api/v1/backup: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
			}
			var w io.Writer = cmd.OutOrStdout()
			var f *os.File
			if out != "" && out != "-" {
				if f, err = os.Create(out); err != nil {
					return &exitError{exitError_, err}
				}
				defer f.Close()
				w = f
			}
			var gz *gzip.Writer
			if strings.HasSuffix(out, ".gz") {
				gz = gzip.NewWriter(w)
				w = gz
			}
			n, err := io.Copy(w, resp.Body)
			if err == nil && gz != nil {
				err = gz.Close()
			}
			if err == nil && f != nil {
				err = f.Sync()
			}
			if err != nil {
				return &exitError{exitError_, fmt.Errorf("the backup stopped after %d bytes: %w", n, err)}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "backup of %s: %d bytes\n", ns, n)
			return nil
		},
	}
	cf.url = os.Getenv("CORVO_URL")
	if cf.url == "" {
		cf.url = "http://localhost:8080"
	}
	cmd.Flags().StringVar(&cf.url, "url", cf.url, "server URL (env CORVO_URL)")
	cmd.Flags().StringVar(&ns, "namespace", "", "back up this namespace only")
	cmd.Flags().BoolVar(&all, "all", false, "back up every namespace (the default)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write (default stdout; .gz: gzip)")
	cmd.Flags().StringVar(&keys, "keys", "metadata", "keys: metadata (no hashes: restored keys cannot authenticate) or full")
	return cmd
}

// newRestoreCmd is `corvo restore FILE`.
func newRestoreCmd() *cobra.Command {
	var cf clientFlags
	var into string
	cmd := &cobra.Command{
		Use:   "restore <file>",
		Short: "Load a backup into this cluster (needs an admin key)",
		Long: `Posts a backup (a name ending in .gz is gunzipped) to POST
/api/v1/restore. The server checks the whole file first (a truncated one is
refused and nothing changes), then restores what the cluster lacks:
records that exist are reported, not duplicated, so a restore may be run
again. Jobs the target routes to another shard get new IDs, and every
reference to them follows. --into puts a one-namespace backup's queues,
schedules and keys into another namespace. The file must fit the server's
request body limit (--max-body-bytes).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return &exitError{exitUsage, err}
			}
			defer f.Close()
			var r io.Reader = f
			if strings.HasSuffix(args[0], ".gz") {
				gz, err := gzip.NewReader(f)
				if err != nil {
					return &exitError{exitUsage, fmt.Errorf("%s: %w", args[0], err)}
				}
				r = gz
			}
			body, err := io.ReadAll(r)
			if err != nil {
				return &exitError{exitUsage, fmt.Errorf("%s: %w", args[0], err)}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "restoring %s (%d bytes)…\n", args[0], len(body))
			path := "/api/v1/restore"
			if into != "" {
				path += "?into=" + url.QueryEscape(into)
			}
			cf.client = streamClient
			out, status, err := cf.call("POST", path, body)
			if err != nil {
				return err
			}
			if cf.output == "json" {
				_, err := cmd.OutOrStdout().Write(append(out, '\n'))
				return err
			}
			var rep corvo.RestoreReport
			if err := json.Unmarshal(out, &rep); err != nil {
				return &exitError{exitError_, err}
			}
			w := cmd.OutOrStdout()
			for _, k := range []struct{ kind, label string }{{"namespace", "namespaces"}, {"role", "roles"}, {"key", "keys"},
				{"queue", "queues"}, {"schedule", "schedules"}, {"job", "jobs"}, {"batch", "batches"}, {"budget", "budgets"},
				{"cache", "cache"}, {"usage_day", "usage days"}, {"provider", "providers"}} {
				if n := rep.Restored[k.kind] + rep.Exists[k.kind] + rep.Expired[k.kind]; n > 0 {
					fmt.Fprintf(w, "%-10s %d restored, %d existed", k.label, rep.Restored[k.kind], rep.Exists[k.kind])
					if rep.Expired[k.kind] > 0 {
						fmt.Fprintf(w, ", %d expired (left out)", rep.Expired[k.kind])
					}
					fmt.Fprintln(w)
				}
			}
			fmt.Fprintf(w, "new ids    %d (source had %d shards)\n", rep.Remapped, rep.Shards)
			if rep.Failed > 0 {
				fmt.Fprintf(w, "failed     %d\n", rep.Failed)
				for _, e := range rep.Errors {
					fmt.Fprintf(w, "  %s\n", e)
				}
			}
			if status == 207 {
				return &exitError{exitError_, fmt.Errorf("%d records were not restored", rep.Failed)}
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&into, "into", "", "restore a one-namespace backup into this namespace")
	return cmd
}
