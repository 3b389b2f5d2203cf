package corvo

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRoutingAndScores: an enqueue's Routing reaches the fetch
// (FetchedJob.Routing), a Failure with ProviderError moves the job to its
// next model, and Score / ScoresSummary / ScoresCompare round-trip.
func TestRoutingAndScores(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.route", Tags: map[string]string{"prompt": "v1"},
		Routing: &Routing{Prefer: "big", Fallback: []string{"small"}}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() FetchedJob {
		t.Helper()
		jobs, err := c.Fetch(ctx, FetchRequest{Queues: []string{"sdk.route"}, WorkerID: "w", Timeout: 5})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("fetch: %v %v", jobs, err)
		}
		return jobs[0]
	}
	j := fetch()
	if j.Routing == nil || *j.Routing != (RouteTarget{Target: "big", Index: 0}) {
		t.Fatalf("first fetch routing %+v", j.Routing)
	}
	if _, err := c.Fail(ctx, e.JobID, Failure{Error: "503", WorkerID: "w", Attempt: 1, ProviderError: true}); err != nil {
		t.Fatal(err)
	}
	j = fetch()
	if j.Routing == nil || *j.Routing != (RouteTarget{Target: "small", Index: 1}) {
		t.Fatalf("after a provider error %+v", j.Routing)
	}
	if err := c.Ack(ctx, Ack{JobID: e.JobID, WorkerID: "w", Attempt: 2, Result: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}

	s, err := c.Score(ctx, e.JobID, ScoreRequest{Dimensions: map[string]float64{"accuracy": 0.75}, Scorer: "sdk"})
	if err != nil || s.JobID != e.JobID || s.Status != "completed" {
		t.Fatalf("score %+v %v", s, err)
	}
	doc, err := c.Job(ctx, e.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Routing == nil || doc.Routing.Target != "small" || doc.Routing.Fallbacks != 1 || len(doc.Scores) != 1 || doc.Scores[0].Dimensions["accuracy"] != 0.75 {
		t.Fatalf("document routing %+v scores %+v", doc.Routing, doc.Scores)
	}
	sum, err := c.ScoresSummary(ctx, ScoresParams{Queue: "sdk.route", Period: "24h"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sum.Dimensions["accuracy"]; got != (ScoreStats{Mean: 0.75, P50: 0.75, P5: 0.75, Count: 1}) {
		t.Fatalf("summary %+v", got)
	}
	cmp, err := c.ScoresCompare(ctx, ScoresParams{Queue: "sdk.route", GroupBy: "tag:prompt"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.Groups) != 1 || cmp.Groups[0].Key == nil || *cmp.Groups[0].Key != "v1" || cmp.Groups[0].Dimensions["accuracy"].Count != 1 {
		t.Fatalf("compare %+v", cmp.Groups)
	}
	if _, err := c.Score(ctx, e.JobID, ScoreRequest{Scorer: "sdk"}); err == nil {
		t.Fatal("a score without dimensions was accepted")
	}
}

// TestWorkerProviderError: a handler returning AsProviderError moves its
// routed job to the next model, which completes it.
func TestWorkerProviderError(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.provider", Routing: &Routing{Prefer: "down", Fallback: []string{"up"}}})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorker(c, WorkerOptions{Concurrency: 1, FetchTimeout: time.Second})
	w.Register("sdk.provider", func(_ context.Context, j *JobContext) (any, error) {
		if j.Routing.Target == "down" {
			return nil, AsProviderError(errors.New("503 from the provider"))
		}
		return map[string]string{"model": j.Routing.Target}, nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx) }()
	doc := waitState(t, c, e.JobID, "completed")
	if doc.Routing == nil || doc.Routing.Target != "up" || doc.Routing.Fallbacks != 1 || doc.AttemptsRemaining != doc.MaxRetries-1 {
		t.Fatalf("routing %+v, attempts remaining %d of %d", doc.Routing, doc.AttemptsRemaining, doc.MaxRetries)
	}
}
