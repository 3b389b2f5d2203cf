package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	corvo "github.com/corvohq/corvo/sdk/go"
)

func newSearchCmd() *cobra.Command {
	var c clientFlags
	var states, tags []string
	var limit int
	var body corvo.SearchRequest
	var priority string
	strFlags := []struct {
		flag string
		v    *string
		help string
	}{
		{"queue", &body.Queue, "exact queue"}, {"priority", &priority, "critical, high or normal"},
		{"payload-contains", &body.PayloadContains, "substring of the payload JSON"}, {"payload-jq", &body.PayloadJQ, "jq-style filter, e.g. '.amount > 100'"},
		{"created-after", &body.CreatedAfter, "RFC 3339 time or a date (2026-02-10: its midnight UTC)"}, {"created-before", &body.CreatedBefore, "RFC 3339 time or a date"},
		{"scheduled-after", &body.ScheduledAfter, "RFC 3339 time or a date"}, {"scheduled-before", &body.ScheduledBefore, "RFC 3339 time or a date"},
		{"started-after", &body.StartedAfter, "RFC 3339 time or a date"}, {"started-before", &body.StartedBefore, "RFC 3339 time or a date"},
		{"completed-after", &body.CompletedAfter, "RFC 3339 time or a date"}, {"completed-before", &body.CompletedBefore, "RFC 3339 time or a date"},
		{"expire-after", &body.ExpireAfter, "RFC 3339 time or a date"}, {"expire-before", &body.ExpireBefore, "RFC 3339 time or a date"},
		{"worker-id", &body.WorkerID, "processed by this worker"}, {"error-contains", &body.ErrorContains, "substring of any attempt's error"},
		{"batch-id", &body.BatchID, ""}, {"depends-on", &body.DependsOn, "jobs waiting on this job ID (its children)"}, {"model", &body.Model, "jobs with a usage report of this model"}, {"unique-key", &body.UniqueKey, ""}, {"job-id-prefix", &body.JobIDPrefix, ""},
		{"sort", &body.Sort, "created_at, scheduled_at, started_at, completed_at, priority, attempt"}, {"order", &body.Order, "asc or desc"},
	}
	var hasErrors string
	var attemptMin, attemptMax int
	var minCost float64
	cmd := &cobra.Command{
		Use:   "search",
		Short: "Search jobs (every filter of the API); --output json prints a JSON array to pipe into 'corvo bulk'",
		Example: `  corvo search --queue emails.send --state dead --error-contains SMTP
  corvo search --payload-jq '.amount > 100' --output json | corvo bulk retry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			if priority != "" {
				p := corvo.Priority(priority)
				body.Priority = &p
			}
			// A date alone (the spec's own example) means its midnight, UTC.
			for _, f := range strFlags {
				if strings.HasSuffix(f.flag, "-after") || strings.HasSuffix(f.flag, "-before") {
					if d, err := time.Parse(time.DateOnly, *f.v); err == nil {
						*f.v = d.Format(time.RFC3339)
					}
				}
			}
			body.State = states
			if len(tags) > 0 {
				tm := map[string]string{}
				for _, t := range tags {
					k, v, ok := strings.Cut(t, "=")
					if !ok {
						return &exitError{exitUsage, fmt.Errorf("--tag wants key=value, got %q", t)}
					}
					tm[k] = v
				}
				body.Tags = tm
			}
			switch hasErrors {
			case "":
			case "true", "false":
				has := hasErrors == "true"
				body.HasErrors = &has
			default:
				return &exitError{exitUsage, fmt.Errorf("--has-errors is true or false")}
			}
			if cmd.Flags().Changed("attempt-min") {
				body.AttemptMin = &attemptMin
			}
			if cmd.Flags().Changed("attempt-max") {
				body.AttemptMax = &attemptMax
			}
			if cmd.Flags().Changed("min-cost") {
				body.MinCostUSD = &minCost
			}
			// Page through the matches up to --limit; into a pipe (the
			// input of 'corvo bulk'), every match unless --limit says
			// otherwise, so that a bulk action never stops short unseen.
			w := cmd.OutOrStdout()
			if limit < 0 {
				return &exitError{exitUsage, fmt.Errorf("--limit is 0 (every match) or more, got %d", limit)}
			}
			if limit == 0 || (!cmd.Flags().Changed("limit") && !isTerminal(w)) {
				limit = math.MaxInt
			}
			var hits []corvo.SearchHit
			var total int64
			shown := 0
			asJSON := c.output == "json"
			if asJSON {
				// Written page by page: a pipe of a million jobs never
				// sits whole in memory.
				if _, err := io.WriteString(w, "["); err != nil {
					return err
				}
			}
			for shown < limit {
				body.Limit = min(1000, limit-shown)
				raw, _ := json.Marshal(body)
				out, _, err := c.call("POST", "/api/v1/jobs/search", raw)
				if err != nil {
					return err
				}
				var page corvo.SearchPage
				if err := json.Unmarshal(out, &page); err != nil {
					return &exitError{exitError_, err}
				}
				if asJSON {
					var sent struct{ Jobs []json.RawMessage } // the jobs as sent
					if err := json.Unmarshal(out, &sent); err != nil {
						return &exitError{exitError_, err}
					}
					for _, j := range sent.Jobs {
						if shown > 0 {
							if _, err := io.WriteString(w, ","); err != nil {
								return err
							}
						}
						if _, err := w.Write(j); err != nil {
							return err
						}
						shown++
					}
				} else {
					hits = append(hits, page.Jobs...)
					shown += len(page.Jobs)
				}
				total = page.Total
				if !page.HasMore || page.Cursor == nil {
					break
				}
				body.Cursor = page.Cursor
			}
			if int64(shown) < total {
				fmt.Fprintf(cmd.ErrOrStderr(), "corvo: %d shown of %d matching (--limit %d; --limit 0 lists every one)\n", shown, total, limit)
			}
			if asJSON {
				_, err := io.WriteString(w, "]\n")
				return err
			}
			return renderJobs(w, hits, total)
		},
	}
	c.register(cmd)
	fl := cmd.Flags()
	for _, f := range strFlags {
		fl.StringVar(f.v, f.flag, "", f.help)
	}
	fl.StringSliceVar(&states, "state", nil, "states (repeat or comma-separate)")
	fl.StringArrayVar(&tags, "tag", nil, "tag key=value (repeatable; all must match)")
	fl.StringVar(&hasErrors, "has-errors", "", "true or false")
	fl.IntVar(&attemptMin, "attempt-min", 0, "at least this many attempts")
	fl.IntVar(&attemptMax, "attempt-max", 0, "at most this many attempts")
	fl.Float64Var(&minCost, "min-cost", 0, "jobs whose usage reports add up to at least this cost (USD)")
	fl.IntVar(&limit, "limit", 1000, "the most jobs to list; 0: every match (the default when the output is not a terminal, e.g. piped into 'corvo bulk')")
	return cmd
}

func renderJobs(w io.Writer, jobs []corvo.SearchHit, total int64) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tQUEUE\tSTATE\tPRIORITY\tATTEMPT\tCREATED\tLAST ERROR")
	for _, j := range jobs {
		e := ""
		if j.LastError != nil {
			e = *j.LastError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.ID, j.Queue, j.State, j.Priority, j.Attempt, stamp(j.CreatedAt), e)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d shown of %d matching\n", len(jobs), total)
	return err
}

// readIDs reads job IDs from stdin: a JSON array or JSON lines of jobs
// (from 'corvo search -o json'), or IDs separated by white space.
func readIDs(r io.Reader) ([]string, error) {
	data, err := io.ReadAll(bufio.NewReader(r))
	if err != nil {
		return nil, err
	}
	text := strings.TrimSpace(string(data))
	var ids []string
	addJob := func(raw json.RawMessage) error {
		var j struct {
			ID    string `json:"id"`
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return err
		}
		if j.ID == "" {
			j.ID = j.JobID
		}
		if j.ID == "" {
			return fmt.Errorf("a JSON job without id")
		}
		ids = append(ids, j.ID)
		return nil
	}
	switch {
	case text == "":
	case strings.HasPrefix(text, "["):
		var arr []json.RawMessage
		if err := json.Unmarshal([]byte(text), &arr); err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		for _, j := range arr {
			if err := addJob(j); err != nil {
				return nil, err
			}
		}
	case strings.HasPrefix(text, "{"):
		dec := json.NewDecoder(strings.NewReader(text))
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, fmt.Errorf("stdin: %w", err)
			}
			if err := addJob(raw); err != nil {
				return nil, err
			}
		}
	default:
		// IDs separated by white space, or the table 'corvo search'
		// prints: each row's first column, the header and the count
		// line skipped.
		for n, line := range strings.Split(text, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 0:
			case corvo.ShardOfJobID(f[0]) >= 0:
				if allJobIDs(f) {
					ids = append(ids, f...)
				} else {
					ids = append(ids, f[0])
				}
			case n == 0 && f[0] == "JOB", len(f) >= 4 && f[1] == "shown" && f[2] == "of":
			default:
				return nil, fmt.Errorf("stdin line %d: %q is not a job ID (give IDs, 'corvo search' output, or 'corvo search -o json')", n+1, f[0])
			}
		}
	}
	return ids, nil
}

func allJobIDs(f []string) bool {
	for _, s := range f {
		if corvo.ShardOfJobID(s) < 0 {
			return false
		}
	}
	return true
}

// isTerminal reports whether w is a terminal (not a pipe or a file).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newBulkCmd() *cobra.Command {
	var c clientFlags
	var filter string
	var async, confirm bool
	cmd := &cobra.Command{
		Use:   "bulk <retry|delete|cancel|requeue|move <queue>|change-priority <priority>>",
		Short: "Apply an action to jobs read from stdin (IDs or 'corvo search -o json') or matched by --filter",
		Long: `Apply an action to many jobs. Up to 10,000 jobs are changed at once; larger
operations (or --async) run in the background on the server: the command then
follows their progress (a progress bar on a terminal, one line per step
otherwise) until they finish. 'corvo bulk status <id>', 'corvo bulk stop <id>'
and 'corvo bulk list' manage background operations.

Job IDs come from stdin: 'corvo search -o json' output, the table 'corvo
search' prints (its first column), or IDs separated by white space. Piped,
'corvo search' lists every match (not only its terminal default of 1,000).`,
		Example: `  corvo search --queue emails.send --state dead --output json | corvo bulk retry
  corvo search --queue old.queue --state pending -o json | corvo bulk move new.queue
  corvo search --state dead | corvo bulk retry
  corvo bulk retry --filter '{"queue":"emails.send","state":["dead"]}'
  corvo bulk cancel --filter '{"queue":"reports","state":["pending"]}'
  corvo bulk delete --filter '{"queue":"tmp"}' --confirm`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			action := strings.ReplaceAll(args[0], "-", "_")
			body := corvo.BulkRequest{Action: action, Async: async}
			switch action {
			case "retry", "delete", "cancel", "requeue", "move", "change_priority":
			default:
				return &exitError{exitUsage, fmt.Errorf("unknown action %q (retry, delete, cancel, requeue, move, change-priority; or status, stop <id>, list)", args[0])}
			}
			if action == "cancel" && len(args) == 2 && strings.HasPrefix(args[1], "bulk_") {
				return stopBulk(cmd, &c, args[1]) // the older spelling of 'bulk stop'
			}
			switch action {
			case "move", "change_priority":
				if len(args) != 2 {
					return &exitError{exitUsage, fmt.Errorf("%s needs its target", args[0])}
				}
				if action == "move" {
					body.MoveToQueue = args[1]
				} else {
					body.Priority = args[1]
				}
			default:
				if len(args) != 1 {
					return &exitError{exitUsage, fmt.Errorf("%s takes no argument", args[0])}
				}
			}
			if filter != "" {
				dec := json.NewDecoder(strings.NewReader(filter))
				dec.DisallowUnknownFields()
				var f corvo.SearchRequest
				if err := dec.Decode(&f); err != nil {
					return &exitError{exitUsage, fmt.Errorf("--filter is not a search filter: %w", err)}
				}
				body.Filter = &f
				body.Confirm = confirm
			} else {
				if confirm {
					return &exitError{exitUsage, errors.New("--confirm goes with --filter (job IDs from stdin need no confirmation)")}
				}
				ids, err := readIDs(cmd.InOrStdin())
				if err != nil {
					return &exitError{exitUsage, err}
				}
				if len(ids) == 0 {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), "no jobs on stdin: nothing to do")
					return err
				}
				body.JobIDs = ids
			}
			raw, _ := json.Marshal(body)
			if c.client == nil {
				// A bulk of up to 10,000 jobs (100,000 IDs from stdin) is
				// answered once done: under load that outlasts httpClient's
				// 60 s (5,000 moves did, in a make test under -race).
				c.client = &http.Client{Timeout: bulkTimeout, Transport: httpClient.Transport}
			}
			out, status, err := c.call("POST", "/api/v1/jobs/bulk", raw)
			if err != nil {
				return err
			}
			if status == http.StatusAccepted {
				var acc corvo.BulkAccepted
				if err := json.Unmarshal(out, &acc); err != nil {
					return &exitError{exitError_, err}
				}
				return followBulk(cmd, &c, acc.ID, acc.EstimatedTotal)
			}
			if c.output == "json" {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(out)))
				return err
			}
			var r corvo.BulkResult
			if err := json.Unmarshal(out, &r); err != nil {
				return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d jobs, %d errors, %d ms\n", action, r.Affected, r.Errors, r.DurationMs)
			if r.Errors > 0 {
				return &exitError{exitError_, fmt.Errorf("%d jobs were not changed (--output json lists them)", r.Errors)}
			}
			return nil
		},
	}
	c.register(cmd)
	cmd.Flags().StringVar(&filter, "filter", "", "a search filter (JSON) instead of stdin")
	cmd.Flags().BoolVar(&async, "async", false, "run in the background on the server whatever the size, and follow its progress")
	cmd.Flags().BoolVar(&confirm, "confirm", false, "with --filter: go ahead when the filter selects every job of a queue or of the cluster (refused otherwise, with the count)")
	cmd.AddCommand(newBulkStatusCmd(), newBulkStopCmd(), newBulkListCmd())
	return cmd
}
