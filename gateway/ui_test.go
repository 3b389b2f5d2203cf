package gateway

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUI(t *testing.T) {
	t.Parallel()
	client := &http.Client{
		Transport:     &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	get := func(t *testing.T, path string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest("GET", baseURL+path, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, b
	}

	t.Run("redirects", func(t *testing.T) {
		for _, p := range []string{"/", "/ui"} {
			res, _ := get(t, p)
			require.Equal(t, http.StatusFound, res.StatusCode, p)
			require.Equal(t, "/ui/", res.Header.Get("Location"), p)
		}
	})

	res, index := get(t, "/ui/")
	require.Equal(t, 200, res.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", res.Header.Get("Cache-Control"))
	require.Contains(t, string(index), `<div id="app">`)
	etag := res.Header.Get("ETag")
	require.NotEmpty(t, etag)

	t.Run("every UI response carries the security headers", func(t *testing.T) {
		// The policy allows index.html's inline theme script by its hash,
		// and no other inline script.
		m := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindSubmatch(index)
		require.NotNil(t, m, "index.html has its inline theme script")
		sum := sha256.Sum256(m[1])
		hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		asset := regexp.MustCompile(`/ui/assets/[^"]+\.js`).Find(index)
		require.NotNil(t, asset)
		for _, p := range []string{"/", "/ui", "/ui/", "/ui/queues/emails.send", string(asset), "/ui/assets/nope.js"} {
			res, _ := get(t, p)
			csp := res.Header.Get("Content-Security-Policy")
			require.Contains(t, csp, "default-src 'self'", p)
			require.Contains(t, csp, "script-src 'self' "+hash+";", p)
			require.NotContains(t, strings.Split(strings.Split(csp, "script-src")[1], ";")[0], "unsafe", p)
			require.Contains(t, csp, "frame-ancestors 'none'", p)
			require.Contains(t, csp, "object-src 'none'", p)
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), p)
			require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), p)
			require.Equal(t, "same-origin", res.Header.Get("Referrer-Policy"), p)
		}
	})

	t.Run("client-side routes get index.html", func(t *testing.T) {
		for _, p := range []string{"/ui/queues/emails.send", "/ui/jobs/job_2_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V", "/ui/dead", "/ui/jobs"} {
			res, b := get(t, p+"?state=dead")
			require.Equal(t, 200, res.StatusCode, p)
			require.Equal(t, index, b, p)
			require.Equal(t, "no-cache", res.Header.Get("Cache-Control"), p)
		}
	})

	t.Run("index revalidates with its ETag", func(t *testing.T) {
		res, b := get(t, "/ui/", "If-None-Match", etag)
		require.Equal(t, http.StatusNotModified, res.StatusCode)
		require.Empty(t, b)
	})

	t.Run("hashed assets are immutable and gzipped on request", func(t *testing.T) {
		m := regexp.MustCompile(`/ui/assets/[^"]+\.js`).FindString(string(index))
		require.NotEmpty(t, m, "index.html names its script")
		res, plain := get(t, m)
		require.Equal(t, 200, res.StatusCode)
		require.Equal(t, "public, max-age=31536000, immutable", res.Header.Get("Cache-Control"))
		require.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript"), res.Header.Get("Content-Type"))
		require.Empty(t, res.Header.Get("Content-Encoding"))
		res, gz := get(t, m, "Accept-Encoding", "gzip, br")
		require.Equal(t, "gzip", res.Header.Get("Content-Encoding"))
		require.Equal(t, "Accept-Encoding", res.Header.Get("Vary"))
		require.Less(t, len(gz), len(plain)/2)
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		require.NoError(t, err)
		un, err := io.ReadAll(zr)
		require.NoError(t, err)
		require.Equal(t, plain, un)
	})

	t.Run("missing files are 404, not index.html", func(t *testing.T) {
		for _, p := range []string{"/ui/assets/nope.js", "/ui/assets/", "/ui/favicon.png", "/ui/robots.txt"} {
			res, b := get(t, p)
			require.Equal(t, 404, res.StatusCode, p)
			require.Contains(t, string(b), `"code":"not_found"`, p)
		}
	})

	t.Run("path tricks stay inside the UI", func(t *testing.T) {
		res, b := get(t, "/ui/../../etc/passwd")
		require.NotContains(t, string(b), "root:")
		require.NotEqual(t, 500, res.StatusCode)
	})

	t.Run("API 404s are unchanged", func(t *testing.T) {
		res, b := get(t, "/api/v1/nope")
		require.Equal(t, 404, res.StatusCode)
		require.Contains(t, string(b), `"code":"not_found"`)
		res, _ = get(t, "/uix")
		require.Equal(t, 404, res.StatusCode)
	})
}
