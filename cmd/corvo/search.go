package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newSearchCmd() *cobra.Command {
	var c clientFlags
	var states, tags []string
	var limit int
	str := map[string]*string{}
	strFlags := []struct{ flag, field, help string }{
		{"queue", "queue", "exact queue"}, {"priority", "priority", "critical, high or normal"},
		{"payload-contains", "payload_contains", "substring of the payload JSON"}, {"payload-jq", "payload_jq", "jq-style filter, e.g. '.amount > 100'"},
		{"created-after", "created_after", "RFC 3339"}, {"created-before", "created_before", "RFC 3339"},
		{"scheduled-after", "scheduled_after", "RFC 3339"}, {"scheduled-before", "scheduled_before", "RFC 3339"},
		{"started-after", "started_after", "RFC 3339"}, {"started-before", "started_before", "RFC 3339"},
		{"completed-after", "completed_after", "RFC 3339"}, {"completed-before", "completed_before", "RFC 3339"},
		{"expire-after", "expire_after", "RFC 3339"}, {"expire-before", "expire_before", "RFC 3339"},
		{"worker-id", "worker_id", "processed by this worker"}, {"error-contains", "error_contains", "substring of any attempt's error"},
		{"batch-id", "batch_id", ""}, {"unique-key", "unique_key", ""}, {"job-id-prefix", "job_id_prefix", ""},
		{"sort", "sort", "created_at, scheduled_at, started_at, completed_at, priority, attempt"}, {"order", "order", "asc or desc"},
	}
	var hasErrors string
	var attemptMin, attemptMax int
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
			body := map[string]any{}
			for _, f := range strFlags {
				if v := *str[f.field]; v != "" {
					body[f.field] = v
				}
			}
			if len(states) > 0 {
				body["state"] = states
			}
			if len(tags) > 0 {
				tm := map[string]string{}
				for _, t := range tags {
					k, v, ok := strings.Cut(t, "=")
					if !ok {
						return &exitError{exitUsage, fmt.Errorf("--tag wants key=value, got %q", t)}
					}
					tm[k] = v
				}
				body["tags"] = tm
			}
			switch hasErrors {
			case "":
			case "true", "false":
				body["has_errors"] = hasErrors == "true"
			default:
				return &exitError{exitUsage, fmt.Errorf("--has-errors is true or false")}
			}
			if cmd.Flags().Changed("attempt-min") {
				body["attempt_min"] = attemptMin
			}
			if cmd.Flags().Changed("attempt-max") {
				body["attempt_max"] = attemptMax
			}
			// Page through the matches up to --limit.
			var jobs []json.RawMessage
			total := 0
			for len(jobs) < limit {
				body["limit"] = min(1000, limit-len(jobs))
				raw, _ := json.Marshal(body)
				out, _, err := c.call("POST", "/api/v1/jobs/search", raw)
				if err != nil {
					return err
				}
				var page struct {
					Jobs    []json.RawMessage `json:"jobs"`
					Total   int               `json:"total"`
					Cursor  *string           `json:"cursor"`
					HasMore bool              `json:"has_more"`
				}
				if err := json.Unmarshal(out, &page); err != nil {
					return &exitError{exitError_, err}
				}
				jobs, total = append(jobs, page.Jobs...), page.Total
				if !page.HasMore || page.Cursor == nil {
					break
				}
				body["cursor"] = *page.Cursor
			}
			w := cmd.OutOrStdout()
			if c.output == "json" {
				if jobs == nil {
					jobs = []json.RawMessage{}
				}
				b, _ := json.Marshal(jobs)
				_, err := fmt.Fprintln(w, string(b))
				return err
			}
			return renderJobs(w, jobs, total)
		},
	}
	c.register(cmd)
	fl := cmd.Flags()
	for _, f := range strFlags {
		v := new(string)
		str[f.field] = v
		fl.StringVar(v, f.flag, "", f.help)
	}
	fl.StringSliceVar(&states, "state", nil, "states (repeat or comma-separate)")
	fl.StringArrayVar(&tags, "tag", nil, "tag key=value (repeatable; all must match)")
	fl.StringVar(&hasErrors, "has-errors", "", "true or false")
	fl.IntVar(&attemptMin, "attempt-min", 0, "at least this many attempts")
	fl.IntVar(&attemptMax, "attempt-max", 0, "at most this many attempts")
	fl.IntVar(&limit, "limit", 1000, "the most jobs to list")
	return cmd
}

func renderJobs(w io.Writer, jobs []json.RawMessage, total int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tQUEUE\tSTATE\tPRIORITY\tATTEMPT\tCREATED\tLAST ERROR")
	for _, raw := range jobs {
		var j struct {
			ID, Queue, State, Priority string
			Attempt                    int
			CreatedAt                  string  `json:"created_at"`
			LastError                  *string `json:"last_error"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return &exitError{exitError_, err}
		}
		e := ""
		if j.LastError != nil {
			e = *j.LastError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.ID, j.Queue, j.State, j.Priority, j.Attempt, j.CreatedAt, e)
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
		ids = strings.Fields(text)
	}
	return ids, nil
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
otherwise) until they finish. 'corvo bulk status <id>', 'corvo bulk cancel <id>'
and 'corvo bulk list' manage background operations.`,
		Example: `  corvo search --queue emails.send --state dead --output json | corvo bulk retry
  corvo search --queue old.queue --state pending -o json | corvo bulk move new.queue
  corvo bulk retry --filter '{"queue":"emails.send","state":["dead"]}'
  corvo bulk delete --filter '{"queue":"tmp"}' --confirm`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			action := strings.ReplaceAll(args[0], "-", "_")
			body := map[string]any{"action": action}
			switch action {
			case "retry", "delete", "cancel", "requeue", "move", "change_priority":
			default:
				return &exitError{exitUsage, fmt.Errorf("unknown action %q (retry, delete, cancel, requeue, move, change-priority; or status, cancel <id>, list)", args[0])}
			}
			switch action {
			case "move", "change_priority":
				if len(args) != 2 {
					return &exitError{exitUsage, fmt.Errorf("%s needs its target", args[0])}
				}
				if action == "move" {
					body["move_to_queue"] = args[1]
				} else {
					body["priority"] = args[1]
				}
			default:
				if len(args) != 1 {
					return &exitError{exitUsage, fmt.Errorf("%s takes no argument", args[0])}
				}
			}
			if async {
				body["async"] = true
			}
			if filter != "" {
				var f map[string]any
				if err := json.Unmarshal([]byte(filter), &f); err != nil {
					return &exitError{exitUsage, fmt.Errorf("--filter is not a JSON object: %w", err)}
				}
				body["filter"] = f
				if confirm {
					body["confirm"] = true
				}
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
				body["job_ids"] = ids
			}
			raw, _ := json.Marshal(body)
			out, status, err := c.call("POST", "/api/v1/jobs/bulk", raw)
			if err != nil {
				return err
			}
			if status == http.StatusAccepted {
				var acc struct {
					ID    string `json:"bulk_operation_id"`
					Total int64  `json:"estimated_total"`
				}
				if err := json.Unmarshal(out, &acc); err != nil {
					return &exitError{exitError_, err}
				}
				return followBulk(cmd, &c, acc.ID, acc.Total)
			}
			if c.output == "json" {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(out)))
				return err
			}
			var r struct {
				Affected   int `json:"affected"`
				Errors     int `json:"errors"`
				DurationMs int `json:"duration_ms"`
			}
			_ = json.Unmarshal(out, &r)
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
	cmd.AddCommand(newBulkStatusCmd(), newBulkCancelCmd(), newBulkListCmd())
	return cmd
}
