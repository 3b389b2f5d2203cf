package corvo

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWorkerReportsUsage: usage a handler reports travels on heartbeats
// (the running total) and the ack carries only what no applied heartbeat
// reported, so the server's totals equal what the handler reported; a
// result that fails the job's result_schema is refused with 422 and the
// summary groups the usage by model.
func TestWorkerReportsUsage(t *testing.T) {
	t.Parallel()
	c := New(startServer(t, "--strict-leases"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := map[string]any{"type": "object", "required": []string{"answer"}}
	e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.llm", Payload: map[string]any{"q": "capital of France"}, ResultSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorker(c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second, HeartbeatInterval: 50 * time.Millisecond})
	w.Register("sdk.llm", func(hctx context.Context, j *JobContext) (any, error) {
		j.ReportUsage(Usage{InputTokens: 1000, OutputTokens: 100, Model: "fake-large", Provider: "fake", CostUSD: 0.011, LatencyMs: 800})
		j.ReportUsage(Usage{InputTokens: 500, OutputTokens: 50, CacheReadTokens: 400, Model: "fake-large", Provider: "fake", CostUSD: 0.0055})
		// Wait until a heartbeat has carried the running total.
		for {
			doc, err := c.Job(hctx, j.JobID)
			if err != nil {
				return nil, err
			}
			if doc.Usage != nil && doc.Usage.InputTokens == 1500 {
				break
			}
			select {
			case <-hctx.Done():
				return nil, hctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		j.ReportUsage(Usage{InputTokens: 70, OutputTokens: 7, Model: "fake-large", Provider: "fake", CostUSD: 0.00077})
		if got := j.Usage(); got.InputTokens != 1570 {
			t.Errorf("Usage() = %+v", got)
		}
		return map[string]any{"answer": "Paris"}, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx) }()
	doc := waitState(t, c, e.JobID, "completed")
	if doc.Usage == nil {
		t.Fatal("no usage")
	}
	u := doc.Usage
	if u.InputTokens != 1570 || u.OutputTokens != 157 || u.CacheReadTokens != 400 || u.CostUSD != 0.01727 {
		t.Fatalf("totals %+v", u.UsageCounts)
	}
	if len(u.Reports) != 2 || u.Reports[0].Phase != "heartbeat" || u.Reports[1].Phase != "ack" || u.Reports[1].InputTokens != 70 {
		t.Fatalf("reports %+v", u.Reports)
	}

	s, err := c.UsageSummary(ctx, UsageSummaryParams{Period: "24h", GroupBy: "model"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Groups) != 1 || *s.Groups[0].Key != "fake-large" || s.Groups[0].CostUSD != 0.01727 || s.Groups[0].Jobs != 1 || s.Totals.InputTokens != 1570 {
		t.Fatalf("summary %+v", s)
	}

	// A result the schema refuses: 422, the job still active.
	e2, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.llm.manual", ResultSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Fetch(ctx, FetchRequest{Queues: []string{"sdk.llm.manual"}, WorkerID: "manual", Timeout: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %v %v", jobs, err)
	}
	err = c.Ack(ctx, Ack{JobID: e2.JobID, WorkerID: "manual", Attempt: jobs[0].Attempt, Result: map[string]any{"no": 1},
		Usage: &Usage{InputTokens: 9, CostUSD: 0.1}})
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != CodeResultSchemaInvalid {
		t.Fatalf("ack of an invalid result: %v", err)
	}
	if j, _ := c.Job(ctx, e2.JobID); j.State != "active" || j.Usage != nil {
		t.Fatalf("after a refused ack: %s %+v", j.State, j.Usage)
	}
	if err := c.Ack(ctx, Ack{JobID: e2.JobID, WorkerID: "manual", Attempt: jobs[0].Attempt, Result: map[string]any{"answer": 1}}); err != nil {
		t.Fatal(err)
	}
}
