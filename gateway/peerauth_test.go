package gateway

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// peerPost posts an octet-stream body to a node-to-node endpoint with the
// cluster secret secret ("" sends none).
func peerPost(url string, body []byte, secret string) (*http.Response, error) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if secret != "" {
		req.Header.Set(ClusterSecretHeader, secret)
	}
	return httpc.Do(req)
}

func peerCall(t *testing.T, url string, body []byte, secret string) (int, string) {
	t.Helper()
	resp, err := peerPost(url, body, secret)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

// TestPeerEndpointsNeedClusterSecret: the internal shard endpoints answer
// 401 without the cluster secret and 403 with a wrong one, and do nothing
// (the attack: one anonymous propose deleted a job); a node configured
// with no secret refuses every caller.
func TestPeerEndpointsNeedClusterSecret(t *testing.T) {
	t.Parallel()
	q := uq("peerauth")
	sh := rt4.ShardForQueue(q)
	id := enqueue(t, map[string]any{"queue": q, "payload": map[string]any{}})
	del := (&statemachine.Entry{Ops: []statemachine.Op{&statemachine.DeleteJobOp{JobID: id}}}).Encode(nil)
	_, read, err := encodeReadQuery(statemachine.GetJobQuery{ID: id})
	require.NoError(t, err)
	srvNone := New(Config{}, testEngine) // no secret at all
	t.Cleanup(func() { _ = srvNone.Shutdown(t.Context()) })
	none := serveOnFreePort(t, srvNone)
	for _, path := range []string{shardPath(sh, "propose"), shardPath(sh, "read")} {
		body := del
		if path == shardPath(sh, "read") {
			body = read
		}
		code, out := peerCall(t, baseURL+path, body, "")
		require.Equal(t, 401, code, out)
		require.Contains(t, out, `"code":"cluster_secret_required"`)
		code, out = peerCall(t, baseURL+path, body, "wrong-secret-wrong-secret-wrong-secret")
		require.Equal(t, 403, code, out)
		require.Contains(t, out, `"code":"cluster_secret_invalid"`)
		code, out = peerCall(t, baseURL+path, body, testClusterSecret[:len(testClusterSecret)-1])
		require.Equal(t, 403, code, "a prefix of the secret is not the secret: %s", out)
		code, out = peerCall(t, "http://"+none+path, body, testClusterSecret)
		require.Equal(t, 403, code, "a node without a secret refuses everyone: %s", out)
	}
	code, out := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code, "the job is still there: %s", out)
	var code2 int
	// With the secret, the same delete is applied.
	code2, out2 := peerCall(t, baseURL+shardPath(sh, "propose"), del, testClusterSecret)
	require.Equal(t, 200, code2, out2)
	code, _ = call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 404, code)
}
