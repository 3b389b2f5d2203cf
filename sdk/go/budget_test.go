package corvo

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestBudgetExceededIsNotRetried: a 429 budget_exceeded is answered at
// once (a spent budget stays spent until UTC midnight), while another
// 429 is retried.
func TestBudgetExceededIsNotRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	code := atomic.Value{}
	code.Store(CodeBudgetExceeded)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/enqueue" {
			http.NotFound(w, r) // the placement: none
			return
		}
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		_, _ = w.Write([]byte(`{"error":"spent","code":"` + code.Load().(string) + `"}`))
	}))
	defer srv.Close()
	c := New(srv.URL, WithoutEnqueueCoalescing()) // one request per call (a coalesced one sends its jobs alone after a 429)
	c.MaxRetries = 2
	_, err := c.Enqueue(context.Background(), EnqueueRequest{Queue: "q"})
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeBudgetExceeded {
		t.Fatalf("err %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
	code.Store(CodeOverloaded)
	_, _ = c.Enqueue(context.Background(), EnqueueRequest{Queue: "q"})
	if n := calls.Load(); n != 1+3 {
		t.Fatalf("%d calls, want 1 + 3 (an overloaded 429 is retried twice)", n)
	}
}
