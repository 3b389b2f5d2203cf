package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// streamClient follows progress streams, which outlive httpClient's timeout.
var streamClient = &http.Client{}

// bulkTimeout bounds a `corvo bulk` request, which the server answers only
// once a synchronous bulk is done.
const bulkTimeout = 10 * time.Minute

// followBulk follows a background operation to its end: a progress bar on
// a terminal (stderr), a line per step otherwise, the final record with
// --output json. A cancelled, failed or interrupted operation, or one with
// errors, exits non-zero.
func followBulk(cmd *cobra.Command, c *clientFlags, id string, total int64) error {
	out := cmd.OutOrStdout()
	var bar *progressbar.ProgressBar
	if f, ok := cmd.ErrOrStderr().(*os.File); ok && c.output != "json" && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(id),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("jobs"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	} else if c.output != "json" {
		fmt.Fprintf(out, "%s: running in the background (about %d jobs)\n", id, total)
	}
	var last int64 = -1
	show := func(op *corvo.BulkOperation) {
		switch {
		case bar != nil:
			if op.Total > 0 {
				bar.ChangeMax64(op.Total)
			}
			_ = bar.Set64(op.Processed)
		case c.output != "json" && op.Processed != last:
			fmt.Fprintf(out, "%s: %d/%d processed, %d affected, %d errors\n", id, op.Processed, op.Total, op.Affected, op.Errors)
		}
		last = op.Processed
	}
	final, raw, err := streamBulk(c, id, show)
	if err != nil {
		// The stream broke (a proxy, a restart): poll until it ends.
		final, raw, err = pollBulk(c, id, show)
		if err != nil {
			return err
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if c.output == "json" {
		fmt.Fprintln(out, strings.TrimSpace(string(raw)))
	} else {
		fmt.Fprintf(out, "%s: %s: %d jobs, %d errors, %d ms (%s)\n", final.Action, final.Status, final.Affected, final.Errors, final.DurationMs, id)
	}
	switch {
	case final.Status != "completed":
		msg := "bulk operation " + id + " " + final.Status
		if final.Error != "" {
			msg += ": " + final.Error
		}
		return &exitError{exitError_, fmt.Errorf("%s", msg)}
	case final.Errors > 0:
		return &exitError{exitError_, fmt.Errorf("%d jobs were not changed ('corvo bulk status %s -o json' lists the first ones)", final.Errors, id)}
	}
	return nil
}

// streamBulk reads GET /bulk/{id}/progress until its done frame.
func streamBulk(c *clientFlags, id string, show func(*corvo.BulkOperation)) (*corvo.BulkOperation, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, strings.TrimRight(c.url, "/")+"/api/v1/bulk/"+id+"/progress", nil)
	if err != nil {
		return nil, nil, err
	}
	c.authorize(req)
	resp, err := streamClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, nil, fmt.Errorf("progress stream: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data := []byte(line[len("data: "):])
			var op corvo.BulkOperation
			if err := json.Unmarshal(data, &op); err != nil {
				return nil, nil, err
			}
			show(&op)
			if event == "done" {
				return &op, data, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return nil, nil, fmt.Errorf("the progress stream ended early")
}

func pollBulk(c *clientFlags, id string, show func(*corvo.BulkOperation)) (*corvo.BulkOperation, []byte, error) {
	for {
		raw, _, err := c.call("GET", "/api/v1/bulk/"+id, nil)
		if err != nil {
			return nil, nil, err
		}
		var op corvo.BulkOperation
		if err := json.Unmarshal(raw, &op); err != nil {
			return nil, nil, &exitError{exitError_, err}
		}
		show(&op)
		if op.Status != "processing" {
			return &op, raw, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func printBulk(cmd *cobra.Command, c *clientFlags, raw []byte) error {
	if c.output == "json" {
		_, err := fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(raw)))
		return err
	}
	var op corvo.BulkOperation
	if err := json.Unmarshal(raw, &op); err != nil {
		return &exitError{exitError_, err}
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "id          %s\naction      %s\nstatus      %s\nprocessed   %d/%d\naffected    %d\nerrors      %d\ncreated_at  %s\nduration    %d ms\n",
		op.ID, op.Action, op.Status, op.Processed, op.Total, op.Affected, op.Errors, op.CreatedAt, op.DurationMs)
	if op.Error != "" {
		fmt.Fprintf(w, "error       %s\n", op.Error)
	}
	return nil
}

func newBulkStatusCmd() *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   "status <bulk-id>",
		Short: "Show a background bulk operation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			raw, _, err := c.call("GET", "/api/v1/bulk/"+args[0], nil)
			if err != nil {
				return err
			}
			return printBulk(cmd, &c, raw)
		},
	}
	c.register(cmd)
	return cmd
}

// newBulkStopCmd stops a background operation. ('bulk cancel' is the
// action that cancels jobs; 'bulk cancel <bulk-id>', the older spelling
// of this command, still stops the operation.)
func newBulkStopCmd() *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   "stop <bulk-id>",
		Short: "Stop a running background bulk operation before its next chunk",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			return stopBulk(cmd, &c, args[0])
		},
	}
	c.register(cmd)
	return cmd
}

func stopBulk(cmd *cobra.Command, c *clientFlags, id string) error {
	raw, _, err := c.call("DELETE", "/api/v1/bulk/"+id, nil)
	if err != nil {
		return err
	}
	return printBulk(cmd, c, raw)
}

func newBulkListCmd() *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List this server's recent background bulk operations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.validate(); err != nil {
				return err
			}
			raw, _, err := c.call("GET", "/api/v1/bulk", nil)
			if err != nil {
				return err
			}
			if c.output == "json" {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(raw)))
				return err
			}
			var r corvo.BulkOperationList
			if err := json.Unmarshal(raw, &r); err != nil {
				return &exitError{exitError_, err}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%-31s %-16s %-12s %10s %10s %7s\n", "ID", "ACTION", "STATUS", "PROCESSED", "AFFECTED", "ERRORS")
			for _, op := range r.Operations {
				fmt.Fprintf(w, "%-31s %-16s %-12s %10d %10d %7d\n", op.ID, op.Action, op.Status, op.Processed, op.Affected, op.Errors)
			}
			return nil
		},
	}
	c.register(cmd)
	return cmd
}
