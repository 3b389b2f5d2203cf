package corvo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestEnqueueCoalesces: 16 goroutines enqueueing at once take far fewer
// requests than jobs, and every job is stored once, with its payload.
func TestEnqueueCoalesces(t *testing.T) {
	t.Parallel()
	url, counts := countingProxy(t, startServer(t), false)
	c := New(url)
	ctx := context.Background()
	const goroutines, each = 16, 40
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				e, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.coalesce", Payload: map[string]int{"g": g, "i": i}})
				if err != nil {
					errs <- err
					return
				}
				if e.Status != "pending" || e.UniqueExisting {
					errs <- fmt.Errorf("answer %+v", e)
					return
				}
				ids[g] = append(ids[g], e.JobID)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	singles, batches := count(counts, "/api/v1/enqueue"), count(counts, "/api/v1/enqueue/batch")
	if total := int64(goroutines * each); singles+batches > total/2 || singles+count(counts, "enqueued in batches") != total {
		t.Fatalf("%d jobs took %d single and %d batch requests (%d jobs in batches)", total, singles, batches, count(counts, "enqueued in batches"))
	}
	seen := map[string]bool{}
	for g := range goroutines {
		for i, id := range ids[g] {
			if seen[id] {
				t.Fatalf("job id %s answered twice", id)
			}
			seen[id] = true
			j, err := c.Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var p struct{ G, I int }
			if err := json.Unmarshal(j.Payload, &p); err != nil || p.G != g || p.I != i {
				t.Fatalf("job %s of call (%d, %d) holds %s", id, g, i, j.Payload)
			}
		}
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "sdk.coalesce" && q.Pending != goroutines*each {
			t.Fatalf("queue holds %d pending jobs, want %d", q.Pending, goroutines*each)
		}
	}
}

// TestEnqueueAloneAtOnceThenBatched: a lone Enqueue goes out at once as a
// plain enqueue; the calls made while it is held in flight go together as
// the next batch, each with its own answer — an invalid job's error
// reaches only its caller — and jobs a batch cannot answer for go alone.
func TestEnqueueAloneAtOnceThenBatched(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	url, counts := countingProxy(t, base, false)
	arrived, release := make(chan struct{}, maxEnqueueRequests), make(chan struct{})
	var held atomic.Int32
	holding := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/enqueue" {
			if held.Add(1) <= maxEnqueueRequests { // hold the first ones in flight
				arrived <- struct{}{}
				<-release
			}
		}
		proxyTo(url).ServeHTTP(w, r)
	}))
	t.Cleanup(holding.Close)
	c := New(holding.URL)
	c.enq.testWaiting = make(chan int)
	ctx := context.Background()

	first := make(chan error, maxEnqueueRequests)
	for range maxEnqueueRequests {
		go func() {
			_, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.lone"})
			first <- err
		}()
		<-arrived // sent while fewer than the maximum were out: no waiting for company
	}

	type answer struct {
		e   *Enqueued
		err error
	}
	reqs := []EnqueueRequest{
		{Queue: "sdk.lone", Payload: map[string]int{"n": 1}},
		{Queue: "not a queue!"},
		{Queue: "sdk.lone", Payload: map[string]int{"n": 3}},
		{Queue: "sdk.lone", Payload: map[string]int{"n": 4}},
	}
	answers := make([]chan answer, len(reqs))
	for i, r := range reqs {
		answers[i] = make(chan answer, 1)
		go func() {
			e, err := c.Enqueue(ctx, r)
			answers[i] <- answer{e, err}
		}()
		if n := <-c.enq.testWaiting; n != i+1 {
			t.Fatalf("%d calls wait, want %d", n, i+1)
		}
	}
	c.enq.testWaiting = nil
	// A unique job goes alone, not waiting for the one in flight.
	u, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.lone", UniqueKey: "k"})
	if err != nil || u.Status != "pending" {
		t.Fatalf("unique enqueue: %+v %v", u, err)
	}
	close(release)
	for range maxEnqueueRequests {
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range reqs {
		a := <-answers[i]
		if r.Queue == "not a queue!" {
			var e *Error
			if !errors.As(a.err, &e) || e.Status != 400 || e.Code != CodeInvalidRequest {
				t.Fatalf("invalid job: %v", a.err)
			}
			continue
		}
		if a.err != nil {
			t.Fatalf("job %d: %v", i, a.err)
		}
		j, err := c.Job(ctx, a.e.JobID)
		if err != nil || !strings.Contains(string(j.Payload), fmt.Sprintf(`"n":%d`, i+1)) {
			t.Fatalf("job %d: %+v %v", i, j, err)
		}
	}
	// The refused batch (one invalid job) stored nothing; its jobs went
	// alone: the first ones + 1 (unique) + 4 lone enqueues, 1 batch.
	if s, b := count(counts, "/api/v1/enqueue"), count(counts, "/api/v1/enqueue/batch"); s != maxEnqueueRequests+5 || b != 1 {
		t.Fatalf("%d single and %d batch requests", s, b)
	}
	// Without coalescing, each call is its own request.
	url2, counts2 := countingProxy(t, base, false)
	c2 := New(url2, WithoutEnqueueCoalescing())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := c2.Enqueue(ctx, EnqueueRequest{Queue: "sdk.lone"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if s, b := count(counts2, "/api/v1/enqueue"), count(counts2, "/api/v1/enqueue/batch"); s != 8 || b != 0 {
		t.Fatalf("without coalescing: %d single and %d batch requests", s, b)
	}
}

// proxyTo forwards every request to url.
func proxyTo(url string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			_, _ = w.Write(buf[:n])
			if err != nil {
				return
			}
		}
	})
}
