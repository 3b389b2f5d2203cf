package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/gateway/events"
	"github.com/corvohq/corvo/peer"
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

// GET /api/v1/events — the cluster's job lifecycle events as Server-Sent
// Events, optionally of some queues, types and shards, resumable with
// Last-Event-ID. The events of the shards this node hosts come from its
// ring; when it does not host every shard the stream needs, the others
// come from streams opened to nodes that do (events_merge.go). A request
// with the hop header is served from the ring only: 503 when this node
// does not host every shard it needs.
func (s *Server) handleEvents(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	var f events.Filter
	rawQueue, rawType := string(args.Peek("queue")), string(args.Peek("type"))
	if rawQueue != "" {
		f.Queues = map[string]bool{}
		for _, q := range strings.Split(rawQueue, ",") {
			if err := router.ValidateQueueName(q); err != nil {
				writeError(ctx, invalid("query \"queue\": %v", err))
				return
			}
			f.Queues[q] = true
		}
	}
	var named []string
	for q := range f.Queues {
		named = append(named, q)
	}
	if !requireQueues(ctx, "?queue=", named...) {
		return
	}
	if f.Namespace = s.searchNamespace(ctx); f.Namespace != "" && f.Queues != nil {
		stored := make(map[string]bool, len(f.Queues))
		for q := range f.Queues {
			stored[router.NamespacedQueue(f.Namespace, q)] = true
		}
		f.Queues = stored
	}
	if s.cfg.Events == nil {
		writeError(ctx, codeUnavailable.err("this server runs without the event stream"))
		return
	}
	if rawType != "" {
		f.Types = map[statemachine.EventType]bool{}
		for _, name := range strings.Split(rawType, ",") {
			t, ok := statemachine.ParseEventType(name)
			if !ok {
				writeError(ctx, invalid("query \"type\": unknown event type %q", name))
				return
			}
			f.Types[t] = true
		}
	}
	n := s.cfg.Events.Shards()
	var only []bool // ?shards=: the stream covers these shards only
	if v := string(args.Peek("shards")); v != "" {
		only = make([]bool, n)
		for _, p := range strings.Split(v, ",") {
			k, err := strconv.Atoi(p)
			if err != nil || k < 0 || k >= n {
				writeError(ctx, invalid("query \"shards\": %q is not a shard of this server (0 to %d)", p, n-1))
				return
			}
			only[k] = true
		}
	}
	f.Shards = s.neededShards(&f, only, n)
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
	// The shards this node would need another node for.
	var remote []int
	for i := 0; i < n; i++ {
		if wanted(f.Shards, i) && !s.hosted(i) {
			remote = append(remote, i)
		}
	}
	if len(remote) > 0 && peer.Forwarded(ctx) {
		writeError(ctx, codeUnavailable.err("shard "+itoa(remote[0])+" is not hosted on this node"))
		return
	}
	if s.subscribers.Add(1) > maxEventSubscribers {
		s.subscribers.Add(-1)
		writeError(ctx, codeUnavailable.err("too many event subscribers"))
		return
	}
	var sub *events.Sub
	var reset bool
	if len(remote) == 0 {
		sub, reset = s.cfg.Events.Subscribe(from, f)
	} else if local := s.localShards(f.Shards, n); local != nil {
		lf := f
		lf.Shards = local
		sub, reset = s.cfg.Events.Subscribe(from, lf)
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	markStream(ctx)
	if len(remote) > 0 {
		m := s.newMerger(n, from, f.Shards, remote, rawQueue, rawType, principal(ctx).Namespace)
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer s.subscribers.Add(-1)
			m.stream(w, sub, reset)
		})
		return
	}
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.subscribers.Add(-1)
		s.streamEvents(w, sub, reset, only != nil, f.Shards)
	})
}

// neededShards is the set of shards whose events the stream may carry
// (nil: every shard): those of ?shards=, and when the filter names queues
// and leaves out "moved" events, only the queues' shards. (A move to a
// queue on another shard is told by the job's old shard, under the new
// queue's name: with "moved" events in, a queue filter needs every shard.)
func (s *Server) neededShards(f *events.Filter, only []bool, n int) []bool {
	need := only
	if f.Queues != nil && f.Types != nil && !f.Types[statemachine.EventMoved] {
		mask := make([]bool, n)
		for q := range f.Queues {
			if sh := s.rt.ShardForQueue(q); sh < n && wanted(only, sh) {
				mask[sh] = true
			}
		}
		need = mask
	}
	return need
}

// wanted reports whether shard sh is in the set (nil: every shard).
func wanted(set []bool, sh int) bool { return set == nil || (sh < len(set) && set[sh]) }

// localShards is the part of the set this node hosts (nil: none).
func (s *Server) localShards(set []bool, n int) []bool {
	var out []bool
	for i := 0; i < n; i++ {
		if wanted(set, i) && s.hosted(i) {
			if out == nil {
				out = make([]bool, n)
			}
			out[i] = true
		}
	}
	return out
}

// streamEvents serves a stream of the shards set (nil: all) from this
// node's ring. A stream restricted to some shards (?shards=, what another
// node's merged stream opens) starts with the comment ": connected
// {cursor}", the position it starts from, so the merging node knows where
// it is even before an event. The stream ends when this node stops
// hosting one of its shards (checked at each keepalive): the client
// resumes elsewhere, or through a merged stream.
func (s *Server) streamEvents(w *bufio.Writer, sub *events.Sub, reset, restricted bool, set []bool) {
	var b []byte
	switch {
	case reset:
		b = appendReset(b, sub.Cursor().Encode(), "the resume point is older than the events this server keeps; refetch and continue")
	case restricted:
		b = append(b, ": connected "...)
		b = append(b, sub.Cursor().Encode()...)
		b = append(b, "\n\n"...)
	default:
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
			b = appendReset(b, sub.Cursor().Encode(), "this stream fell behind the events this server keeps; refetch and continue")
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
			if !s.hostsAll(set) || !writeFlush(w, []byte(": keepalive\n\n")) {
				return
			}
		case <-s.closed:
			return
		}
	}
}

// hostsAll reports whether this node hosts every shard of the set (nil:
// all).
func (s *Server) hostsAll(set []bool) bool {
	for i := 0; i < s.rt.Shards(); i++ {
		if wanted(set, i) && !s.hosted(i) {
			return false
		}
	}
	return true
}

func writeFlush(w *bufio.Writer, b []byte) bool {
	if _, err := w.Write(b); err != nil {
		return false
	}
	return w.Flush() == nil
}

// appendReset renders a reset frame: the stream continues live from the
// cursor id.
func appendReset(b []byte, id, reason string) []byte {
	b = append(b, "id: "...)
	b = append(b, id...)
	b = append(b, "\nevent: reset\ndata: {\"reason\":"...)
	b = appendString(b, reason)
	return append(b, "}\n\n"...)
}

// appendEventFrame renders one SSE frame: id, event and one data line of
// JSON (appendString escapes newlines, so the JSON is one line).
func appendEventFrame(b []byte, it *events.Item) []byte {
	return appendJobFrame(b, it.Cursor, &it.Event)
}

// appendJobFrame renders the frame of event e with the cursor id.
func appendJobFrame(b []byte, id string, e *events.Event) []byte {
	b = append(b, "id: "...)
	b = append(b, id...)
	b = append(b, "\nevent: job\ndata: {\"type\":"...)
	b = appendString(b, e.Type.String())
	b = append(b, `,"job_id":`...)
	b = appendString(b, e.JobID)
	b = append(b, `,"queue":`...)
	b = appendQueueName(b, e.Queue)
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
		b = appendQueueName(b, e.FromQueue)
	}
	if e.MovedTo != "" {
		b = append(b, `,"moved_to":`...)
		b = appendString(b, e.MovedTo)
	}
	return append(b, "}\n\n"...)
}
