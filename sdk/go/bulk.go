package corvo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// BulkRequest is one action over job IDs or over every job a search
// filter matches (POST /api/v1/jobs/bulk).
type BulkRequest struct {
	JobIDs      []string       `json:"job_ids,omitempty"`
	Filter      *SearchRequest `json:"filter,omitempty"`
	Action      string         `json:"action"` // retry, requeue, delete, cancel, move, change_priority
	MoveToQueue string         `json:"move_to_queue,omitempty"`
	Priority    string         `json:"priority,omitempty"`
	Async       bool           `json:"async,omitempty"` // run in the background whatever the size
	// Confirm must be set when Filter selects every job of a queue or of
	// the cluster (it narrows nothing but the queue); else the server
	// answers 400 confirmation_required (Error.Code) with the count.
	Confirm bool `json:"confirm,omitempty"`
}

// BulkFailure names a job the action did not apply to.
type BulkFailure = JobFailure

// BulkResult is the answer of a synchronous bulk operation.
type BulkResult struct {
	Affected   int64         `json:"affected"`
	Errors     int64         `json:"errors"`
	Failed     []BulkFailure `json:"failed"`
	DurationMs int64         `json:"duration_ms"`
}

// BulkAccepted is the answer of a bulk operation that runs in the
// background (over 10,000 jobs, or Async).
type BulkAccepted struct {
	ID             string `json:"bulk_operation_id"`
	Status         string `json:"status"`
	EstimatedTotal int64  `json:"estimated_total"`
	ProgressURL    string `json:"progress_url"`
}

// BulkOperation is the status of a background bulk operation.
type BulkOperation struct {
	ID         string        `json:"id"`
	Action     string        `json:"action"`
	Status     string        `json:"status"` // processing, completed, cancelled, failed, interrupted
	Total      int64         `json:"total"`
	Processed  int64         `json:"processed"`
	Affected   int64         `json:"affected"`
	Errors     int64         `json:"errors"`
	CreatedAt  time.Time     `json:"created_at"`
	FinishedAt *time.Time    `json:"finished_at"`
	DurationMs int64         `json:"duration_ms"`
	Error      string        `json:"error"`
	Failed     []BulkFailure `json:"failed"`
	Namespace  string        `json:"namespace"` // of the request that started it
}

// Bulk starts a bulk operation: a small one answers its result at once
// (accepted is nil), a large one is accepted and runs in the background
// (result is nil; follow it with WatchBulk or BulkStatus).
func (c *Client) Bulk(ctx context.Context, r BulkRequest) (result *BulkResult, accepted *BulkAccepted, err error) {
	var raw json.RawMessage
	status, err := c.do(ctx, http.MethodPost, "/api/v1/jobs/bulk", r, &raw)
	if err != nil {
		return nil, nil, err
	}
	if status == http.StatusAccepted {
		accepted = &BulkAccepted{}
		return nil, accepted, json.Unmarshal(raw, accepted)
	}
	result = &BulkResult{}
	return result, nil, json.Unmarshal(raw, result)
}

// BulkStatus reads a background bulk operation.
func (c *Client) BulkStatus(ctx context.Context, id string) (*BulkOperation, error) {
	var out BulkOperation
	_, err := c.do(ctx, http.MethodGet, "/api/v1/bulk/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// CancelBulk stops a running bulk operation before its next chunk and
// returns its final status (409 when it had already finished).
func (c *Client) CancelBulk(ctx context.Context, id string) (*BulkOperation, error) {
	var out BulkOperation
	_, err := c.do(ctx, http.MethodDelete, "/api/v1/bulk/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// BulkOperations lists this node's recent bulk operations, newest first.
func (c *Client) BulkOperations(ctx context.Context, limit int) ([]BulkOperation, error) {
	var out BulkOperationList
	_, err := c.do(ctx, http.MethodGet, "/api/v1/bulk?limit="+strconv.Itoa(limit), nil, &out)
	return out.Operations, err
}

// WatchBulk follows a background bulk operation's progress stream, calling
// progress (if not nil) after every chunk, and returns its final status.
func (c *Client) WatchBulk(ctx context.Context, id string, progress func(BulkOperation)) (*BulkOperation, error) {
	var final *BulkOperation
	err := c.stream(ctx, "/api/v1/bulk/"+url.PathEscape(id)+"/progress", "", nil, func(f sseFrame) error {
		var op BulkOperation
		if err := json.Unmarshal([]byte(f.data), &op); err != nil {
			return fmt.Errorf("corvo: bulk progress: %w", err)
		}
		switch f.event {
		case "progress":
			if progress != nil {
				progress(op)
			}
		case "done":
			final = &op
			return errStreamDone
		}
		return nil
	})
	if final != nil {
		return final, nil
	}
	if err == nil {
		err = errors.New("corvo: the progress stream ended before the operation finished")
	}
	return nil, err
}

// EventsRequest selects lifecycle events (GET /api/v1/events).
type EventsRequest struct {
	Queues      []string
	Types       []string // enqueued, started, completed, failed, retrying, dead, cancelled, progress, …
	LastEventID string   // resume after this event ("" : live from now)
	// OnOpen, when set, is called once the server has opened the stream
	// (its first line arrived): events from then on are delivered.
	OnOpen func()
}

// Event is one frame of the event stream: a job event, or a reset (the
// resume point was too old or the reader fell behind: refetch state).
type Event struct {
	ID     string // pass as LastEventID to resume after it
	Reset  bool
	Reason string // for a reset
	Job    *JobEvent
}

// JobEvent is one job lifecycle transition.
type JobEvent struct {
	Type          string          `json:"type"`
	JobID         string          `json:"job_id"`
	Queue         string          `json:"queue"`
	State         string          `json:"state"`
	Attempt       int             `json:"attempt"`
	At            time.Time       `json:"at"`
	WorkerID      string          `json:"worker_id"`
	Error         string          `json:"error"`
	Reason        string          `json:"reason"`
	Progress      json.RawMessage `json:"progress"`
	NextAttemptAt *time.Time      `json:"next_attempt_at"`
	FromQueue     string          `json:"from_queue"`
	MovedTo       string          `json:"moved_to"`
}

// Events streams lifecycle events to fn until ctx ends or fn returns an
// error (which Events then returns). Keep the last Event.ID to resume.
func (c *Client) Events(ctx context.Context, r EventsRequest, fn func(Event) error) error {
	q := url.Values{}
	if len(r.Queues) > 0 {
		q.Set("queue", strings.Join(r.Queues, ","))
	}
	if len(r.Types) > 0 {
		q.Set("type", strings.Join(r.Types, ","))
	}
	path := "/api/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	err := c.stream(ctx, path, r.LastEventID, r.OnOpen, func(f sseFrame) error {
		ev := Event{ID: f.id}
		switch f.event {
		case "reset":
			var body ResetEvent
			_ = json.Unmarshal([]byte(f.data), &body)
			ev.Reset, ev.Reason = true, body.Reason
		case "job":
			ev.Job = &JobEvent{}
			if err := json.Unmarshal([]byte(f.data), ev.Job); err != nil {
				return fmt.Errorf("corvo: event: %w", err)
			}
		default:
			return nil
		}
		return fn(ev)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

var errStreamDone = errors.New("stream done")

type sseFrame struct{ id, event, data string }

// stream reads a Server-Sent Events response, frame by frame; onOpen (if
// not nil) is called when its first line arrives.
func (c *Client) stream(ctx context.Context, path, lastID string, onOpen func(), fn func(sseFrame) error) error {
	base, at := c.base()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.failover(at) // the stream's caller reconnects, to the next node
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		e := &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(data))}
		var eb ErrorBody
		if json.Unmarshal(data, &eb) == nil {
			e.Code, e.Message = eb.Code, eb.Error
		}
		return e
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var f sseFrame
	for sc.Scan() {
		line := sc.Text()
		if onOpen != nil {
			onOpen()
			onOpen = nil
		}
		switch {
		case line == "":
			if f.event != "" || f.data != "" {
				if err := fn(f); err != nil {
					if errors.Is(err, errStreamDone) {
						return nil
					}
					return err
				}
			}
			f = sseFrame{}
		case strings.HasPrefix(line, ":"): // a comment (keepalive)
		case strings.HasPrefix(line, "id:"):
			f.id = strings.TrimPrefix(strings.TrimPrefix(line, "id:"), " ")
		case strings.HasPrefix(line, "event:"):
			f.event = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
		case strings.HasPrefix(line, "data:"):
			if f.data != "" {
				f.data += "\n"
			}
			f.data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	return sc.Err()
}
