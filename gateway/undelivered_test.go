package gateway

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker that gave up on its long-poll (closed the connection) before a
// job arrived leaves no job leased to nobody: the job the fetch claimed is
// handed back pending, its attempt not counted, and the next fetch gets it
// as a first attempt.
func TestFetchHandsBackJobsOfAClientThatLeft(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/api/v1/fetch", "ack"} {
		q := "gone-" + strings.ReplaceAll(path, "/", "")
		before := undeliveredJobs.Get()
		worker := "gone-" + q
		conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
		require.NoError(t, err)
		body := fmt.Sprintf(`{"queues":[%q],"worker_id":%q,"timeout":5}`, q, worker)
		target := path
		if path == "ack" {
			// An ack that carries the next fetch, long-polling.
			first := enqueue(t, map[string]any{"queue": q + "-first"})
			got, ok := fetchOne(t, 1, q+"-first")
			require.True(t, ok)
			require.Equal(t, first, got.JobID)
			target = "/api/v1/ack/" + first
			body = fmt.Sprintf(`{"fetch":%s}`, body)
		}
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, len(body), body)
		require.NoError(t, err)
		require.NoError(t, conn.Close()) // the worker leaves
		id := enqueue(t, map[string]any{"queue": q, "payload": 1})

		deadline := time.Now().Add(15 * time.Second)
		for undeliveredJobs.Get() == before {
			require.True(t, time.Now().Before(deadline), "%s: the job was never handed back", path)
			time.Sleep(10 * time.Millisecond)
		}
		code, doc := call(t, "GET", "/api/v1/jobs/"+id, nil)
		require.Equal(t, 200, code)
		job := mustJSON[struct {
			State   string `json:"state"`
			Attempt int    `json:"attempt"`
		}](t, doc)
		require.Equal(t, "pending", job.State, "%s: %s", path, doc)
		require.Zero(t, job.Attempt, path)
		got, ok := fetchOne(t, 1, q)
		require.True(t, ok, path)
		require.Equal(t, id, got.JobID)
		require.Equal(t, 1, got.Attempt, "%s: the undelivered claim was not an attempt", path)
	}
}

// A tracked connection's probe tells a client that closed from one that
// is still there (idle, or with its next request sent already, which the
// peek leaves unread), and once made it allocates nothing.
func TestDepartedProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tl := &trackingListener{Listener: ln, conns: map[*trackedConn]struct{}{}}
	defer tl.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	sc, err := tl.Accept()
	require.NoError(t, err)
	tc := sc.(*trackedConn)
	defer tc.Close()

	require.False(t, tc.departed(), "an idle client counted as gone")
	require.Zero(t, testing.AllocsPerRun(100, func() { tc.departed() }), "a probe allocates")

	_, err = client.Write([]byte("G"))
	require.NoError(t, err)
	require.False(t, tc.departed(), "a client with a request pending counted as gone")
	require.NoError(t, tc.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 1)
	n, err := tc.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "G", string(buf[:n]), "the peek took the byte")

	require.NoError(t, client.Close())
	deadline := time.Now().Add(5 * time.Second)
	for !tc.departed() { // the FIN comes through the kernel: poll for it
		require.True(t, time.Now().Before(deadline), "a closed client never counted as gone")
		time.Sleep(time.Millisecond)
	}
}
