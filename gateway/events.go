package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// Events is what the gateway needs from the node's event ring.
type Events interface {
	Shards() int
	Subscribe(from events.Cursor, f events.Filter) (*events.Sub, bool)
}

// Limits of the event stream.
const (
	EventsKeepaliveDefault = 15 * time.Second
	maxEventSubscribers    = 1024
	eventsBatch            = 256
)

// GET /api/v1/events — the node's job lifecycle events as Server-Sent
// Events, optionally of some queues and types, resumable with
// Last-Event-ID.
func (s *Server) handleEvents(ctx *fasthttp.RequestCtx) {
	if s.cfg.Events == nil {
		writeError(ctx, &apiError{status: 503, code: "unavailable", msg: "this server runs without the event stream"})
		return
	}
	args := ctx.QueryArgs()
	var f events.Filter
	if v := string(args.Peek("queue")); v != "" {
		f.Queues = map[string]bool{}
		for _, q := range strings.Split(v, ",") {
			if err := router.ValidateQueueName(q); err != nil {
				writeError(ctx, invalid("query \"queue\": %v", err))
				return
			}
			f.Queues[q] = true
		}
	}
	if v := string(args.Peek("type")); v != "" {
		f.Types = map[statemachine.EventType]bool{}
		for _, name := range strings.Split(v, ",") {
			t, ok := statemachine.ParseEventType(name)
			if !ok {
				writeError(ctx, invalid("query \"type\": unknown event type %q", name))
				return
			}
			f.Types[t] = true
		}
	}
	last := string(ctx.Request.Header.Peek("Last-Event-ID"))
	if last == "" {
		last = string(args.Peek("last_event_id"))
	}
	var from events.Cursor
	if last != "" {
		c, err := events.DecodeCursor(last, s.cfg.Events.Shards())
		if err != nil {
			writeError(ctx, invalid("Last-Event-ID is not an event id of this server"))
			return
		}
		from = c
	}
	if s.subscribers.Add(1) > maxEventSubscribers {
		s.subscribers.Add(-1)
		writeError(ctx, &apiError{status: 503, code: "unavailable", msg: "too many event subscribers"})
		return
	}
	sub, reset := s.cfg.Events.Subscribe(from, f)
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	markStream(ctx)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.subscribers.Add(-1)
		s.streamEvents(w, sub, reset)
	})
}

func (s *Server) streamEvents(w *bufio.Writer, sub *events.Sub, reset bool) {
	var b []byte
	if reset {
		b = appendReset(b, sub, "the resume point is older than the events this server keeps; refetch and continue")
	} else {
		b = append(b, ": connected\n\n"...)
	}
	if !writeFlush(w, b) {
		return
	}
	keepalive := time.NewTicker(s.cfg.EventsKeepalive)
	defer keepalive.Stop()
	for {
		items, wait, lagged := sub.Next(eventsBatch)
		b = b[:0]
		if lagged {
			b = appendReset(b, sub, "this stream fell behind the events this server keeps; refetch and continue")
		}
		for i := range items {
			b = appendEventFrame(b, &items[i])
		}
		if len(b) > 0 && !writeFlush(w, b) {
			return
		}
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-keepalive.C:
			if !writeFlush(w, []byte(": keepalive\n\n")) {
				return
			}
		case <-s.closed:
			return
		}
	}
}

func writeFlush(w *bufio.Writer, b []byte) bool {
	if _, err := w.Write(b); err != nil {
		return false
	}
	return w.Flush() == nil
}

func appendReset(b []byte, sub *events.Sub, reason string) []byte {
	b = append(b, "id: "...)
	b = append(b, sub.Cursor().Encode()...)
	b = append(b, "\nevent: reset\ndata: {\"reason\":"...)
	b = appendString(b, reason)
	return append(b, "}\n\n"...)
}

// appendEventFrame renders one SSE frame: id, event and one data line of
// JSON (appendString escapes newlines, so the JSON is one line).
func appendEventFrame(b []byte, it *events.Item) []byte {
	e := &it.Event
	b = append(b, "id: "...)
	b = append(b, it.Cursor...)
	b = append(b, "\nevent: job\ndata: {\"type\":"...)
	b = appendString(b, e.Type.String())
	b = append(b, `,"job_id":`...)
	b = appendString(b, e.JobID)
	b = append(b, `,"queue":`...)
	b = appendString(b, e.Queue)
	b = append(b, `,"state":`...)
	b = appendString(b, e.State.String())
	b = append(b, `,"attempt":`...)
	b = appendInt(b, int64(e.Attempt))
	b = append(b, `,"at":`...)
	b = appendTime(b, e.At)
	if e.WorkerID != "" {
		b = append(b, `,"worker_id":`...)
		b = appendString(b, e.WorkerID)
	}
	if e.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, e.Error)
	}
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, e.Reason)
	}
	if len(e.Progress) > 0 {
		b = append(b, `,"progress":`...)
		// One line: a data line must not hold a newline.
		var buf bytes.Buffer
		if json.Compact(&buf, e.Progress) == nil {
			b = append(b, buf.Bytes()...)
		} else {
			b = append(b, "null"...)
		}
	}
	if e.DueAt != 0 {
		key := `,"next_attempt_at":`
		if e.Type == statemachine.EventScheduled {
			key = `,"scheduled_at":`
		}
		b = append(b, key...)
		b = appendTime(b, e.DueAt)
	}
	if e.FromQueue != "" {
		b = append(b, `,"from_queue":`...)
		b = appendString(b, e.FromQueue)
	}
	if e.MovedTo != "" {
		b = append(b, `,"moved_to":`...)
		b = appendString(b, e.MovedTo)
	}
	return append(b, "}\n\n"...)
}
