package peer

import (
	corvo "github.com/corvohq/corvo/sdk/go"

	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	stdjson "encoding/json"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fasthttp"
)

// The cross-node halves of fetch, search and the event stream, and the
// one-off calls (cluster status, bulk operations, the removal notice):
// each carries one part to one node and brings its answer back. The plans
// and retries over them are in fetchrounds.go, searchplan.go and
// upstreams.go; the gateway merges.

// Fetch claims jobs on the first of addrs that takes body (a fetch with
// timeout 0 over queues of shards that node hosts) before deadline, and
// returns each job's JSON as that node rendered it (nil: none). A node
// that cannot be dialled, or no longer hosts the queues, is skipped; one
// that was reached and failed is not retried elsewhere (it may have
// claimed jobs).
func (c *Client) Fetch(addrs []string, ns string, body []byte, deadline time.Time) ([][]byte, *Error) {
	req, resp, release := c.hopPost("application/json", body)
	defer release()
	setNamespace(&req.Header, ns)
	last := errNoTarget
	for _, addr := range addrs {
		req.SetRequestURI(c.URL(addr, "/api/v1/fetch"))
		if err := c.host(addr).DoDeadline(req, resp, deadline); err != nil {
			last = err
			if DialFailed(err) {
				continue
			}
			return nil, unavailable("fetching from " + addr + " failed (" + err.Error() + ")")
		}
		switch status := resp.StatusCode(); {
		case status == fasthttp.StatusNoContent:
			return nil, nil
		case status == 200:
			var r struct {
				Jobs []stdjson.RawMessage `json:"jobs"`
			}
			if err := stdjson.Unmarshal(resp.Body(), &r); err != nil {
				return nil, &Error{Status: 500, Code: corvo.CodeInternal, Msg: "unreadable fetch answer from " + addr + ": " + err.Error()}
			}
			out := make([][]byte, len(r.Jobs))
			for i := range r.Jobs {
				out[i] = r.Jobs[i]
			}
			return out, nil
		case len(resp.Header.Peek(NotHostedHeader)) > 0:
			last = errors.New(addr + " does not host the queues' shards")
			continue
		default:
			return nil, remoteError(addr, status, resp.Body())
		}
	}
	return nil, unavailable("no node hosting the queues' shards answered: " + last.Error())
}

// SearchAnswer is a node's answer to a part of a search (?shards=): the
// jobs as it rendered them, and each one's keyset position.
type SearchAnswer struct {
	Jobs    []jsontext.Value `json:"jobs"`
	Total   int              `json:"total"`
	HasMore bool             `json:"has_more"`
	Keys    []SearchKey      `json:"keys"`
	// Partial: the node's read deadline cut its search short (its jobs
	// are its matches up to the last one).
	Partial bool `json:"partial"`
	// Stale: the node could not wait for its mirror to hold every write
	// it had applied to these shards.
	Stale bool `json:"stale"`
}

// SearchKey is a search row's keyset position.
type SearchKey struct {
	V     int64  `json:"v"`
	ID    string `json:"id"`
	Queue string `json:"queue"`
}

// Search asks the node at addr for the part of a search (body) over
// shards. Every failure another node might not have (unreachable, 5xx,
// 429, a malformed answer) is a 503; a 4xx is the node's answer to the
// request itself.
func (c *Client) Search(addr, ns string, shards []int, body []byte, deadline time.Time) (*SearchAnswer, *Error) {
	req, resp, release := c.hopPost("application/json", body)
	defer release()
	setNamespace(&req.Header, ns)
	uri := make([]byte, 0, 64)
	uri = append(uri, c.scheme...)
	uri = append(uri, addr...)
	uri = append(uri, "/api/v1/jobs/search?shards="...)
	uri = append(uri, shardList(shards)...)
	req.SetRequestURIBytes(uri)
	if err := c.host(addr).DoDeadline(req, resp, deadline); err != nil {
		return nil, unavailable(err.Error())
	}
	if err := partError(resp); err != nil {
		return nil, err
	}
	var a SearchAnswer
	if err := json.Unmarshal(resp.Body(), &a); err != nil || len(a.Keys) != len(a.Jobs) {
		return nil, unavailable("a malformed answer")
	}
	return &a, nil
}

func shardList(shards []int) string {
	var b strings.Builder
	for i, sh := range shards {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sh))
	}
	return b.String()
}

// newEventsClient is the client of event streams (net/http: a stream is
// read as it comes and cancelled through its context).
func newEventsClient(tc *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		ResponseHeaderTimeout: 5 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       time.Minute,
		DisableCompression:    true,
		TLSClientConfig:       tc,
	}}
}

// Frame is one thing an event stream from another node said.
type Frame struct {
	// Connected: the ": connected {cursor}" comment, ID holding the
	// cursor; else an event or reset frame.
	Connected bool
	ID        string
	Event     string
	Data      []byte
}

// Events reads the event stream of shards on the node at addr (query: the
// filter, "&queue=…&type=…"; from: the resume cursor, "" for live),
// handing each frame to frame in order, until the stream ends, ctx does,
// frame returns false, or it stays silent for idle (its node sends a
// keepalive more often). It always returns why it stopped.
func (c *Client) Events(ctx context.Context, addr, ns string, shards []int, from, query string, idle time.Duration, frame func(Frame) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(idle, cancel)
	defer watchdog.Stop()
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL(addr, "/api/v1/events?shards="+shardList(shards)+query), nil)
	if err != nil {
		return err
	}
	req.Header.Set(HopHeader, "1")
	if c.cfg.Secret != "" {
		req.Header.Set(SecretHeader, c.cfg.Secret)
	}
	setNamespace(req.Header, ns)
	req.Header.Set("Accept", "text/event-stream")
	if from != "" {
		req.Header.Set("Last-Event-ID", from)
	}
	resp, err := c.events.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s answered %d: %s", addr, resp.StatusCode, bytes.TrimSpace(b))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var f Frame
	fields := false
	for sc.Scan() {
		watchdog.Reset(idle)
		line := sc.Bytes()
		if len(line) == 0 {
			if fields && !frame(f) {
				return ctx.Err()
			}
			f, fields = Frame{}, false
			continue
		}
		if line[0] == ':' {
			if cur, ok := bytes.CutPrefix(line, []byte(": connected ")); ok {
				if !frame(Frame{Connected: true, ID: string(cur)}) {
					return ctx.Err()
				}
			}
			continue
		}
		name, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(name) {
		case "id":
			f.ID, fields = string(value), true
		case "event":
			f.Event, fields = string(value), true
		case "data":
			f.Data, fields = append(f.Data[:0:0], value...), true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the stream ended")
}

// Call sends one request to the node at addr, with the cluster
// credential, and returns its answer (status and a copy of the body).
func (c *Client) Call(method, addr, path string, body []byte, timeout time.Duration) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(c.URL(addr, path))
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	c.sign(req)
	if err := c.small.DoTimeout(req, resp, timeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// Reply is one node's 200 answer to AskOthers.
type Reply struct {
	ID   uint64
	Addr string
	Body []byte
}

// AskOthers GETs path from every other live node at once and returns the
// 200 answers (those that failed or answered otherwise are left out).
func (c *Client) AskOthers(path string, timeout time.Duration) []Reply {
	var mu sync.Mutex
	var out []Reply
	var wg sync.WaitGroup
	for _, n := range c.others() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body, err := c.Call("GET", n.HTTPAddr, path, nil, timeout)
			if err == nil && status == 200 {
				mu.Lock()
				out = append(out, Reply{ID: n.ID, Addr: n.HTTPAddr, Body: body})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// partError is a node's non-200 answer to a part of a fan-out: its own
// 4xx (not a 429) as it came, anything else a 503 to plan around.
func partError(resp *fasthttp.Response) *Error {
	code := resp.StatusCode()
	if code == 200 {
		return nil
	}
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	_ = json.Unmarshal(resp.Body(), &e)
	if code >= 400 && code < 500 && code != 429 && e.Code != "" {
		return &Error{Status: code, Code: e.Code, Msg: e.Error}
	}
	return unavailable("status " + strconv.Itoa(code) + ": " + e.Error)
}
