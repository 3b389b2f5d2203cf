package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/peer"
)

// TestSearchPartReadsItsNodesWrites: a part of another node's search
// (?shards=, from a peer) waits for this node's mirror to hold what its
// shards applied, as a whole search does: the node that asked waited only
// for its own mirror, and a write it answered for these shards was applied
// here. With a flush window of a minute, nothing but the wait writes the
// job into the mirror before the part is answered.
func TestSearchPartReadsItsNodesWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a node")
	}
	url := openTestNodeFlush(t, 1, time.Minute)
	code, body := do(t, "POST", url+"/api/v1/enqueue", map[string]any{"queue": "part-rw", "payload": map[string]int{"n": 1}})
	require.Equal(t, 201, code, string(body))
	var enq struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal(body, &enq))

	req, err := http.NewRequest("POST", url+"/api/v1/jobs/search?shards=0", strings.NewReader(`{"limit":10}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(peer.HopHeader, "1")
	resp, err := nodeHTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, string(raw))
	var part peer.SearchAnswer
	require.NoError(t, json.Unmarshal(raw, &part, json.RejectUnknownMembers(false)))
	require.Equal(t, 1, part.Total, "the part missed the job its node had applied")
	require.False(t, part.Stale)
	require.Len(t, part.Keys, 1)
	require.Equal(t, enq.JobID, part.Keys[0].ID)
}
