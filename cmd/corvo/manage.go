package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corvohq/corvo/gateway"
	corvo "github.com/corvohq/corvo/sdk/go"
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

// render decodes an answer into its SDK type T and prints it with fn.
func render[T any](fn func(w io.Writer, v *T) error) func(io.Writer, []byte) error {
	return func(w io.Writer, out []byte) error {
		var v T
		if err := json.Unmarshal(out, &v); err != nil {
			return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
		}
		return fn(w, &v)
	}
}

// printStatus prints a {"status"} answer.
var printStatus = render(func(w io.Writer, v *corvo.StatusAnswer) error {
	_, err := fmt.Fprintln(w, v.Status)
	return err
})

func newJobCmds() []*cobra.Command {
	one := cobra.ExactArgs(1)
	retry := apiCommand("retry <job-id>", "Retry a completed, dead or cancelled job", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/retry"), nil, nil
		},
		printStatus)
	cancel := apiCommand("cancel <job-id>", "Cancel a job (an active one on its next heartbeat)", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/cancel"), nil, nil
		},
		printStatus)
	del := apiCommand("delete <job-id>", "Delete a job", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", jobPath(a[0], ""), nil, nil
		},
		func(w io.Writer, _ []byte) error { _, err := fmt.Fprintln(w, "deleted"); return err })
	approve := apiCommand("approve <job-id>", "Release a held job", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/approve"), nil, nil
		},
		printStatus)
	reject := apiCommand("reject <job-id>", "Reject a held job (it goes dead)", one,
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/reject"), nil, nil
		},
		printStatus)
	var reset bool
	move := apiCommand("move <job-id> <target-queue>", "Move a job to another queue", cobra.ExactArgs(2),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", jobPath(a[0], "/move"), corvo.MoveRequest{Queue: a[1], ResetAttempt: reset}, nil
		}, render(func(w io.Writer, v *corvo.Moved) error { _, err := fmt.Fprintln(w, v.JobID); return err }))
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
		}, render(func(w io.Writer, v *corvo.QueueDeleted) error {
			_, err := fmt.Fprintf(w, "jobs deleted: %d\n", v.JobsDeleted)
			return err
		}))
	destroy.Flags().BoolVar(&confirm, "confirm", false, "really delete the queue and its jobs")
	concurrency := apiCommand("concurrency <queue> <max>", "Cap a queue's active jobs (0: no cap, 1: singleton)", cobra.ExactArgs(2),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			n, err := strconv.Atoi(a[1])
			if err != nil {
				return "", "", nil, fmt.Errorf("max must be a number: %q", a[1])
			}
			return "POST", queuePath(a[0], "/concurrency"), corvo.ConcurrencyRequest{Max: n}, nil
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
			return "POST", queuePath(a[0], "/throttle"), corvo.Throttle{Rate: n, Period: a[2]}, nil
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
				var qs corvo.QueueList
				if err := json.Unmarshal(out, &qs); err != nil {
					return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
				}
				active := int64(0)
				for _, q := range qs.Queues {
					if q.Name == a[0] {
						active = q.Active
					}
				}
				if active == 0 {
					if c.output == "json" {
						b, _ := json.Marshal(map[string]any{"queue": a[0], "paused": true, "active": 0, "drained": true})
						_, err := fmt.Fprintln(cmd.OutOrStdout(), string(b))
						return err
					}
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

// newStatusCmd is the spec's "queue stats + cluster health": /healthz and
// every queue's counts, with their sums.
func newStatusCmd() *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Server health and every queue's counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			health, _, err := c.call("GET", "/healthz", nil)
			if err != nil {
				return err
			}
			queues, _, err := c.call("GET", "/api/v1/queues", nil)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if c.output == "json" {
				var qs struct {
					Queues json.RawMessage `json:"queues"`
				}
				if err := json.Unmarshal(queues, &qs); err != nil {
					return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
				}
				_, err := fmt.Fprintf(w, "{\"health\":%s,\"queues\":%s}\n", bytes.TrimSpace(health), qs.Queues)
				return err
			}
			var h corvo.Health
			var qs corvo.QueueList
			if err := json.Unmarshal(health, &h); err != nil {
				return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
			}
			if err := json.Unmarshal(queues, &qs); err != nil {
				return &exitError{exitError_, fmt.Errorf("unexpected response: %w", err)}
			}
			var sum corvo.Queue
			for _, q := range qs.Queues {
				sum.Pending += q.Pending
				sum.Active += q.Active
				sum.Scheduled += q.Scheduled
				sum.Retrying += q.Retrying
				sum.Held += q.Held
				sum.Dead += q.Dead
			}
			fmt.Fprintf(w, "status: %s\nshards: %d (this node leads %d)\n", h.Status, h.Shards, h.ShardsLed)
			fmt.Fprintf(w, "queues: %d — %d pending, %d active, %d scheduled, %d retrying, %d held, %d dead\n\n",
				len(qs.Queues), sum.Pending, sum.Active, sum.Scheduled, sum.Retrying, sum.Held, sum.Dead)
			return renderQueues(w, queues)
		},
	}
	c.register(cmd)
	return cmd
}

var renderQueues = render(func(w io.Writer, qs *corvo.QueueList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tACTIVE\tSCHEDULED\tRETRYING\tHELD\tCOMPLETED\tDEAD\tPAUSED\tWAIT P95\tRUN P95")
	for _, q := range qs.Queues {
		wait, run := latencyP95(q.Latency)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%s\t%s\n", q.Name, q.Pending, q.Active, q.Scheduled, q.Retrying, q.Held, q.Completed, q.Dead, q.Paused,
			wait, run)
	}
	return tw.Flush()
})

// latencyP95 renders a queue's p95 wait and run times over the server's
// window ("-" when there were none).
func latencyP95(l *corvo.QueueLatency) (wait, run string) {
	wait, run = "-", "-"
	if l == nil {
		return
	}
	if l.WaitMs != nil {
		wait = fmtMs(l.WaitMs.P95)
	}
	if l.RunMs != nil {
		run = fmtMs(l.RunMs.P95)
	}
	return
}

// fmtMs renders milliseconds with three significant digits: 850µs, 12.3ms,
// 2.02s, 3m5s.
func fmtMs(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return strconv.FormatFloat(ms, 'f', max(0, 2-int(math.Log10(ms))), 64) + "ms"
	case d < time.Minute:
		s := ms / 1e3
		return strconv.FormatFloat(s, 'f', max(0, 2-int(math.Log10(s))), 64) + "s"
	}
	return d.Round(time.Second).String()
}

// stamp renders a time as the server does.
func stamp(t time.Time) string { return t.UTC().Format(gateway.TimeFormat) }

// stampOr renders an optional time, "" when absent.
func stampOr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return stamp(*t)
}

func newListCmds() []*cobra.Command {
	workers := apiCommand("workers", "List connected workers", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) { return "GET", "/api/v1/workers", nil, nil },
		render(func(w io.Writer, ws *corvo.WorkerList) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tHOST\tQUEUES\tACTIVE\tLAST SEEN")
			for _, x := range ws.Workers {
				host := ""
				if x.Hostname != nil {
					host = *x.Hostname
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", x.ID, host, strings.Join(x.Queues, ","), x.ActiveJobs, stamp(x.LastSeen))
			}
			return tw.Flush()
		}))
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
		render(func(w io.Writer, d *corvo.DeadPage) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tQUEUE\tATTEMPTS\tDIED\tLAST ERROR")
			for _, j := range d.Jobs {
				e := ""
				if j.LastError != nil {
					e = *j.LastError
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", j.ID, j.Queue, j.Attempt, stampOr(j.CompletedAt), e)
			}
			return tw.Flush()
		}))
	dead.Flags().StringVar(&queue, "queue", "", "only this queue")
	dead.Flags().IntVar(&limit, "limit", 50, "how many")
	return []*cobra.Command{workers, dead, newStatusCmd(), newSchedulesCmd()}
}

func newSchedulesCmd() *cobra.Command {
	list := apiCommand("list", "List cron schedules", cobra.NoArgs,
		func(*cobra.Command, []string) (string, string, any, error) {
			return "GET", "/api/v1/schedules", nil, nil
		},
		render(func(w io.Writer, s *corvo.ScheduleList) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tQUEUE\tCRON\tTIMEZONE\tNEXT RUN")
			for _, x := range s.Schedules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Name, x.Queue, x.Cron, x.Timezone, stampOr(x.NextRun))
			}
			return tw.Flush()
		}))
	var tz, payload string
	create := apiCommand("create <name> <queue> <cron>", "Create a cron schedule (e.g. daily-report reports \"0 9 * * *\")", cobra.ExactArgs(3),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			body := corvo.Schedule{Name: a[0], Queue: a[1], Cron: a[2], Timezone: tz}
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return "", "", nil, fmt.Errorf("--payload is not valid JSON")
				}
				body.Payload = json.RawMessage(payload)
			}
			return "POST", "/api/v1/schedules", body, nil
		}, render(func(w io.Writer, v *corvo.Schedule) error { _, err := fmt.Fprintln(w, v.ID); return err }))
	create.Flags().StringVar(&tz, "timezone", "UTC", "IANA time zone")
	create.Flags().StringVar(&payload, "payload", "", "job payload (JSON)")
	del := apiCommand("delete <schedule-id>", "Delete a cron schedule", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "DELETE", "/api/v1/schedules/" + url.PathEscape(a[0]), nil, nil
		}, func(w io.Writer, _ []byte) error { _, err := fmt.Fprintln(w, "deleted"); return err })
	action := func(verb, short string) *cobra.Command {
		return apiCommand(verb+" <schedule-id>", short, cobra.ExactArgs(1),
			func(_ *cobra.Command, a []string) (string, string, any, error) {
				return "POST", "/api/v1/schedules/" + url.PathEscape(a[0]) + "/" + verb, nil, nil
			}, render(func(w io.Writer, v *corvo.Schedule) error {
				next := "paused"
				if !v.Paused {
					next = "next run " + stampOr(v.NextRun)
				}
				_, err := fmt.Fprintf(w, "%s: %s\n", v.ID, next)
				return err
			}))
	}
	run := apiCommand("run <schedule-id>", "Enqueue a run of a schedule now (paused or not)", cobra.ExactArgs(1),
		func(_ *cobra.Command, a []string) (string, string, any, error) {
			return "POST", "/api/v1/schedules/" + url.PathEscape(a[0]) + "/run", nil, nil
		}, render(func(w io.Writer, v *corvo.Enqueued) error {
			st := v.Status
			if v.UniqueExisting {
				st += " (a live job holds the schedule's unique key)"
			}
			_, err := fmt.Fprintf(w, "%s\t%s\n", v.JobID, st)
			return err
		}))
	cmd := &cobra.Command{Use: "schedules", Short: "Cron schedules: list, create, delete, pause, resume, run", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return list.RunE(cmd, args) }}
	cmd.AddCommand(list, create, del, action("pause", "Pause a schedule: it fires nothing until resumed"),
		action("resume", "Resume a paused schedule from its next run after now (missed runs are skipped)"), run)
	cmd.Flags().AddFlagSet(list.Flags())
	return cmd
}
