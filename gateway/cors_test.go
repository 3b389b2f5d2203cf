package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// rawCall sends body as is with the given headers (a browser's request,
// or curl's) and returns status, answer headers and body.
func rawCall(t *testing.T, method, url, body string, headers map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(out)
}

// TestBrowserContentType: POST and PUT on /api/ need a JSON content type,
// even without a body (pause); a text/plain form post — what a page of
// any origin can send without a preflight — changes nothing.
func TestBrowserContentType(t *testing.T) {
	t.Parallel()
	q := uq("ctype")
	plain := map[string]string{"Content-Type": "text/plain"}

	code, _, body := rawCall(t, "POST", baseURL+"/api/v1/enqueue", `{"queue":"`+q+`"}`, plain)
	require.Equal(t, 415, code, body)
	require.Contains(t, body, `"code":"unsupported_media_type"`)
	_, ok := fetchOne(t, 0.2, q)
	require.False(t, ok, "a text/plain enqueue must enqueue nothing")

	id := enqueue(t, map[string]any{"queue": q})
	for _, h := range []map[string]string{plain, nil, {"Content-Type": "application/jsonx"}} {
		code, _, body = rawCall(t, "POST", baseURL+"/api/v1/queues/"+q+"/pause", "", h)
		require.Equal(t, 415, code, body)
		require.Contains(t, body, `"code":"unsupported_media_type"`)
	}
	code, _, body = rawCall(t, "POST", baseURL+"/api/v1/jobs/bulk", `{"job_ids":["`+id+`"],"action":"delete"}`, plain)
	require.Equal(t, 415, code, body)
	code, _, body = rawCall(t, "PUT", baseURL+"/api/v1/schedules/s-"+q, `{"name":"`+q+`","queue":"`+q+`","cron":"* * * * *"}`, plain)
	require.Equal(t, 415, code, body)
	code, _, body = rawCall(t, "POST", baseURL+"/api/v1/jobs/"+id+"/cancel", "", nil)
	require.Equal(t, 415, code, body)
	require.Equal(t, "pending", getJob(t, id).State, "nothing changed")
	code, body2 := call(t, "GET", "/api/v1/schedules", nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(body2), q)

	// The media type is compared without case; parameters are allowed.
	code, _, body = rawCall(t, "POST", baseURL+"/api/v1/queues/"+q+"/pause", "", map[string]string{"Content-Type": "Application/JSON; charset=utf-8"})
	require.Equal(t, 200, code, body)
	// DELETE without a body needs no content type.
	code, _, body = rawCall(t, "DELETE", baseURL+"/api/v1/jobs/"+id, "", nil)
	require.Equal(t, 200, code, body)
}

// TestBrowserCrossOrigin: without --cors-origin, a state-changing request
// from another origin (Origin ≠ Host, or Sec-Fetch-Site: cross-site) is
// refused and changes nothing; the server's own origin and reads pass.
func TestBrowserCrossOrigin(t *testing.T) {
	t.Parallel()
	q := uq("xorigin")
	host := strings.TrimPrefix(baseURL, "http://")
	id := enqueue(t, map[string]any{"queue": q})
	jsonFrom := func(origin string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Origin": origin}
	}

	for _, h := range []map[string]string{
		jsonFrom("http://evil.example"),
		jsonFrom("http://" + host + ".evil.example"),
		jsonFrom("null"),
		{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
	} {
		code, hdr, body := rawCall(t, "POST", baseURL+"/api/v1/queues/"+q+"/pause", "", h)
		require.Equal(t, 403, code, body)
		require.Contains(t, body, `"code":"cross_origin"`)
		require.Empty(t, hdr.Get("Access-Control-Allow-Origin"))
	}
	code, _, body := rawCall(t, "DELETE", baseURL+"/api/v1/jobs/"+id, "", map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, 403, code, body)
	require.Equal(t, "pending", getJob(t, id).State)

	// A preflight from a foreign origin gets no CORS answer.
	code, hdr, _ := rawCall(t, "OPTIONS", baseURL+"/api/v1/queues/"+q+"/pause", "",
		map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
	require.Equal(t, 403, code)
	require.Empty(t, hdr.Get("Access-Control-Allow-Origin"))

	// Reads are not refused (a browser keeps their answers from the page).
	code, _, body = rawCall(t, "GET", baseURL+"/api/v1/jobs/"+id, "", map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, 200, code, body)

	// Nothing was paused: the job is still fetched.
	j, ok := fetchOne(t, 2, q)
	require.True(t, ok)
	require.Equal(t, id, j.JobID)

	// The UI's own requests (Origin = the server's) pass.
	code, _, body = rawCall(t, "POST", baseURL+"/api/v1/queues/"+q+"/pause", "",
		map[string]string{"Content-Type": "application/json", "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, 200, code, body)
}

// TestBrowserCORSOrigins: an origin in Config.CORSOrigins gets preflight
// answers and Access-Control-Allow-Origin, and may change state; the
// content-type rule still holds for it; other origins are still refused.
func TestBrowserCORSOrigins(t *testing.T) {
	t.Parallel()
	const ui = "http://ui.example:8080"
	_, front := frontServer(t, Config{CORSOrigins: []string{ui + "/"}}, testEngine)
	url := "http://" + front
	q := uq("cors")
	enqueue(t, map[string]any{"queue": q})

	code, hdr, body := rawCall(t, "OPTIONS", url+"/api/v1/queues/"+q+"/pause", "",
		map[string]string{"Origin": ui, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
	require.Equal(t, 204, code, body)
	require.Equal(t, ui, hdr.Get("Access-Control-Allow-Origin"))
	require.Contains(t, hdr.Get("Access-Control-Allow-Methods"), "POST")
	for _, h := range []string{"Content-Type", "Authorization", "Last-Event-ID"} {
		require.Contains(t, hdr.Get("Access-Control-Allow-Headers"), h)
	}
	require.Equal(t, corsMaxAge, hdr.Get("Access-Control-Max-Age"))
	require.Equal(t, "Origin", hdr.Get("Vary"))

	code, _, body = rawCall(t, "POST", url+"/api/v1/queues/"+q+"/pause", "", map[string]string{"Origin": ui, "Content-Type": "text/plain"})
	require.Equal(t, 415, code, body)
	code, _, body = rawCall(t, "POST", url+"/api/v1/queues/"+q+"/pause", "", map[string]string{"Origin": "http://other.example", "Content-Type": "application/json"})
	require.Equal(t, 403, code, body)
	code, hdr, body = rawCall(t, "POST", url+"/api/v1/queues/"+q+"/pause", "",
		map[string]string{"Origin": ui, "Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, 200, code, body)
	require.Equal(t, ui, hdr.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "Origin", hdr.Get("Vary"))
	code, hdr, body = rawCall(t, "GET", url+"/api/v1/queues", "", map[string]string{"Origin": ui})
	require.Equal(t, 200, code, body)
	require.Equal(t, ui, hdr.Get("Access-Control-Allow-Origin"))
	qs := mustJSON[struct {
		Queues []struct {
			Name   string `json:"name"`
			Paused bool   `json:"paused"`
		} `json:"queues"`
	}](t, []byte(body)).Queues
	paused := false
	for _, x := range qs {
		paused = paused || (x.Name == q && x.Paused)
	}
	require.True(t, paused, "the allowed origin paused the queue")

	require.NoError(t, CheckCORSOrigins([]string{"*", ui, "https://a.example/"}))
	for _, bad := range []string{"ui.example", "http://", "http://a.example/path", ""} {
		require.Error(t, CheckCORSOrigins([]string{bad}), bad)
	}
}

// TestBrowserRulesThroughForwarding: a same-origin request that a node
// forwards to the node hosting the shard is not taken there for a
// cross-origin one (the receiver's Host is its own address).
func TestBrowserRulesThroughForwarding(t *testing.T) {
	t.Parallel()
	q := uq("corsfwd")
	sh := router.New(4).ShardForQueue(q)
	real := strings.TrimPrefix(baseURL, "http://")
	_, front := frontServer(t, Config{Peer: peerTo(func(int) []string { return []string{real} })}, notHosting{Engine: testEngine, missing: sh})
	code, _, body := rawCall(t, "POST", "http://"+front+"/api/v1/enqueue", `{"queue":"`+q+`"}`,
		map[string]string{"Content-Type": "application/json", "Origin": "http://" + front})
	require.Equal(t, 201, code, body)
}
