package corvo

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestClientBulkAndEvents: background bulk operations and the event
// stream, against the real server.
func TestClientBulkAndEvents(t *testing.T) {
	t.Parallel()
	c := New(startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	got := make(chan Event, 100)
	streamCtx, stopStream := context.WithCancel(ctx)
	streamDone := make(chan error, 1)
	go func() {
		streamDone <- c.Events(streamCtx, EventsRequest{Queues: []string{"sdk.bulk"}}, func(e Event) error { got <- e; return nil })
	}()
	// The stream is live once a job enqueued now shows up on it.
	var first Event
	for first.Job == nil {
		if _, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.bulk", Payload: 0}); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-got:
		case <-time.After(200 * time.Millisecond):
		}
	}
	b, err := c.EnqueueBatch(ctx, []EnqueueRequest{{Queue: "sdk.bulk", Payload: 1}, {Queue: "sdk.bulk", Payload: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, acc, err := c.Bulk(ctx, BulkRequest{JobIDs: b.JobIDs, Action: "delete", Async: true})
	if err != nil || res != nil || acc == nil || acc.EstimatedTotal != 2 {
		t.Fatalf("%+v %+v %v", res, acc, err)
	}
	final, err := c.WatchBulk(ctx, acc.ID, nil)
	if err != nil || final.Status != "completed" || final.Affected != 2 {
		t.Fatalf("%+v %v", final, err)
	}
	if op, err := c.BulkStatus(ctx, acc.ID); err != nil || op.Status != "completed" || op.FinishedAt == nil {
		t.Fatalf("%+v %v", op, err)
	}
	if ops, err := c.BulkOperations(ctx, 10); err != nil || len(ops) != 1 || ops[0].ID != acc.ID {
		t.Fatalf("%+v %v", ops, err)
	}
	if _, err := c.CancelBulk(ctx, acc.ID); !IsConflict(err) {
		t.Fatalf("want 409, got %v", err)
	}
	// Synchronous below the threshold.
	if res, acc, err := c.Bulk(ctx, BulkRequest{JobIDs: []string{first.Job.JobID}, Action: "cancel"}); err != nil || acc != nil || res.Affected != 1 {
		t.Fatalf("%+v %+v %v", res, acc, err)
	}

	// A whole queue by filter needs Confirm.
	if _, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.bulk.all", Payload: 0}); err != nil {
		t.Fatal(err)
	}
	var apiErr *Error
	if _, _, err := c.Bulk(ctx, BulkRequest{Filter: &SearchRequest{Queue: "sdk.bulk.all"}, Action: "delete"}); !errors.As(err, &apiErr) || apiErr.Code != "confirmation_required" {
		t.Fatalf("want confirmation_required, got %v", err)
	}
	if _, _, err := c.Bulk(ctx, BulkRequest{Filter: &SearchRequest{Queue: "sdk.bulk.all"}, Action: "delete", Confirm: true}); err != nil {
		t.Fatal(err)
	}

	seen := map[string][]string{first.Job.JobID: {first.Job.Type}}
	var last string
	for len(seen[b.JobIDs[0]]) < 2 || len(seen[b.JobIDs[1]]) < 2 || len(seen[first.Job.JobID]) < 2 {
		select {
		case e := <-got:
			if e.Job != nil {
				seen[e.Job.JobID] = append(seen[e.Job.JobID], e.Job.Type)
				last = e.ID
			}
		case <-ctx.Done():
			t.Fatalf("events so far: %v", seen)
		}
	}
	for _, id := range b.JobIDs {
		if s := seen[id]; s[0] != "enqueued" || s[1] != "deleted" {
			t.Fatalf("%s: %v", id, s)
		}
	}
	if s := seen[first.Job.JobID]; s[1] != "cancelled" {
		t.Fatalf("%v", s)
	}
	stopStream()
	if err := <-streamDone; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// Resuming after the last event: nothing is replayed; the next event is new.
	again := make(chan Event, 10)
	go func() {
		_ = c.Events(ctx, EventsRequest{Queues: []string{"sdk.bulk"}, LastEventID: last}, func(e Event) error { again <- e; return nil })
	}()
	j, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.bulk", Payload: 9})
	if err != nil {
		t.Fatal(err)
	}
	if e := <-again; e.Job == nil || e.Job.JobID != j.JobID || e.Job.Type != "enqueued" {
		t.Fatalf("%+v", e)
	}
	job, err := c.Job(ctx, j.JobID)
	if err != nil || len(job.Timeline) != 1 || job.Timeline[0].Type != "enqueued" {
		t.Fatalf("%+v %v", job, err)
	}
}
