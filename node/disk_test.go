package node

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway"
)

// TestNodeFreeDiskGuard: a real node whose free-space probe a test
// controls. Below --min-free-disk, enqueue, batch enqueue and schedule
// creation answer 507 insufficient_storage (with Retry-After) and store
// nothing, while fetches, acks, fails, deletes and reads work and
// /metrics shows the free bytes and the floor; once space is freed,
// writes are taken again, and every job acknowledged before, during and
// after is where its last answer left it.
func TestNodeFreeDiskGuard(t *testing.T) {
	var free atomic.Uint64
	free.Store(10 << 30)
	cfg := testConfig(t, t.TempDir())
	cfg.Gateway.FreeDisk = func() (uint64, uint64, error) { return free.Load(), 100 << 30, nil }
	cfg.Gateway.MinFreeDisk = gateway.DiskFloor{Bytes: 2 << 30, Percent: 5} // 2 GiB of 100
	cfg.Gateway.DiskCheckInterval = -1                                      // every write asks the probe
	n, err := Open(context.Background(), cfg)
	require.NoError(t, err)
	go func() { _ = n.Serve() }()
	defer func() { require.NoError(t, n.Shutdown(context.Background())) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	url := "http://" + n.Addr()
	do := func(method, path, body string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b), resp.Header
	}
	enqueue := func() string {
		t.Helper()
		code, body, _ := do("POST", "/api/v1/enqueue", `{"queue":"diskq","payload":{"n":1}}`)
		require.Equal(t, 201, code, body)
		var e struct {
			JobID string `json:"job_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e))
		return e.JobID
	}
	fetch := func() string {
		t.Helper()
		code, body, _ := do("POST", "/api/v1/fetch", `{"queues":["diskq"],"worker_id":"w","timeout":0}`)
		require.Equal(t, 200, code, body)
		var f struct {
			JobID string `json:"job_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &f))
		return f.JobID
	}
	state := func(id string) string {
		t.Helper()
		code, body, _ := do("GET", "/api/v1/jobs/"+id, "")
		require.Equal(t, 200, code, body)
		var j struct{ State string }
		require.NoError(t, json.Unmarshal([]byte(body), &j))
		return j.State
	}
	pending := func() int64 {
		t.Helper()
		code, body, _ := do("GET", "/api/v1/queues", "")
		require.Equal(t, 200, code, body)
		var qs struct {
			Queues []struct {
				Name    string
				Pending int64
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &qs))
		for _, q := range qs.Queues {
			if q.Name == "diskq" {
				return q.Pending
			}
		}
		return 0
	}
	metric := func(name string) string {
		t.Helper()
		code, body, _ := do("GET", "/api/v1/metrics", "")
		require.Equal(t, 200, code)
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		t.Fatalf("no %s in /metrics", name)
		return ""
	}

	// Above the floor: writes are taken.
	toAck, toFail, toDelete := enqueue(), enqueue(), enqueue()
	require.Equal(t, toAck, fetch())
	require.Equal(t, toFail, fetch())
	require.Equal(t, "10737418240", metric("corvo_disk_free_bytes"))
	require.Equal(t, "2147483648", metric("corvo_disk_min_free_bytes"))

	// Below it: what adds data is refused, and stores nothing.
	free.Store(1 << 30)
	before := pending()
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/api/v1/enqueue", `{"queue":"diskq","payload":{"n":2}}`},
		{"POST", "/api/v1/enqueue/batch", `{"jobs":[{"queue":"diskq","payload":{}},{"queue":"diskq","payload":{}}]}`},
		{"POST", "/api/v1/schedules", `{"name":"disk-sched","queue":"diskq","cron":"0 9 * * *"}`},
		{"POST", "/api/v1/jobs/" + toDelete + "/move", `{"queue":"diskq2"}`},
	} {
		code, body, h := do(w.method, w.path, w.body)
		require.Equal(t, 507, code, "%s %s: %s", w.method, w.path, body)
		require.Contains(t, body, `"code":"insufficient_storage"`)
		require.Contains(t, body, "1.0 GiB free, below its --min-free-disk floor of 2.0 GiB")
		require.Equal(t, "30", h.Get("Retry-After"))
	}
	require.Equal(t, before, pending(), "a refused write stored nothing")
	code, body, _ := do("GET", "/api/v1/schedules", "")
	require.Equal(t, 200, code)
	require.NotContains(t, body, "disk-sched")
	require.Equal(t, "1073741824", metric("corvo_disk_free_bytes"))
	require.NotEqual(t, "0", metric("corvo_disk_writes_refused_total"))

	// What finishes or frees work goes on, and so do reads.
	code, body, _ = do("POST", "/api/v1/ack/"+toAck, `{"result":{"ok":true}}`)
	require.Equal(t, 200, code, body)
	code, body, _ = do("POST", "/api/v1/fail/"+toFail, `{"error":"boom"}`)
	require.Equal(t, 200, code, body)
	code, body, _ = do("DELETE", "/api/v1/jobs/"+toDelete, "")
	require.Equal(t, 200, code, body)
	require.Equal(t, "completed", state(toAck))
	require.Contains(t, []string{"retrying", "pending"}, state(toFail))
	code, _, _ = do("GET", "/api/v1/jobs/"+toDelete, "")
	require.Equal(t, 404, code, "deleted")
	code, body, _ = do("POST", "/api/v1/jobs/search", `{"queue":"diskq"}`)
	require.Equal(t, 200, code, body)

	// Space freed: writes are taken again, at once.
	free.Store(3 << 30)
	after := enqueue()
	require.Equal(t, "pending", state(after))
	require.Equal(t, "completed", state(toAck), "nothing acknowledged was lost")
	code, body, _ = do("POST", "/api/v1/schedules", `{"name":"disk-sched","queue":"diskq","cron":"0 9 * * *"}`)
	require.Equal(t, 201, code, body)
}

// TestVolumeSpace: the real probe reads the data dir's volume.
func TestVolumeSpace(t *testing.T) {
	free, total, err := volumeSpace(t.TempDir())()
	require.NoError(t, err)
	require.Positive(t, total)
	require.LessOrEqual(t, free, total)
	_, _, err = volumeSpace("/nonexistent/corvo")()
	require.ErrorContains(t, err, "statfs")
}
