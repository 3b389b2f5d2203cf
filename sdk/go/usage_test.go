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

// TestWorkerBudgetExceeded: a job whose reported cost passes a per-job
// budget hears it on its next heartbeat: the handler's context is
// cancelled with ErrBudgetExceeded and the attempt fails with it; with
// ContinueOverBudget the context lives and BudgetExceeded says so.
func TestWorkerBudgetExceeded(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limit := 0.01
	for _, q := range []string{"sdk.budget", "sdk.budget.go-on"} {
		if _, err := c.SetBudget(ctx, BudgetRequest{Scope: "queue:" + q, PerJobUSD: &limit}); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := c.Budgets(ctx)
	if err != nil || len(bs) != 2 || bs[0].OnExceed != "hold" || *bs[0].PerJobUSD != 0.01 || bs[0].DailyUSD != nil {
		t.Fatalf("budgets %+v %v", bs, err)
	}

	stopped, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.budget", MaxRetries: new(int)})
	if err != nil {
		t.Fatal(err)
	}
	goOn, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.budget.go-on"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(opt WorkerOptions, q string, h Handler) {
		opt.Concurrency, opt.FetchTimeout, opt.HeartbeatInterval = 1, time.Second, 50*time.Millisecond
		w := NewWorker(c, opt)
		w.Register(q, h)
		runCtx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		go func() { _ = w.Run(runCtx) }()
	}
	run(WorkerOptions{}, "sdk.budget", func(hctx context.Context, j *JobContext) (any, error) {
		j.ReportUsage(Usage{InputTokens: 10, CostUSD: 0.02})
		<-hctx.Done() // the next heartbeat carries the usage, and hears the budget
		if !j.BudgetExceeded() || !errors.Is(context.Cause(hctx), ErrBudgetExceeded) {
			t.Errorf("cause %v", context.Cause(hctx))
		}
		return nil, hctx.Err()
	})
	run(WorkerOptions{ContinueOverBudget: true}, "sdk.budget.go-on", func(hctx context.Context, j *JobContext) (any, error) {
		j.ReportUsage(Usage{InputTokens: 10, CostUSD: 0.02})
		for !j.BudgetExceeded() {
			select {
			case <-hctx.Done():
				return nil, hctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return "done anyway", hctx.Err()
	})
	doc := waitState(t, c, stopped.JobID, "dead")
	if len(doc.Errors) != 1 || doc.Errors[0].Error != ErrBudgetExceeded.Error() {
		t.Fatalf("errors %+v", doc.Errors)
	}
	waitState(t, c, goOn.JobID, "completed")
}
