package gateway

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRestoreHasItsOwnBodyLimit: a body over the server's limit is a 413
// on every route but POST /api/v1/restore, which takes up to
// MaxRestoreBytes (this one reaches the handler and is refused as no
// backup); over that, restore is a 413 too.
func TestRestoreHasItsOwnBodyLimit(t *testing.T) {
	_, addr := frontServer(t, Config{MaxBodyBytes: 4 << 10, MaxPayloadBytes: 1 << 10, MaxRestoreBytes: 64 << 10}, testEngine)
	post := func(path string, size int) int {
		t.Helper()
		body := bytes.Repeat([]byte("x"), size)
		req, err := http.NewRequest("POST", "http://"+addr+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 413, post("/api/v1/enqueue", 16<<10))
	require.Equal(t, 413, post("/api/v1/restorex", 16<<10))
	require.Equal(t, 400, post("/api/v1/restore", 16<<10), "restore is held to the server's body limit")
	require.Equal(t, 400, post("/api/v1/restore?into=acme", 16<<10))
	require.Equal(t, 413, post("/api/v1/restore", 128<<10))
}
