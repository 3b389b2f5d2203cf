// Command worker is an example Corvo worker to copy: it processes the
// "emails.send" queue (or CORVO_QUEUES) with CORVO_CONCURRENCY handlers,
// reports progress, checkpoints long work, and drains on SIGTERM.
//
//	CORVO_URL=http://localhost:8080 go run ./examples/worker
package main

import (
	"context"
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
}

func main() {
	url := envOr("CORVO_URL", "http://localhost:8080")
	queues := strings.Split(envOr("CORVO_QUEUES", "emails.send"), ",")
	concurrency, _ := strconv.Atoi(envOr("CORVO_CONCURRENCY", "10"))

	client := corvo.New(url)
	w := corvo.NewWorker(client, corvo.WorkerOptions{Concurrency: concurrency, ShutdownGrace: 25 * time.Second})
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
	job.Progress(map[string]any{"current": 1, "total": 1, "message": "sending to " + e.To})
	select {
	case <-ctx.Done(): // cancelled from the UI/API, or the lease was lost
		return nil, ctx.Err()
	case <-time.After(10 * time.Millisecond): // the actual work
	}
	return map[string]any{"sent": true, "to": e.To}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
