package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway/events"
)

// sseFrame is one Server-Sent Events frame (or a comment line).
type sseFrame struct {
	ID, Event, Data, Comment string
}

// sseStream reads frames from a GET until the body ends or the test does.
type sseStream struct {
	frames chan sseFrame
	resp   *http.Response
	cancel context.CancelFunc
}

func openSSE(t *testing.T, path, lastID string) *sseStream {
	t.Helper()
	return openSSEURL(t, baseURL+path, lastID)
}

// openSSEURL is openSSE against any server.
func openSSEURL(t *testing.T, url, lastID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	require.NoError(t, err)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sseStream{frames: make(chan sseFrame, 100000), resp: resp, cancel: cancel}
	go func() {
		defer close(s.frames)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var f sseFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if f != (sseFrame{}) {
					s.frames <- f
				}
				f = sseFrame{}
			case strings.HasPrefix(line, ":"):
				s.frames <- sseFrame{Comment: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "id: "):
				f.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.Data = line[6:]
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() { s.cancel(); s.resp.Body.Close() }

// next returns the next frame that is not a comment.
func (s *sseStream) next(t *testing.T) sseFrame {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-s.frames:
			require.True(t, ok, "stream ended")
			if f.Comment == "" {
				return f
			}
		case <-timeout:
			t.Fatal("no event within 20s")
		}
	}
}

type jobEvent struct {
	Type     string          `json:"type"`
	JobID    string          `json:"job_id"`
	Queue    string          `json:"queue"`
	State    string          `json:"state"`
	Attempt  int             `json:"attempt"`
	At       string          `json:"at"`
	WorkerID string          `json:"worker_id"`
	Error    string          `json:"error"`
	Progress json.RawMessage `json:"progress"`
}

// collect reads job events until n have arrived.
func (s *sseStream) collect(t *testing.T, n int) ([]jobEvent, []string) {
	t.Helper()
	var evs []jobEvent
	var ids []string
	for len(evs) < n {
		f := s.next(t)
		require.Equal(t, "job", f.Event, f.Data)
		evs = append(evs, mustJSON[jobEvent](t, []byte(f.Data)))
		ids = append(ids, f.ID)
	}
	return evs, ids
}

func byJob(evs []jobEvent) map[string][]string {
	out := map[string][]string{}
	for _, e := range evs {
		out[e.JobID] = append(out[e.JobID], e.Type+"/"+e.State)
	}
	return out
}

// TestAPIEvents subscribes, drives jobs through their lifecycle and sees
// each job's events in order; a reconnect with Last-Event-ID gets exactly
// what it missed; filters hold; an old cursor gets a reset.
func TestAPIEvents(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "events", 2)
	q, other := qs[0], qs[1]
	s := openSSE(t, "/api/v1/events?queue="+q, "") // subscribed once the headers are in

	a := enqueue(t, map[string]any{"queue": q, "payload": 1, "max_retries": 2, "retry_backoff": "none"})
	enqueue(t, map[string]any{"queue": other, "payload": 0}) // filtered out
	j, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	require.Equal(t, a, j.JobID)
	code, body := call(t, "POST", "/api/v1/fail/"+a, map[string]any{"error": "boom"})
	require.Equal(t, 200, code, string(body))
	_, ok = fetchOne(t, 1, q)
	require.True(t, ok)
	code, _ = call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w-" + t.Name(), "jobs": map[string]any{a: map[string]any{"progress": map[string]any{"current": 1, "total": 2, "message": "half"}}}})
	require.Equal(t, 200, code)
	code, _ = call(t, "POST", "/api/v1/ack/"+a, map[string]any{})
	require.Equal(t, 200, code)
	b := enqueue(t, map[string]any{"queue": q, "payload": 2, "max_retries": 0})
	_, ok = fetchOne(t, 1, q)
	require.True(t, ok)
	code, _ = call(t, "POST", "/api/v1/fail/"+b, map[string]any{"error": "fatal"})
	require.Equal(t, 200, code)
	c := enqueue(t, map[string]any{"queue": q, "payload": 3})
	code, _ = call(t, "POST", "/api/v1/jobs/"+c+"/cancel", nil)
	require.Equal(t, 200, code)

	evs, ids := s.collect(t, 13)
	got := byJob(evs)
	require.Equal(t, []string{"enqueued/pending", "started/active", "failed/active", "retrying/pending", "started/active",
		"progress/active", "completed/completed"}, got[a])
	require.Equal(t, []string{"enqueued/pending", "started/active", "failed/active", "dead/dead"}, got[b])
	require.Equal(t, []string{"enqueued/pending", "cancelled/cancelled"}, got[c])
	require.Len(t, got, 3, "the other queue is filtered out")
	for _, e := range evs {
		require.Equal(t, q, e.Queue)
		_, err := time.Parse(TimeFormat, e.At)
		require.NoError(t, err)
		if e.Type == "failed" && e.JobID == a {
			require.Equal(t, "boom", e.Error)
			require.Equal(t, 1, e.Attempt)
		}
		if e.Type == "progress" {
			require.JSONEq(t, `{"current":1,"total":2,"message":"half"}`, string(e.Progress))
		}
		if e.Type == "started" {
			require.Equal(t, "w-"+t.Name(), e.WorkerID)
		}
	}

	// Resume from the 5th event: exactly events 6..13, same ids.
	s2 := openSSE(t, "/api/v1/events?queue="+q, ids[4])
	_, ids2 := s2.collect(t, 8)
	require.Equal(t, ids[5:], ids2)
	// ?last_event_id= works too, with a type filter.
	s3 := openSSE(t, "/api/v1/events?queue="+q+"&type=failed,dead&last_event_id="+ids[0], "")
	evs3, _ := s3.collect(t, 3)
	require.Equal(t, []string{"failed", "failed", "dead"}, []string{evs3[0].Type, evs3[1].Type, evs3[2].Type})
	// Nothing missed, nothing new: the resumed stream idles with keepalives.
	for f := range s2.frames {
		require.Equal(t, "keepalive", f.Comment, "no duplicate after the resume: %+v", f)
		break
	}

	// A cursor older than this run's history: reset, then live.
	old := events.Cursor{{Index: 0, N: 0}, {Index: 0, N: 0}, {Index: 0, N: 0}, {Index: 0, N: 0}}.Encode()
	s4 := openSSE(t, "/api/v1/events?queue="+q, old)
	f := s4.next(t)
	require.Equal(t, "reset", f.Event)
	require.Contains(t, f.Data, `"reason"`)
	require.NotEmpty(t, f.ID)
	d := enqueue(t, map[string]any{"queue": q, "payload": 4})
	evs4, _ := s4.collect(t, 1)
	require.Equal(t, d, evs4[0].JobID)
	require.Equal(t, "enqueued", evs4[0].Type)
}

func TestAPIEventsBadInput(t *testing.T) {
	t.Parallel()
	for _, path := range []string{
		"/api/v1/events?last_event_id=garbage",
		"/api/v1/events?last_event_id=" + events.Cursor{{Index: 1, N: 1}}.Encode(), // another shard count
		"/api/v1/events?type=exploded",
		"/api/v1/events?queue=bad%20name",
	} {
		code, body := call(t, "GET", path, nil)
		require.Equal(t, 400, code, path)
		require.Contains(t, string(body), `"code":"invalid_request"`, path)
	}
	req, _ := http.NewRequest("GET", baseURL+"/api/v1/events", nil)
	req.Header.Set("Last-Event-ID", "%%%")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
}

type timelineDoc struct {
	Timeline []struct {
		At       string `json:"at"`
		Type     string `json:"type"`
		Attempt  int    `json:"attempt"`
		WorkerID string `json:"worker_id"`
		Detail   string `json:"detail"`
	} `json:"timeline"`
	Errors []struct {
		StartedAt *string `json:"started_at"`
		WorkerID  *string `json:"worker_id"`
	} `json:"errors"`
}

// TestAPIJobTimeline: a job that failed once, was retried after its
// backoff, reported progress and completed tells that story in order.
func TestAPIJobTimeline(t *testing.T) {
	t.Parallel()
	q := uq("timeline")
	id := enqueue(t, map[string]any{"queue": q, "payload": 1, "max_retries": 2, "retry_backoff": "fixed", "retry_base_delay": "50ms"})
	_, ok := fetchOne(t, 1, q)
	require.True(t, ok)
	code, _ := call(t, "POST", "/api/v1/fail/"+id, map[string]any{"error": "SMTP timeout"})
	require.Equal(t, 200, code)
	_, ok = fetchOne(t, 5, q) // waits for the promote after 50ms
	require.True(t, ok)
	code, _ = call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": "w-" + t.Name(), "jobs": map[string]any{id: map[string]any{"progress": map[string]any{"current": 450, "total": 1000, "message": "Sending batch"}}}})
	require.Equal(t, 200, code)
	code, _ = call(t, "POST", "/api/v1/ack/"+id, nil)
	require.Equal(t, 200, code)

	code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	doc := mustJSON[timelineDoc](t, body)
	var got []string
	var last time.Time
	for _, e := range doc.Timeline {
		at, err := time.Parse(TimeFormat, e.At)
		require.NoError(t, err)
		require.False(t, at.Before(last), "in time order")
		last = at
		got = append(got, e.Type)
	}
	require.Equal(t, []string{"enqueued", "started", "failed", "retrying", "started", "progress", "completed"}, got, string(body))
	w := "w-" + t.Name()
	tl := doc.Timeline
	require.Equal(t, 1, tl[1].Attempt)
	require.Equal(t, w, tl[1].WorkerID)
	require.Equal(t, "SMTP timeout", tl[2].Detail)
	require.Equal(t, "retry in 50ms (fixed backoff)", tl[3].Detail)
	require.Equal(t, 2, tl[4].Attempt)
	require.Equal(t, "450/1000 Sending batch", tl[5].Detail)
	require.Equal(t, 2, tl[6].Attempt)
	require.Equal(t, w, tl[6].WorkerID)
	require.Len(t, doc.Errors, 1)
	require.Equal(t, w, *doc.Errors[0].WorkerID)
	require.Equal(t, tl[1].At, *doc.Errors[0].StartedAt)
}
