package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// corvo audit: GET /api/v1/audit, a page at a time, or --follow.
func newAuditCmd() *cobra.Command {
	var c clientFlags
	var f corvo.AuditFilter
	var since, until string
	var follow bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log: who changed what, newest first",
		Example: `  corvo audit
  corvo audit --namespace acme --method DELETE --since 2026-02-01T00:00:00Z
  corvo audit --status 403 -o json
  corvo audit --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			for _, t := range []struct {
				flag, v string
				to      *time.Time
			}{{"--since", since, &f.Since}, {"--until", until, &f.Until}} {
				if t.v == "" {
					continue
				}
				at, err := time.Parse(time.RFC3339Nano, t.v)
				if err != nil {
					return &exitError{exitUsage, fmt.Errorf("%s is not an RFC 3339 time: %q", t.flag, t.v)}
				}
				*t.to = at
			}
			if follow {
				if f.Cursor != "" || !f.Until.IsZero() {
					return &exitError{exitUsage, fmt.Errorf("--follow takes neither --cursor nor --until")}
				}
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				return c.followAudit(ctx, cmd.OutOrStdout(), f, interval)
			}
			page, raw, err := c.auditPage(f)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if c.output == "json" {
				_, err = fmt.Fprintln(w, strings.TrimSpace(string(raw)))
				return err
			}
			if err := printAudit(w, page.Records, true); err != nil {
				return err
			}
			if page.Cursor != nil {
				_, err = fmt.Fprintf(w, "more: --cursor %s\n", *page.Cursor)
			}
			return err
		},
	}
	c.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.Namespace, "namespace", "", "only this namespace (a non-admin key always reads its own)")
	fl.StringVar(&f.KeyID, "key-id", "", "only calls made with this key ID")
	fl.StringVar(&f.Method, "method", "", "only this HTTP method (POST, PUT, PATCH, DELETE)")
	fl.StringVar(&f.PathPrefix, "path-prefix", "", "only paths starting with this (e.g. /api/v1/queues/emails)")
	fl.IntVar(&f.Status, "status", 0, "only calls answered with this HTTP status")
	fl.StringVar(&since, "since", "", "only calls at or after this RFC 3339 time")
	fl.StringVar(&until, "until", "", "only calls before this RFC 3339 time")
	fl.IntVar(&f.Limit, "limit", 50, "records per page (1–1000)")
	fl.StringVar(&f.Cursor, "cursor", "", "go on from the cursor a previous page printed")
	fl.BoolVarP(&follow, "follow", "f", false, "print new records as they are written, oldest first, until interrupted")
	fl.DurationVar(&interval, "interval", time.Second, "with --follow: how often to look for new records")
	return cmd
}

// auditPage reads one page.
func (c *clientFlags) auditPage(f corvo.AuditFilter) (*corvo.AuditPage, []byte, error) {
	out, _, err := c.call("GET", "/api/v1/audit?"+f.Query().Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	var page corvo.AuditPage
	if err := json.Unmarshal(out, &page); err != nil {
		return nil, nil, &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
	}
	return &page, out, nil
}

// followAudit prints the records written from now on (or from --since),
// oldest first, polling every interval until ctx ends. Each poll reads
// every page at or after the newest time printed and skips what it has
// printed (records answered "at" are millisecond-rounded, so the newest
// millisecond is read again).
func (c *clientFlags) followAudit(ctx context.Context, w io.Writer, f corvo.AuditFilter, interval time.Duration) error {
	f.Cursor, f.Limit = "", 1000
	start := f.Since.IsZero()
	if start {
		f.Since = time.Now()
	}
	seen := map[string]bool{}
	header := c.output != "json"
	for {
		var fresh []corvo.AuditRecord
		g := f
		for {
			page, _, err := c.auditPage(g)
			if err != nil {
				return err
			}
			for _, r := range page.Records {
				if !seen[r.ID] {
					fresh = append(fresh, r)
				}
			}
			if page.Cursor == nil {
				break
			}
			g.Cursor = *page.Cursor
		}
		slices.Reverse(fresh)
		if len(fresh) > 0 {
			last := fresh[len(fresh)-1].At
			if last.After(f.Since) {
				f.Since, seen = last, map[string]bool{}
			}
			for _, r := range fresh {
				if !r.At.Before(f.Since) {
					seen[r.ID] = true
				}
			}
			if c.output == "json" {
				for _, r := range fresh {
					b, _ := json.Marshal(r)
					if _, err := fmt.Fprintln(w, string(b)); err != nil {
						return err
					}
				}
			} else if err := printAudit(w, fresh, header); err != nil {
				return err
			}
			header = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func printAudit(w io.Writer, rs []corvo.AuditRecord, header bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "AT\tSTATUS\tMETHOD\tPATH\tKEY\tROLE\tNAMESPACE\tREMOTE\tSUMMARY")
	}
	for _, r := range rs {
		who := r.KeyName
		if r.KeyID != "" {
			who += " (" + r.KeyID + ")"
		}
		if who == "" {
			who = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(r.At), r.Status, r.Method, r.Path, strings.TrimSpace(who),
			auditCell(r.Role), r.Namespace, r.Remote, r.Summary)
	}
	return tw.Flush()
}

func auditCell(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
