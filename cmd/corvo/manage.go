package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// apiCommand builds a command that sends one request and prints the
// answer: the raw JSON with --output json, else render(answer).
func apiCommand(use, short string, args cobra.PositionalArgs, req func(cmd *cobra.Command, args []string) (method, path string, body any, err error),
	render func(w io.Writer, out []byte) error) *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			method, path, body, err := req(cmd, a)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			var raw []byte
			if body != nil {
				raw, _ = json.Marshal(body)
			}
			out, _, err := c.call(method, path, raw)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if c.output == "json" || render == nil {
				_, err = fmt.Fprintln(w, strings.TrimSpace(string(out)))
				return err
			}
			return render(w, out)
		},
	}
	c.register(cmd)
	return cmd
}

func jobPath(id, action string) string { return "/api/v1/jobs/" + url.PathEscape(id) + action }

func queuePath(q, action string) string { return "/api/v1/queues/" + url.PathEscape(q) + action }

// printStatus renders {"status": …}-like answers as "<id> <status>".
func printField(field string, prefix string) func(io.Writer, []byte) error {
	return func(w io.Writer, out []byte) error {
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			return &exitError{exitError_, err}
		}
		_, err := fmt.Fprintf(w, "%s%v\n", prefix, m[field])
		return err
	}
}

func newJobCmds() []*cobra.Command {
	one := cobra.ExactArgs(1)
	retry := apiCommand("retry <job-id>", "Retry a completed, dead or cancelled job", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/retry"), nil, nil
		},
		printField("status", ""))
	cancel := apiCommand("cancel <job-id>", "Cancel a job (an active one on its next heartbeat)", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/cancel"), nil, nil
		},
		printField("status", ""))
	del := apiCommand("delete <job-id>", "Delete a job", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", jobPath(a[0], ""), nil, nil
		},
		func(w io.Writer, _ []byte) error { _, err := fmt.Fprintln(w, "deleted"); return err })
	approve := apiCommand("approve <job-id>", "Release a held job", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/approve"), nil, nil
		},
		printField("status", ""))
	reject := apiCommand("reject <job-id>", "Reject a held job (it goes dead)", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/reject"), nil, nil
		},
		printField("status", ""))
	var reset bool
	move := apiCommand("move <job-id> <target-queue>", "Move a job to another queue", cobra.ExactArgs(2),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/move"), map[string]any{"queue": a[1], "reset_attempt": reset}, nil
		}, printField("job_id", ""))
	move.Flags().BoolVar(&reset, "reset-attempt", false, "reset the attempt counter")
	return []*cobra.Command{retry, cancel, del, approve, reject, move}
}

func newQueueCmds() []*cobra.Command {
	one := cobra.ExactArgs(1)
	queues := apiCommand("queues", "List queues with their counts", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) { return "GET", "/api/v1/queues", nil, nil },
		renderQueues)
	simple := func(action, short string) *cobra.Command {
		return apiCommand(action+" <queue>", short, one,
			func(_ *cobra.Command, a []string) (string, string, any, error) {
				return "POST", queuePath(a[0], "/"+action), nil, nil
			},
			func(w io.Writer, out []byte) error {
				_, err := fmt.Fprintln(w, strings.TrimSpace(string(out)))
				return err
			})
	}
	var confirm bool
	destroy := apiCommand("destroy <queue>", "Delete a queue and all its jobs (needs --confirm)", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			if !confirm {
				return "", "", nil, fmt.Errorf("destroying %s deletes all its jobs: add --confirm", a[0])
			}
			return "DELETE", queuePath(a[0], "?confirm=true"), nil, nil
		}, printField("jobs_deleted", "jobs deleted: "))
	destroy.Flags().BoolVar(&confirm, "confirm", false, "really delete the queue and its jobs")
	concurrency := apiCommand("concurrency <queue> <max>", "Cap a queue's active jobs (0: no cap, 1: singleton)", cobra.ExactArgs(2),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			n, err := strconv.Atoi(a[1])
			if err != nil {
				return "", "", nil, fmt.Errorf("max must be a number: %q", a[1])
			}
			return "POST", queuePath(a[0], "/concurrency"), map[string]int{"max": n}, nil
		}, nil)
	var remove bool
	throttle := apiCommand("throttle <queue> [<rate> <period>]", "Limit a queue to rate fetches per period (e.g. 100 1m), or --remove", cobra.RangeArgs(1, 3),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			if remove {
				return "DELETE", queuePath(a[0], "/throttle"), nil, nil
			}
			if len(a) != 3 {
				return "", "", nil, fmt.Errorf("give a rate and a period (e.g. 100 1m), or --remove")
			}
			n, err := strconv.Atoi(a[1])
			if err != nil {
				return "", "", nil, fmt.Errorf("rate must be a number: %q", a[1])
			}
			return "POST", queuePath(a[0], "/throttle"), map[string]any{"rate": n, "period": a[2]}, nil
		}, nil)
	throttle.Flags().BoolVar(&remove, "remove", false, "remove the throttle")
	return []*cobra.Command{queues, simple("pause", "Pause a queue (workers get no jobs)"), simple("resume", "Resume a paused queue"),
		simple("clear", "Delete every pending, scheduled and retrying job of a queue"), newDrainCmd(), destroy, concurrency, throttle}
}

// newDrainCmd pauses a queue and waits until its active jobs are done.
func newDrainCmd() *cobra.Command {
	var c clientFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "drain <queue>",
		Short: "Pause a queue and wait for its active jobs to finish",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			if _, _, err := c.call("POST", queuePath(a[0], "/drain"), nil); err != nil {
				return err
			}
			deadline := time.Now().Add(timeout)
			for {
				out, _, err := c.call("GET", "/api/v1/queues", nil)
				if err != nil {
					return err
				}
				var qs struct {
					Queues []struct {
						Name   string `json:"name"`
						Active int64  `json:"active"`
					} `json:"queues"`
				}
				_ = json.Unmarshal(out, &qs)
				active := int64(0)
				for _, q := range qs.Queues {
					if q.Name == a[0] {
						active = q.Active
					}
				}
				if active == 0 {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s drained (paused, no active jobs)\n", a[0])
					return err
				}
				if time.Now().After(deadline) {
					return &exitError{exitError_, fmt.Errorf("%s still has %d active jobs after %v (it stays paused)", a[0], active, timeout)}
				}
				time.Sleep(200 * time.Millisecond)
			}
		},
	}
	c.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for active jobs")
	return cmd
}

func renderQueues(w io.Writer, out []byte) error {
	var qs struct {
		Queues []struct {
			Name                                                  string
			Pending, Active, Scheduled, Retrying, Completed, Dead int64
			Paused                                                bool
		} `json:"queues"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return &exitError{exitError_, err}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tACTIVE\tSCHEDULED\tRETRYING\tCOMPLETED\tDEAD\tPAUSED")
	for _, q := range qs.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\n", q.Name, q.Pending, q.Active, q.Scheduled, q.Retrying, q.Completed, q.Dead, q.Paused)
	}
	return tw.Flush()
}

func newListCmds() []*cobra.Command {
	workers := apiCommand("workers", "List connected workers", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) { return "GET", "/api/v1/workers", nil, nil },
		func(w io.Writer, out []byte) error {
			var ws struct {
				Workers []struct {
					ID         string   `json:"id"`
					Hostname   *string  `json:"hostname"`
					Queues     []string `json:"queues"`
					ActiveJobs int      `json:"active_jobs"`
					LastSeen   string   `json:"last_seen"`
				} `json:"workers"`
			}
			if err := json.Unmarshal(out, &ws); err != nil {
				return &exitError{exitError_, err}
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tHOST\tQUEUES\tACTIVE\tLAST SEEN")
			for _, x := range ws.Workers {
				host := ""
				if x.Hostname != nil {
					host = *x.Hostname
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", x.ID, host, strings.Join(x.Queues, ","), x.ActiveJobs, x.LastSeen)
			}
			return tw.Flush()
		})
	var queue string
	var limit int
	dead := apiCommand("dead", "List dead jobs, newest first", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if queue != "" {
				q.Set("queue", queue)
			}
			return "GET", "/api/v1/dead?" + q.Encode(), nil, nil
		},
		func(w io.Writer, out []byte) error {
			var d struct {
				Jobs []struct {
					ID        string  `json:"id"`
					Queue     string  `json:"queue"`
					Attempt   int     `json:"attempt"`
					Completed string  `json:"completed_at"`
					LastError *string `json:"last_error"`
				} `json:"jobs"`
			}
			if err := json.Unmarshal(out, &d); err != nil {
				return &exitError{exitError_, err}
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tQUEUE\tATTEMPTS\tDIED\tLAST ERROR")
			for _, j := range d.Jobs {
				e := ""
				if j.LastError != nil {
					e = *j.LastError
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", j.ID, j.Queue, j.Attempt, j.Completed, e)
			}
			return tw.Flush()
		})
	dead.Flags().StringVar(&queue, "queue", "", "only this queue")
	dead.Flags().IntVar(&limit, "limit", 50, "how many")
	status := apiCommand("status", "Show server health", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) { return "GET", "/healthz", nil, nil },
		func(w io.Writer, out []byte) error {
			var h struct {
				Status    string `json:"status"`
				Shards    int    `json:"shards"`
				ShardsLed int    `json:"shards_led"`
			}
			if err := json.Unmarshal(out, &h); err != nil {
				return &exitError{exitError_, err}
			}
			_, err := fmt.Fprintf(w, "status: %s\nshards: %d (this node leads %d)\n", h.Status, h.Shards, h.ShardsLed)
			return err
		})
	return []*cobra.Command{workers, dead, status, newSchedulesCmd()}
}

func newSchedulesCmd() *cobra.Command {
	list := apiCommand("list", "List cron schedules", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/schedules", nil, nil
		},
		func(w io.Writer, out []byte) error {
			var s struct {
				Schedules []struct {
					ID, Name, Queue, Cron, Timezone string
					NextRun                         string `json:"next_run"`
				} `json:"schedules"`
			}
			if err := json.Unmarshal(out, &s); err != nil {
				return &exitError{exitError_, err}
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tQUEUE\tCRON\tTIMEZONE\tNEXT RUN")
			for _, x := range s.Schedules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Name, x.Queue, x.Cron, x.Timezone, x.NextRun)
			}
			return tw.Flush()
		})
	var tz, payload string
	create := apiCommand("create <name> <queue> <cron>", "Create a cron schedule (e.g. daily-report reports \"0 9 * * *\")", cobra.ExactArgs(3),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			body := map[string]any{"name": a[0], "queue": a[1], "cron": a[2], "timezone": tz}
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return "", "", nil, fmt.Errorf("--payload is not valid JSON")
				}
				body["payload"] = json.RawMessage(payload)
			}
			return "POST", "/api/v1/schedules", body, nil
		}, printField("id", ""))
	create.Flags().StringVar(&tz, "timezone", "UTC", "IANA time zone")
	create.Flags().StringVar(&payload, "payload", "", "job payload (JSON)")
	del := apiCommand("delete <schedule-id>", "Delete a cron schedule", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", "/api/v1/schedules/" + url.PathEscape(a[0]), nil, nil
		}, func(w io.Writer, _ []byte) error { _, err := fmt.Fprintln(w, "deleted"); return err })
	cmd := &cobra.Command{Use: "schedules", Short: "Cron schedules: list, create, delete", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return list.RunE(cmd, args) }}
	cmd.AddCommand(list, create, del)
	cmd.Flags().AddFlagSet(list.Flags())
	return cmd
}
