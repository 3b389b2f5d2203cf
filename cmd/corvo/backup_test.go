package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/backup"
)

// readBackup reads a backup file whole (and checks it).
func readBackup(t *testing.T, path string) (backup.Header, []backup.Record) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := backup.NewReader(bufio.NewReader(f))
	require.NoError(t, err)
	var out []backup.Record
	for {
		rec, err := r.Next()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			return r.Header, out
		}
		out = append(out, rec)
	}
}

// ulidOf is a job ID's ULID: what a job keeps when a restore gives it an
// ID on another shard.
func ulidOf(id string) string { return id[strings.LastIndexByte(id, '_')+1:] }

// TestBackupRestoreRoundTrip backs up a server holding jobs in every state
// (with results, error histories, a batch, a chain, a dependency), queue
// settings and a schedule, restores it into a server with another shard
// count, and compares a backup of the second server with the first:
// every job, state, attempt, error history, payload, result, timestamp,
// schedule and queue setting equal, IDs mapped. A truncated file is
// refused and changes nothing; a second restore duplicates nothing.
func TestBackupRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	a := newServer(t, "--shards", "4")
	b := newServer(t, "--shards", "3")

	enqueue := func(body map[string]any) string {
		code, out := do(t, "POST", a.url+"/api/v1/enqueue", body)
		require.Equal(t, 201, code, string(out))
		return decode[struct {
			JobID string `json:"job_id"`
		}](t, out).JobID
	}
	fetchOne := func(q string) fetched {
		code, out := do(t, "POST", a.url+"/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": "w1", "timeout": 1, "count": 1})
		require.Equal(t, 200, code, string(out))
		js := decode[struct {
			Jobs []fetched `json:"jobs"`
		}](t, out).Jobs
		require.Len(t, js, 1, q+": "+string(out))
		return js[0]
	}
	pend := enqueue(map[string]any{"queue": "bk.pending", "payload": map[string]any{"n": 1}, "tags": map[string]any{"t": "x"}, "unique_key": "u1"})
	enqueue(map[string]any{"queue": "bk.sched", "payload": map[string]any{"n": 2}, "scheduled_at": "2099-01-01T00:00:00Z"})
	enqueue(map[string]any{"queue": "bk.active", "payload": map[string]any{"n": 3}})
	fetchOne("bk.active")
	enqueue(map[string]any{"queue": "bk.retry", "payload": map[string]any{"n": 4}, "max_retries": 5, "retry_base_delay": "1h", "retry_max_delay": "2h"})
	f := fetchOne("bk.retry")
	code, out := do(t, "POST", a.url+"/api/v1/fail/"+f.JobID, map[string]any{"error": "first failure", "backtrace": "at x:1"})
	require.Equal(t, 200, code, string(out))
	enqueue(map[string]any{"queue": "bk.dead", "payload": map[string]any{"n": 5}, "max_retries": 0})
	f = fetchOne("bk.dead")
	code, out = do(t, "POST", a.url+"/api/v1/fail/"+f.JobID, map[string]any{"error": "fatal"})
	require.Equal(t, 200, code, string(out))
	done := enqueue(map[string]any{"queue": "bk.done", "payload": map[string]any{"n": 6}})
	fetchOne("bk.done")
	code, out = do(t, "POST", a.url+"/api/v1/ack/"+done, map[string]any{"result": map[string]any{"ok": true}})
	require.Equal(t, 200, code, string(out))
	c := enqueue(map[string]any{"queue": "bk.cancel", "payload": map[string]any{"n": 7}})
	code, out = do(t, "POST", a.url+"/api/v1/jobs/"+c+"/cancel", nil)
	require.Equal(t, 200, code, string(out))
	enqueue(map[string]any{"queue": "bk.held", "payload": map[string]any{"n": 8}, "depends_on": []string{done, pend}})
	enqueue(map[string]any{"queue": "bk.held", "payload": map[string]any{"n": 10}, "depends_on": []string{c}})
	code, out = do(t, "POST", a.url+"/api/v1/enqueue/batch", map[string]any{
		"jobs":  []map[string]any{{"queue": "bk.b1", "payload": map[string]any{}}, {"queue": "bk.b2", "payload": map[string]any{}}},
		"batch": map[string]any{"callback_queue": "bk.cb"}})
	require.Equal(t, 201, code, string(out))
	enqueue(map[string]any{"queue": "bk.chain", "payload": map[string]any{"n": 9},
		"chain": map[string]any{"steps": []map[string]any{{"queue": "bk.chain"}, {"queue": "bk.chain2"}}}})
	code, out = do(t, "POST", a.url+"/api/v1/queues/bk.pending/pause", nil)
	require.Equal(t, 200, code, string(out))
	code, out = do(t, "POST", a.url+"/api/v1/queues/bk.b1/concurrency", map[string]any{"max": 2})
	require.Equal(t, 200, code, string(out))
	code, out = do(t, "POST", a.url+"/api/v1/schedules", map[string]any{"name": "nightly", "queue": "bk.cron", "cron": "0 3 * * *", "payload": map[string]any{"k": 1}})
	require.Equal(t, 201, code, string(out))

	dir := t.TempDir()
	fileA := filepath.Join(dir, "a.ndjson")
	out2, code2 := runCLI(t, a.url, "backup", "--all", "-o", fileA)
	require.Equal(t, 0, code2, out2)
	hdr, recsA := readBackup(t, fileA)
	require.Equal(t, 4, hdr.Shards)

	// A truncated file is refused and changes nothing.
	whole, err := os.ReadFile(fileA)
	require.NoError(t, err)
	cut := filepath.Join(dir, "cut.ndjson")
	require.NoError(t, os.WriteFile(cut, whole[:len(whole)*2/3], 0o600))
	out2, code2 = runCLI(t, b.url, "restore", cut)
	require.NotEqual(t, 0, code2)
	require.Contains(t, out2, "invalid_request", out2)
	code, out = do(t, "GET", b.url+"/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(out), "bk.", "nothing restored from a truncated file")
	code, out = do(t, "POST", b.url+"/api/v1/restore", "not a backup")
	require.Equal(t, 400, code)
	require.Contains(t, string(out), `"code":"invalid_request"`)

	out2, code2 = runCLI(t, b.url, "restore", fileA, "-o", "json")
	require.Equal(t, 0, code2, out2)
	rep := decode[struct {
		Restored map[string]int `json:"restored"`
		Exists   map[string]int `json:"exists"`
		Failed   int            `json:"failed"`
		Remapped int            `json:"remapped"`
	}](t, []byte(lastLine(out2)))
	require.Zero(t, rep.Failed, out2)
	require.Positive(t, rep.Remapped, "3 shards instead of 4: jobs move")

	fileB := filepath.Join(dir, "b.ndjson")
	out2, code2 = runCLI(t, b.url, "backup", "-o", fileB)
	require.Equal(t, 0, code2, out2)
	_, recsB := readBackup(t, fileB)

	jobs := func(recs []backup.Record) map[string]backup.Job {
		m := map[string]backup.Job{}
		for _, r := range recs {
			if r.Job != nil {
				m[ulidOf(r.Job.ID)] = *r.Job
			}
		}
		return m
	}
	ja, jb := jobs(recsA), jobs(recsB)
	require.Len(t, jb, len(ja))
	require.GreaterOrEqual(t, len(ja), 11)
	states := map[string]bool{}
	for u, x := range ja {
		y, ok := jb[u]
		require.True(t, ok, "job %s restored", x.ID)
		states[x.State] = true
		if x.State == "active" {
			require.Equal(t, "pending", y.State)
			x.State, x.WorkerID, x.Hostname, x.LeaseExpiresAt = "pending", "", "", 0
		}
		// What the ID mapping changes: IDs and the shards they carry.
		require.Equal(t, ulidOf(x.ID), ulidOf(y.ID))
		x.ID, y.ID = "", ""
		x.BatchID, y.BatchID, x.BatchShard, y.BatchShard = ulidOf(x.BatchID), ulidOf(y.BatchID), 0, 0
		for _, j := range []*backup.Job{&x, &y} {
			for i := range j.DependsOn {
				j.DependsOn[i].ID, j.DependsOn[i].Shard = ulidOf(j.DependsOn[i].ID), 0
			}
			for i := range j.Resolved {
				j.Resolved[i] = ulidOf(j.Resolved[i])
			}
			if j.Chain != nil {
				j.Chain.ID = ulidOf(j.Chain.ID)
				for i := range j.Chain.Steps {
					j.Chain.Steps[i].Shard = 0
				}
			}
		}
		require.Equal(t, x, y, "job %s", u)
	}
	for _, s := range []string{"pending", "scheduled", "active", "retrying", "dead", "completed", "cancelled", "held"} {
		require.True(t, states[s], "the source had a %s job", s)
	}

	others := func(recs []backup.Record) (qs []backup.Queue, ss []backup.Schedule, bs []backup.Batch) {
		for _, r := range recs {
			switch {
			case r.Queue != nil:
				qs = append(qs, *r.Queue)
			case r.Schedule != nil:
				s := *r.Schedule
				s.ID, s.NextRun = ulidOf(s.ID), 0
				ss = append(ss, s)
			case r.Batch != nil:
				b := *r.Batch
				b.ID, b.CallbackJobID, b.CallbackShard = ulidOf(b.ID), ulidOf(b.CallbackJobID), 0
				bs = append(bs, b)
			}
		}
		return
	}
	qa, sa, ba := others(recsA)
	qb, sb, bb := others(recsB)
	require.ElementsMatch(t, qa, qb)
	require.Len(t, sa, 1)
	require.Equal(t, sa, sb)
	require.Len(t, ba, 1)
	require.Equal(t, ba, bb)

	// The restored cluster runs the restored jobs: the paused queue stays
	// paused, the old active job is fetchable again with its attempt.
	code, out = do(t, "POST", b.url+"/api/v1/fetch", map[string]any{"queues": []string{"bk.active"}, "worker_id": "w2", "timeout": 1, "count": 1})
	require.Equal(t, 200, code, string(out))
	got := decode[struct {
		Jobs []fetched `json:"jobs"`
	}](t, out).Jobs
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Attempt)

	// Again: everything exists, nothing is duplicated.
	out2, code2 = runCLI(t, b.url, "restore", fileA, "-o", "json")
	require.Equal(t, 0, code2, out2)
	rep2 := decode[struct {
		Restored map[string]int `json:"restored"`
		Exists   map[string]int `json:"exists"`
	}](t, []byte(lastLine(out2)))
	require.Zero(t, rep2.Restored["job"])
	require.Equal(t, len(ja), rep2.Exists["job"])
}

// lastLine is the last line of a command's output (its stdout's JSON after
// the progress it wrote to stderr).
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
