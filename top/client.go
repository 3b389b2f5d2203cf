// Package top is the live dashboard behind `corvo top`: it polls a Corvo
// server's HTTP API (queues, workers, health, and a search per busy queue
// for its oldest pending job) and shows the result as a bubbletea terminal
// UI, or as one snapshot (a table or JSON) for scripts. Like bench, it is
// only an HTTP client: it imports no server package.
package top

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// OldestLimitDefault is how many queues, the ones with the most pending
// jobs, get their oldest pending job looked up per snapshot (one search
// each); the others show no age.
const OldestLimitDefault = 50

// oldestParallel bounds the concurrent searches of one snapshot.
const oldestParallel = 4

// Snapshot is one poll of a server.
type Snapshot struct {
	At      time.Time // when the poll finished (the client's clock)
	Health  Health
	Queues  []Queue // sorted by name, as the server sends them
	Workers []Worker
	// NoSearch: the server has no search index (--no-mirror), so the
	// oldest pending job of a queue is unknown.
	NoSearch bool
}

// The server's bodies are the SDK's types (one Go definition of the wire).
type (
	// Health is GET /healthz.
	Health = corvo.Health
	// Totals are a queue's running counters.
	Totals = corvo.QueueTotals
	// Throughput is a queue's jobs per second, the server's measure over
	// about a minute.
	Throughput = corvo.QueueThroughput
	// Worker is one entry of GET /api/v1/workers.
	Worker = corvo.WorkerInfo
)

// Queue is one entry of GET /api/v1/queues, with what top adds.
type Queue struct {
	corvo.Queue

	// OldestPendingAt is the creation time of the queue's oldest pending
	// job (from a search); zero when none is pending or it is unknown.
	OldestPendingAt time.Time `json:"-"`
}

// Client polls one server.
type Client struct {
	BaseURL     string // e.g. http://localhost:8080
	APIKey      string // sent as "Authorization: Bearer"; "" sends none
	Namespace   string // sent as X-Corvo-Namespace; "" sends none (the key's own)
	HTTP        *http.Client
	OldestLimit int              // 0: OldestLimitDefault; negative: no searches
	Now         func() time.Time // nil: time.Now
}

// NewClient returns a client for baseURL with a bounded per-request timeout.
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// StatusError is a non-2xx answer.
type StatusError struct {
	Method, Path string
	Status       int
	Msg          string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, e.Msg)
}

func (c *Client) do(ctx context.Context, method, path string, body, into any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil || method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json") // the server wants it even without a body
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	if c.Namespace != "" {
		req.Header.Set(corvo.NamespaceHeader, c.Namespace)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e corvo.ErrorBody
		msg := strings.TrimSpace(string(out))
		if json.Unmarshal(out, &e) == nil && e.Error != "" {
			msg = e.Error + " (" + e.Code + ")"
		}
		return &StatusError{Method: method, Path: path, Status: resp.StatusCode, Msg: msg}
	}
	if into == nil {
		return nil
	}
	if err := json.Unmarshal(out, into); err != nil {
		return fmt.Errorf("%s %s: unexpected answer: %w", method, path, err)
	}
	return nil
}

// Snapshot polls health, queues and workers at once, then looks up the
// oldest pending job of the busiest queues.
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	var (
		s       Snapshot
		queues  corvo.QueueList
		workers corvo.WorkerList
		wg      sync.WaitGroup
		errs    [3]error
	)
	wg.Add(3)
	go func() { defer wg.Done(); errs[0] = c.do(ctx, "GET", "/healthz", nil, &s.Health) }()
	go func() { defer wg.Done(); errs[1] = c.do(ctx, "GET", "/api/v1/queues", nil, &queues) }()
	go func() { defer wg.Done(); errs[2] = c.do(ctx, "GET", "/api/v1/workers", nil, &workers) }()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err // one line for the banner: the others say the same
		}
	}
	s.Queues, s.Workers = make([]Queue, len(queues.Queues)), workers.Workers
	for i, q := range queues.Queues {
		s.Queues[i].Queue = q
	}
	s.NoSearch = c.fillOldest(ctx, s.Queues)
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	s.At = now()
	return &s, nil
}

// fillOldest sets OldestPendingAt of up to OldestLimit queues with pending
// jobs, most pending first. A failed search leaves the age unknown; it
// reports whether the server has no search at all (503).
func (c *Client) fillOldest(ctx context.Context, qs []Queue) (noSearch bool) {
	limit := c.OldestLimit
	if limit == 0 {
		limit = OldestLimitDefault
	}
	var busy []int
	for i := range qs {
		if qs[i].Pending > 0 {
			busy = append(busy, i)
		}
	}
	sort.SliceStable(busy, func(a, b int) bool { return qs[busy[a]].Pending > qs[busy[b]].Pending })
	if limit < 0 {
		limit = 0
	}
	if len(busy) > limit {
		busy = busy[:limit]
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, oldestParallel)
		none bool
	)
	for _, i := range busy {
		wg.Add(1)
		sem <- struct{}{}
		go func(q *Queue) {
			defer func() { <-sem; wg.Done() }()
			var page corvo.SearchPage
			body := corvo.SearchRequest{Queue: q.Name, State: []string{"pending"}, Sort: "created_at", Order: "asc", Limit: 1}
			err := c.do(ctx, "POST", "/api/v1/jobs/search", body, &page)
			var se *StatusError
			if errors.As(err, &se) && se.Status == http.StatusServiceUnavailable {
				mu.Lock()
				none = true
				mu.Unlock()
				return
			}
			if err == nil && len(page.Jobs) == 1 {
				q.OldestPendingAt = page.Jobs[0].CreatedAt
			}
		}(&qs[i])
	}
	wg.Wait()
	return none
}

// SetPaused pauses or resumes a queue.
func (c *Client) SetPaused(ctx context.Context, queue string, paused bool) error {
	action := "/resume"
	if paused {
		action = "/pause"
	}
	return c.do(ctx, "POST", "/api/v1/queues/"+url.PathEscape(queue)+action, nil, nil)
}
