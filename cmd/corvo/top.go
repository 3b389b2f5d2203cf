package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/top"
)

func newTopCmd() *cobra.Command {
	var c clientFlags
	var interval time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live dashboard: queues, rates, oldest pending job, workers",
		Long: `A live terminal dashboard of a Corvo server: every queue's pending, active,
scheduled, retrying, held and dead jobs, enqueue/complete/fail rates and the age of
its oldest pending job; every worker; and the totals. Keys: ↑/↓ or j/k select
a queue, p then y pauses it (p resumes a paused one), s cycles the sort, ? help,
q quits.

When stdout is not a terminal, or with --once or --output json, it prints one
snapshot and exits; its rates are then the server's (about the last minute).`,
		Example: `  corvo top
  corvo top --url http://10.0.0.5:8080 --interval 2s
  corvo top --once --output json | jq .totals`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			if interval < 100*time.Millisecond {
				return &exitError{exitUsage, fmt.Errorf("--interval must be at least 100ms, not %v", interval)}
			}
			url := strings.TrimRight(c.url, "/")
			client := top.NewClient(url)
			client.APIKey, client.Namespace = apiKey(), namespace()
			if clientTLS != nil { // --tls-ca
				client.HTTP.Transport = &http.Transport{TLSClientConfig: clientTLS}
			}
			out := cmd.OutOrStdout()
			f, isFile := out.(*os.File)
			interactive := isFile && isatty.IsTerminal(f.Fd()) && !once && c.output != "json"
			if !interactive {
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				defer cancel()
				snap, err := client.Snapshot(ctx)
				if err != nil {
					var se *top.StatusError
					if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
						err = fmt.Errorf("%w\n%s", err, authHint())
					}
					return &exitError{exitError_, fmt.Errorf("cannot read %s: %w", url, err)}
				}
				rep := top.NewReport(url, snap)
				if c.output == "json" {
					return rep.WriteJSON(out)
				}
				return rep.WriteTable(out)
			}
			_, err := tea.NewProgram(top.NewModel(client, url, interval)).Run()
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to refresh")
	cmd.Flags().BoolVar(&once, "once", false, "print one snapshot and exit")
	return cmd
}
