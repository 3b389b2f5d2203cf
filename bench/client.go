package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	corvo "github.com/corvohq/corvo/sdk/go"
)

const (
	// requestTimeout bounds every non-long-poll request.
	requestTimeout = 30 * time.Second
	// defaultRetryAfter is used when a 429 carries no usable Retry-After.
	defaultRetryAfter = 100 * time.Millisecond
	// maxRetryAfter caps absurd Retry-After values.
	maxRetryAfter = time.Minute
)

// httpClient is a keep-alive fasthttp client bound to one Corvo server.
type httpClient struct {
	hc   *fasthttp.HostClient
	base string // scheme://host[:port][/prefix], without trailing slash
	auth string // the Authorization header's value; "" sends none
}

// newHTTPClient creates a client for rawURL able to hold conns concurrent
// requests, sending apiKey (if any) as a Bearer token.
func newHTTPClient(rawURL string, conns int, apiKey string, tlsConfig *tls.Config) (*httpClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bench: parse url: %w", err)
	}
	isTLS := u.Scheme == "https"
	addr := u.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if isTLS {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	hc := &fasthttp.HostClient{
		Addr:                addr,
		Name:                "corvo-bench",
		IsTLS:               isTLS,
		TLSConfig:           tlsConfig,
		MaxConns:            conns,
		MaxConnWaitTimeout:  requestTimeout,
		MaxIdleConnDuration: time.Minute,
		RetryIfErr:          retryStaleConn,
	}
	base := u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
	c := &httpClient{hc: hc, base: base}
	if apiKey != "" {
		c.auth = "Bearer " + apiKey
	}
	return c, nil
}

// retryStaleConn retries a request once when it failed because a reused
// keep-alive connection had been closed by the server. Timeouts and other
// errors are not retried, so a request is never sent twice after the server
// may have processed it.
func retryStaleConn(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	stale := errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	return false, stale && attempts < 2
}

// close releases idle keep-alive connections.
func (c *httpClient) close() { c.hc.CloseIdleConnections() }

// statusError is a non-2xx (other than 429) answer from the server.
type statusError struct {
	Status int
	Code   string
	Msg    string
}

func (e *statusError) Error() string {
	switch {
	case e.Code != "" && e.Msg != "":
		return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Msg)
	case e.Msg != "":
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Msg)
	default:
		return fmt.Sprintf("HTTP %d", e.Status)
	}
}

func newStatusError(status int, body []byte) *statusError {
	var wire corvo.ErrorBody
	e := &statusError{Status: status}
	if json.Unmarshal(body, &wire) == nil {
		e.Code, e.Msg = wire.Code, wire.Error
	} else if len(body) > 0 {
		e.Msg = truncate(string(body), 200)
	}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// caller performs requests for a single goroutine, reusing its request and
// response objects. It is not safe for concurrent use.
type caller struct {
	client  *httpClient
	ctr     *counters
	req     *fasthttp.Request
	resp    *fasthttp.Response
	scratch []byte // reusable request body buffer for callers
	uri     []byte // reusable request URI buffer
}

func newCaller(c *httpClient, ctr *counters) *caller {
	return &caller{client: c, ctr: ctr, req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
}

func (c *caller) release() {
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
}

// post sends a JSON POST to path. A 429 answer is counted as throttled and
// retried after its Retry-After delay until ctx is done. It returns the final
// status, the response body (valid until the next call) and the latency of
// the final attempt. Any status outside 2xx yields a *statusError.
func (c *caller) post(ctx context.Context, path string, body []byte, timeout time.Duration) (int, []byte, time.Duration, error) {
	for {
		status, lat, err := c.once(path, body, timeout)
		if err != nil {
			return 0, nil, lat, fmt.Errorf("POST %s: %w", path, err)
		}
		if status == fasthttp.StatusTooManyRequests {
			c.ctr.throttled.Add(1)
			wait := parseRetryAfter(c.resp.Header.Peek("Retry-After"), time.Now())
			if err := sleepCtx(ctx, wait); err != nil {
				return status, nil, lat, err
			}
			continue
		}
		respBody := c.resp.Body()
		if status < 200 || status > 299 {
			return status, respBody, lat, fmt.Errorf("POST %s: %w", path, newStatusError(status, respBody))
		}
		return status, respBody, lat, nil
	}
}

// once performs a single attempt and returns its status and latency.
func (c *caller) once(path string, body []byte, timeout time.Duration) (int, time.Duration, error) {
	c.req.Reset()
	c.resp.Reset()
	c.uri = append(append(c.uri[:0], c.client.base...), path...)
	c.req.SetRequestURIBytes(c.uri)
	c.req.Header.SetMethod(fasthttp.MethodPost)
	c.req.Header.SetContentType("application/json")
	if c.client.auth != "" {
		c.req.Header.Set(fasthttp.HeaderAuthorization, c.client.auth)
	}
	c.req.SetBodyRaw(body)
	start := time.Now()
	err := c.client.hc.DoTimeout(c.req, c.resp, timeout)
	lat := time.Since(start)
	if err != nil {
		return 0, lat, err
	}
	return c.resp.StatusCode(), lat, nil
}

// pathHealth answers without a key and without touching the store.
const pathHealth = "/healthz"

// warmUp opens the caller's connection with a GET /healthz, so that a
// later timed request does not pay for connecting. Its outcome does not
// matter: a failing server shows in the timed requests.
func (c *caller) warmUp() {
	c.req.Reset()
	c.resp.Reset()
	c.req.SetRequestURI(c.client.base + pathHealth)
	c.req.Header.SetMethod(fasthttp.MethodGet)
	_ = c.client.hc.DoTimeout(c.req, c.resp, requestTimeout)
}

// parseRetryAfter interprets a Retry-After header value: seconds (integer
// or fractional) or an HTTP date. Missing or invalid values yield
// defaultRetryAfter; the result is capped at maxRetryAfter.
func parseRetryAfter(v []byte, now time.Time) time.Duration {
	s := strings.TrimSpace(string(v))
	if s == "" {
		return defaultRetryAfter
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return defaultRetryAfter
		}
		if f >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		return time.Duration(f * float64(time.Second))
	}
	if t, err := http.ParseTime(s); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return defaultRetryAfter
}

// sleepCtx sleeps for d or until ctx is done, returning ctx.Err() in the
// latter case.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
