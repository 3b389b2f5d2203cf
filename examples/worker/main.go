// Command worker is an example Corvo worker to copy: it processes the
// "emails.send" queue (or CORVO_QUEUES) with CORVO_CONCURRENCY handlers,
// reports progress, checkpoints long work, and drains on SIGTERM.
//
//	CORVO_URL=http://localhost:8080 go run ./examples/worker
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	corvo "github.com/corvohq/corvo/sdk/go"
)

type email struct {
	To       string `json:"to"`
	Template string `json:"template"`
	Fail     bool   `json:"fail"` // lets the demo show a failure
	// Steps makes a long job (a mailing in parts): one part every 50 ms,
	// a checkpoint after each, so a retried job goes on where it stopped.
	Steps int `json:"steps"`
}

// progressMark is a long job's checkpoint: the parts done so far.
type progressMark struct {
	Done int `json:"done"`
}

func main() {
	url := envOr("CORVO_URL", "http://localhost:8080")
	queues := strings.Split(envOr("CORVO_QUEUES", "emails.send"), ",")
	concurrency, _ := strconv.Atoi(envOr("CORVO_CONCURRENCY", "10"))
	grace, err := time.ParseDuration(envOr("CORVO_SHUTDOWN_GRACE", "25s"))
	if err != nil {
		log.Fatalf("CORVO_SHUTDOWN_GRACE: %v", err)
	}

	client := corvo.New(url)
	w := corvo.NewWorker(client, corvo.WorkerOptions{Concurrency: concurrency, ShutdownGrace: grace})
	for _, q := range queues {
		w.Register(q, sendEmail)
	}

	// SIGTERM (Kubernetes) or Ctrl-C: stop fetching, finish or hand back
	// running jobs, exit 0.
	ctx, stop := corvo.SignalContext(context.Background())
	defer stop()
	log.Printf("worker %s: processing %v on %s", w.ID(), queues, url)
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("worker %s: drained, bye", w.ID())
}

func sendEmail(ctx context.Context, job *corvo.JobContext) (any, error) {
	var e email
	if err := job.Decode(&e); err != nil {
		return nil, fmt.Errorf("bad payload: %w", err)
	}
	if e.Fail {
		return nil, errors.New("SMTP connection timeout")
	}
	if e.Steps > 0 {
		return sendInParts(ctx, job, e)
	}
	job.Progress(map[string]any{"current": 1, "total": 1, "message": "sending to " + e.To})
	select {
	case <-ctx.Done(): // cancelled from the UI/API, or the lease was lost
		return nil, ctx.Err()
	case <-time.After(10 * time.Millisecond): // the actual work
	}
	return map[string]any{"sent": true, "to": e.To}, nil
}

// sendInParts sends a long mailing part by part from its checkpoint: a
// drain that outlasts the grace period hands the job back with it.
func sendInParts(ctx context.Context, job *corvo.JobContext, e email) (any, error) {
	var mark progressMark
	if cp := job.FetchedJob.Checkpoint; len(cp) > 0 && string(cp) != "null" {
		if err := json.Unmarshal(cp, &mark); err != nil {
			return nil, fmt.Errorf("bad checkpoint: %w", err)
		}
	}
	resumedAt := mark.Done
	for mark.Done < e.Steps {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond): // one part
		}
		mark.Done++
		job.Progress(map[string]any{"current": mark.Done, "total": e.Steps})
		if err := job.Checkpoint(ctx, mark); err != nil {
			return nil, err
		}
	}
	return map[string]any{"sent": true, "to": e.To, "parts": e.Steps, "resumed_at": resumedAt}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
