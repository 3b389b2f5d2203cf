package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/router"
)

// Waiting on another node's queues without claiming: a fetch over queues
// on several nodes long-polls each other node here, all at once and
// beside its own signals, and claims (a timeout-0 Fetch) only from the
// source that says it has work, for what is still missing.
//
//	POST /internal/v1/wait   body {"queues": [stored names]}
//	                         TimeoutHeader: how long to wait (ms)
//	200 {"ready": true}      a queue has fetchable jobs now
//	204                      none within the wait (or the node is closing)
//	503 + NotHostedHeader    a queue's shard is not hosted here

// WaitPath is the node-to-node wait route.
const WaitPath = "/internal/v1/wait"

// remoteWaitMax bounds one wait on another node: a longer long-poll asks
// again. It also bounds how long a wait the caller gave up on (the fetch
// was served by another source) lingers on the node it asked.
const remoteWaitMax = 5 * time.Second

// Signals is this node's queue signals (shard/signals.go), as the wait
// route reads them.
type Signals interface {
	// Watch returns a channel closed the next time the queue gains
	// fetchable jobs; take it before checking Fetchable.
	Watch(queue string) <-chan struct{}
	Fetchable(queue string) bool
	// ThrottledUntil is when a throttled queue may hand out jobs again
	// (0: not throttled); nothing signals that moment.
	ThrottledUntil(queue string) int64
}

type waitRequest struct {
	Queues []string `json:"queues"`
}

// Wait serves POST /internal/v1/wait: it answers once one of the queues
// (stored names, each on a shard hosted here) has fetchable jobs, or when
// the caller's wait (TimeoutHeader, at most the request timeout) ends. It
// claims nothing.
func (h *Handlers) Wait(ctx *fasthttp.RequestCtx) {
	var req waitRequest
	if err := json.Unmarshal(ctx.PostBody(), &req, json.RejectUnknownMembers(true)); err != nil {
		h.fail(ctx, invalid("cannot decode the wait: %v", err))
		return
	}
	if len(req.Queues) == 0 || len(req.Queues) > h.check.lim.FetchQueues {
		h.fail(ctx, invalid("a wait names 1–%d queues, not %d", h.check.lim.FetchQueues, len(req.Queues)))
		return
	}
	for _, q := range req.Queues {
		if err := router.ValidateStoredQueue(q); err != nil {
			h.fail(ctx, invalid("queue %q: %v", q, err))
			return
		}
	}
	for _, q := range req.Queues {
		if h.refuseNotHosted(ctx, h.check.rt.ShardForQueue(q)) {
			return
		}
	}
	if h.waitReady(req.Queues, time.Now().Add(h.callerTimeout(ctx))) {
		ctx.SetStatusCode(200)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"ready":true}`)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// waitReady waits until one of queues is fetchable (true), deadline
// passes or the node closes (false).
func (h *Handlers) waitReady(queues []string, deadline time.Time) bool {
	cases := make([]reflect.SelectCase, 2, len(queues)+2)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.closed)}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}
	for {
		cases = cases[:2]
		for _, q := range queues { // watch before checking: no wake-up is lost
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.local.Watch(q))})
		}
		var until int64
		for _, q := range queues {
			if h.local.Fetchable(q) {
				return true
			}
			if t := h.local.ThrottledUntil(q); t > 0 && (until == 0 || t < until) {
				until = t
			}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return false
		}
		if until > 0 {
			// A throttle window frees up then; nothing will signal it.
			wait = min(wait, max(time.Until(time.Unix(0, until)), time.Millisecond))
		}
		timer.Reset(wait) // since Go 1.23 a Reset timer never delivers a stale tick
		if chosen, _, _ := reflect.Select(cases); chosen == 0 {
			return false
		}
	}
}

// newWaitClient is the client of waits (net/http: a wait the fetch no
// longer needs is cancelled through its context, closing its connection).
func newWaitClient(tc *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		TLSClientConfig:     tc,
	}}
}

// WaitReady long-polls the first of addrs that hosts queues (stored
// names) until one of them has fetchable jobs (true) or d passes (false).
// A node that cannot be dialled or no longer hosts the queues is skipped.
// It claims nothing.
func (c *Client) WaitReady(ctx context.Context, addrs []string, queues []string, d time.Duration) (bool, error) {
	body, err := json.Marshal(waitRequest{Queues: queues})
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+c.cfg.RequestTimeout)
	defer cancel()
	last := errNoTarget
	for _, addr := range addrs {
		req, err := http.NewRequestWithContext(ctx, "POST", c.URL(addr, WaitPath), bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HopHeader, "1")
		req.Header.Set(TimeoutHeader, strconv.FormatInt(max(d.Milliseconds(), 1), 10))
		if c.cfg.Secret != "" {
			req.Header.Set(SecretHeader, c.cfg.Secret)
		}
		resp, err := c.waits.Do(req)
		if err != nil {
			if DialFailed(err) {
				last = err
				continue
			}
			return false, err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		switch {
		case resp.StatusCode == 200:
			return true, nil
		case resp.StatusCode == fasthttp.StatusNoContent:
			return false, nil
		case resp.Header.Get(NotHostedHeader) != "":
			last = errors.New(addr + " does not host the queues' shards")
		default:
			return false, fmt.Errorf("waiting on %s: %d %s", addr, resp.StatusCode, bytes.TrimSpace(b))
		}
	}
	return false, last
}
