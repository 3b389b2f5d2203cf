package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/internal/membudget"
)

// rawRequest writes a POST's headers (and body, when given) on a new
// connection and returns it with a reader of its answers; a negative
// length sends no Content-Length.
func rawRequest(t *testing.T, addr, path string, length int, extra string, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	if length >= 0 {
		extra = fmt.Sprintf("Content-Length: %d\r\n", length) + extra
	}
	_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n%s", path, extra, body)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	return c, bufio.NewReader(c)
}

func readAnswer(t *testing.T, r *bufio.Reader) (*http.Response, map[string]string) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	var m map[string]string
	_ = json.Unmarshal(b, &m)
	return resp, m
}

func enqueueBody(payload int) string {
	return `{"queue":"memory-test","payload":"` + strings.Repeat("x", payload) + `"}`
}

// TestBodiesWithinMemoryBudget: request bodies are reserved against the
// memory budget before they are read. A write that does not fit gets 429
// overloaded with Retry-After without its body being read (the answer
// comes back before the body is sent); a body the budget could never hold
// is a 413; reads still work; every way a request ends (answered, body cut
// off, refused after asking for 100 Continue) gives its bytes back, and
// the same write then succeeds. While the process is measured over its
// budget, larger writes are refused too.
func TestBodiesWithinMemoryBudget(t *testing.T) {
	const pool = 256 << 10
	b := membudget.New(membudget.Plan{Total: 1 << 30, Pool: pool})
	acct := b.Account("test_request_bodies", pool)
	srv, addr := frontServer(t, Config{Memory: acct}, testEngine)
	held := func(n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return srv.bodies.used() == n }, 10*time.Second, time.Millisecond)
	}

	// A client sends the headers of a 200 KiB body and half of it: the
	// reservation is held while the server waits for the rest.
	big := enqueueBody(200 << 10)
	slow, slowR := rawRequest(t, addr, "/api/v1/enqueue", len(big), "", big[:len(big)/2])
	held(int64(len(big)))

	// A 100 KiB write does not fit: refused from its headers alone.
	small := enqueueBody(100 << 10)
	_, r := rawRequest(t, addr, "/api/v1/enqueue", len(small), "", "")
	resp, body := readAnswer(t, r)
	require.Equal(t, 429, resp.StatusCode)
	require.Equal(t, "overloaded", body["code"])
	require.Contains(t, body["error"], "--max-memory")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))

	// The same with "Expect: 100-continue": the refusal instead of 100.
	_, r = rawRequest(t, addr, "/api/v1/enqueue", len(small), "Expect: 100-continue\r\n", "")
	resp, body = readAnswer(t, r)
	require.Equal(t, 429, resp.StatusCode)
	require.Equal(t, "overloaded", body["code"])

	// A client that sends its whole body at once (net/http) reads the
	// refusal: the server drops the body it does not read instead of
	// resetting the connection.
	for range 3 {
		resp, err := httpc.Post("http://"+addr+"/api/v1/enqueue", "application/json", strings.NewReader(enqueueBody(pool-2<<10)))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 429, resp.StatusCode)
		resp, err = httpc.Post("http://"+addr+"/api/v1/enqueue", "application/json", strings.NewReader(enqueueBody(8<<20)))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 413, resp.StatusCode)
	}

	// A body larger than the whole budget will never fit: 413.
	_, r = rawRequest(t, addr, "/api/v1/enqueue", pool+1, "", "")
	resp, body = readAnswer(t, r)
	require.Equal(t, 413, resp.StatusCode)
	require.Equal(t, "payload_too_large", body["code"])

	// Reads still work: a GET, and a search's small body.
	hr, err := httpc.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	hr.Body.Close()
	require.Equal(t, 200, hr.StatusCode)
	_, r = rawRequest(t, addr, "/api/v1/jobs/search", 2, "", "{}")
	resp, body = readAnswer(t, r)
	require.NotEqual(t, 429, resp.StatusCode, body)
	held(int64(len(big)))

	// The slow request completes: its bytes come back, and the refused
	// write now goes through.
	_, err = io.WriteString(slow, big[len(big)/2:])
	require.NoError(t, err)
	resp, body = readAnswer(t, slowR)
	require.Equal(t, 201, resp.StatusCode, body)
	held(0)
	_, r = rawRequest(t, addr, "/api/v1/enqueue", len(small), "", small)
	resp, body = readAnswer(t, r)
	require.Equal(t, 201, resp.StatusCode, body)
	held(0)

	// A client that asked for 100 Continue and went away, and one whose
	// body was cut off: both give their reservations back.
	c, _ := rawRequest(t, addr, "/api/v1/enqueue", len(big), "Expect: 100-continue\r\n", "")
	held(int64(len(big)))
	c.Close()
	held(0)
	c, _ = rawRequest(t, addr, "/api/v1/enqueue", len(big), "", big[:1000])
	held(int64(len(big)))
	c.Close()
	held(0)

	// A chunked body reserves the most it may be (here the whole
	// budget), and is held to that.
	c, r = rawRequest(t, addr, "/api/v1/enqueue", -1, "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(small), small))
	held(pool)
	_, err = io.WriteString(c, "0\r\n\r\n")
	require.NoError(t, err)
	resp, body = readAnswer(t, r)
	require.Equal(t, 201, resp.StatusCode, body)
	held(0)
	c, r = rawRequest(t, addr, "/api/v1/enqueue", -1, "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", pool+1, strings.Repeat(" ", pool+1)))
	resp, body = readAnswer(t, r)
	require.Equal(t, 413, resp.StatusCode, body)
	c.Close()
	held(0)

	// While the process's measured memory is over the budget, a write
	// with a body over OverBudgetBodyBytes is refused; a small one (what
	// drains queues) still goes through; once under, both do.
	measure := func(resident int64) {
		stop := make(chan struct{})
		close(stop) // one measure, then return
		b.Watch(membudget.WatchConfig{Resident: func() int64 { return resident }, Reclaimable: func() int64 { return 0 }, Release: func() {}}, stop)
	}
	post := func(body string) int {
		_, r := rawRequest(t, addr, "/api/v1/enqueue", len(body), "", body)
		resp, _ := readAnswer(t, r)
		return resp.StatusCode
	}
	measure(2 << 30)
	require.True(t, acct.Over())
	require.Equal(t, 429, post(enqueueBody(OverBudgetBodyBytes)))
	require.Equal(t, 201, post(enqueueBody(100)))
	measure(100 << 20)
	require.False(t, acct.Over())
	require.Equal(t, 201, post(enqueueBody(OverBudgetBodyBytes)))
	held(0)
}
