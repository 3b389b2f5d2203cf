package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/gateway"
	"github.com/corvohq/corvo/node"
)

// runCLI runs the built binary as a user would, with CORVO_URL set.
func runCLI(t *testing.T, url string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(corvoBin, args...)
	cmd.Env = append(cmd.Environ(), "CORVO_URL="+url)
	return runCmd(t, cmd)
}

// runCmd runs cmd to its end and returns its combined output and exit
// code (a failure to run it at all fails the test).
func runCmd(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func TestCLIEnqueueAndInspect(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	out, code := runCLI(t, s.url, "enqueue", "emails.send", `{"to":"user@example.com"}`, "--priority", "high", "--max-retries", "7")
	require.Equal(t, 0, code, out)
	fields := strings.Fields(out)
	require.Len(t, fields, 2, out)
	id := fields[0]
	require.Equal(t, "pending", fields[1])

	out, code = runCLI(t, s.url, "inspect", id)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "queue                emails.send")
	require.Contains(t, out, "priority             high")
	require.Contains(t, out, "max_retries          7")
	require.Contains(t, out, `payload              {"to":"user@example.com"}`)

	out, code = runCLI(t, s.url, "inspect", id, "--output", "json")
	require.Equal(t, 0, code, out)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Equal(t, id, doc["id"])

	out, code = runCLI(t, s.url, "enqueue", "emails.send", `{"to":"x"}`, "-o", "json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"job_id":"job_`)

	// Exit codes scripts can trust.
	_, code = runCLI(t, s.url, "inspect", "job_0_01HX7Y2K3M0000000000000000")
	require.Equal(t, exitNotFound, code)
	out, code = runCLI(t, s.url, "enqueue", "q", "{not json")
	require.Equal(t, exitUsage, code, out)
	out, code = runCLI(t, s.url, "enqueue", "bad queue", "{}")
	require.Equal(t, exitError_, code, out)
	require.Contains(t, out, "invalid_request")
	_, code = runCLI(t, "http://127.0.0.1:1", "inspect", "x")
	require.Equal(t, exitError_, code)
	_, code = runCLI(t, s.url, "inspect")
	require.Equal(t, exitUsage, code)
}

// TestCLIManagement drives every job, queue and listing command against a
// real server, in table and JSON output.
func TestCLIManagement(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	run := func(want int, args ...string) string {
		t.Helper()
		out, code := runCLI(t, s.url, args...)
		require.Equal(t, want, code, "corvo %v:\n%s", args, out)
		return out
	}
	id := strings.Fields(run(0, "enqueue", "emails.send", `{"to":"a"}`, "--max-retries", "0"))[0]
	require.Contains(t, run(0, "queues"), "emails.send")
	require.Contains(t, run(0, "queues", "-o", "json"), `"name":"emails.send"`)
	require.Contains(t, run(0, "cancel", id), "cancelled")
	require.Contains(t, run(0, "retry", id), "pending")
	moved := strings.TrimSpace(run(0, "move", id, "emails.legacy", "--reset-attempt"))
	require.True(t, strings.HasPrefix(moved, "job_"), moved)
	require.Contains(t, run(0, "delete", moved), "deleted")
	run(exitNotFound, "delete", moved)

	require.Contains(t, run(0, "pause", "emails.send"), `"paused":true`)
	require.Contains(t, run(0, "resume", "emails.send"), `"paused":false`)
	run(0, "concurrency", "payments", "1")
	run(0, "throttle", "emails.send", "100", "1m")
	run(0, "throttle", "emails.send", "--remove")
	run(exitUsage, "throttle", "emails.send")
	run(0, "enqueue", "tmp", `{}`)
	require.Contains(t, run(0, "clear", "tmp"), `"cleared":1`)
	require.Contains(t, run(0, "drain", "tmp"), "drained")
	require.JSONEq(t, `{"queue":"tmp","paused":true,"active":0,"drained":true}`, run(0, "drain", "tmp", "-o", "json"))
	run(exitUsage, "destroy", "tmp")
	require.Contains(t, run(0, "destroy", "tmp", "--confirm"), "jobs deleted: 0")

	// A job that dies shows in the dead list.
	dead := strings.Fields(run(0, "enqueue", "flaky", `{}`, "--max-retries", "0"))[0]
	code, body := do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"flaky"}, "worker_id": "cli-w"})
	require.Equal(t, 200, code, string(body))
	code, _ = do(t, "POST", s.url+"/api/v1/fail/"+dead, map[string]any{"error": "SMTP down"})
	require.Equal(t, 200, code)
	out := run(0, "dead", "--queue", "flaky")
	require.Contains(t, out, dead)
	require.Contains(t, out, "SMTP down")
	require.Contains(t, run(0, "workers"), "cli-w")

	sid := strings.TrimSpace(run(0, "schedules", "create", "nightly", "reports", "0 3 * * *", "--timezone", "Europe/Paris", "--payload", `{"k":1}`))
	require.True(t, strings.HasPrefix(sid, "sched_"), sid)
	require.Contains(t, run(0, "schedules"), "nightly")
	require.Contains(t, run(0, "schedules", "list", "-o", "json"), `"timezone":"Europe/Paris"`)
	require.Equal(t, sid+": paused\n", run(0, "schedules", "pause", sid))
	require.Contains(t, run(0, "schedules", "list", "-o", "json"), `"paused":true`)
	ran := strings.Fields(run(0, "schedules", "run", sid))
	require.True(t, strings.HasPrefix(ran[0], "job_"), ran)
	require.Equal(t, "reports", s.job(t, ran[0]).Queue, "a run of a paused schedule, now")
	require.Regexp(t, `^`+sid+`: next run \d{4}-`, run(0, "schedules", "resume", sid))
	run(exitNotFound, "schedules", "pause", "sched_0_01ARZ3NDEKTSV4RRFFQ69G5FAV")
	run(0, "schedules", "delete", sid)
	run(exitError_, "schedules", "create", "bad", "reports", "not cron")

	// A job waiting on an unfinished dependency is held: approve releases
	// it, reject makes it dead.
	parent := strings.Fields(run(0, "enqueue", "gate", `{}`))[0]
	for _, c := range []struct{ cmd, want string }{{"approve", "pending"}, {"reject", "dead"}} {
		held := strings.Fields(run(0, "enqueue", "gated", `{}`, "--depends-on", parent))[0]
		require.Equal(t, "held", s.job(t, held).State)
		// Counted as held in the queue list and the status.
		queues := decode[struct {
			Queues []struct {
				Name string
				Held int
			}
		}](t, []byte(run(0, "queues", "-o", "json"))).Queues
		held1 := false
		for _, q := range queues {
			held1 = held1 || (q.Name == "gated" && q.Held == 1)
		}
		require.True(t, held1, "gated counts its held job: %+v", queues)
		require.Regexp(t, `(?m)^gated +\d+ +0 +0 +0 +1 `, run(0, "queues"), "the HELD column")
		require.Regexp(t, `queues: \d+ — .* 1 held,`, run(0, "status"))
		require.Contains(t, run(0, c.cmd, held), c.want)
		require.Equal(t, c.want, s.job(t, held).State)
		run(exitError_, c.cmd, held) // no longer held: a conflict
	}
	run(exitNotFound, "approve", "job_0_01ARZ3NDEKTSV4RRFFQ69G5FAV")

	require.Contains(t, run(0, "status"), "status: ok")
	st := decode[struct {
		Health struct{ Status string }
		Queues []struct{ Name string }
	}](t, []byte(run(0, "status", "-o", "json")))
	require.Equal(t, "ok", st.Health.Status)
	require.NotEmpty(t, st.Queues)

	// Every enqueue option has its flag.
	opt := strings.Fields(run(0, "enqueue", "opts", `{"n":1}`, "--tag", "tenant=acme", "--tag", "region=eu", "--unique-key", "inv-42",
		"--unique-period", "1h", "--expire-after", "1h", "--lease-duration", "90s", "--retry-backoff", "fixed",
		"--retry-base-delay", "2s", "--retry-max-delay", "10s", "--priority", "high", "--max-retries", "5"))[0]
	code, body = do(t, "GET", s.url+"/api/v1/jobs/"+opt, nil)
	require.Equal(t, 200, code)
	doc := decode[map[string]any](t, body)
	require.Equal(t, map[string]any{"tenant": "acme", "region": "eu"}, doc["tags"])
	require.Equal(t, "inv-42", doc["unique_key"])
	require.EqualValues(t, 90, doc["lease_duration"])
	require.Equal(t, "fixed", doc["retry_backoff"])
	require.Equal(t, "2s", doc["retry_base_delay"])
	require.Equal(t, "10s", doc["retry_max_delay"])
	require.EqualValues(t, 5, doc["max_retries"])
	require.NotNil(t, doc["expire_at"], string(body))
	require.Contains(t, run(0, "enqueue", "opts", `{"n":2}`, "--unique-key", "inv-42"), opt+"\tpending (an existing job holds the unique key)")
	run(exitUsage, "enqueue", "opts", `{}`, "--tag", "novalue")
	run(exitUsage, "enqueue", "opts", `{}`, "--lease-duration", "1500ms")

	// A date alone is its midnight UTC (the spec's own example).
	require.Contains(t, run(0, "search", "--queue", "opts", "--created-after", "2020-02-10"), "1 shown of 1 matching")
	require.Contains(t, run(0, "search", "--queue", "opts", "--created-after", "2999-02-10"), "0 shown of 0 matching")
}

// TestCLIBench: corvo bench against a running server (--url) and against
// an embedded one, each reporting every job it enqueued as completed, on
// one JSON line; the server's CPU time is read from a separate server
// only (the embedded one shares the load generator's process).
func TestCLIBench(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	type report struct {
		Mode       string   `json:"mode"`
		Enqueued   int64    `json:"enqueued"`
		Completed  int64    `json:"completed"`
		Errors     int64    `json:"errors"`
		ServerCPUS *float64 `json:"server_cpu_s"`
		FixedP99   *float64 `json:"fixed_rate_p99_ms"`
		Latency    map[string]struct {
			P50   float64 `json:"p50"`
			Count int64   `json:"count"`
		} `json:"latency_ms"`
	}
	for _, args := range [][]string{
		{"--url", s.url, "--mode", "e2e", "--jobs", "400", "--producers", "2", "--workers", "2", "--queues", "2", "--enqueue-batch", "10", "--fetch-batch", "10", "--ack-batch", "10"},
		{"--url", s.url, "--mode", "lifecycle", "--jobs", "200", "--producers", "2", "--workers", "2"},
		{"--url", s.url, "--mode", "enqueue", "--jobs", "300", "--producers", "3"},
		{"--url", s.url, "--mode", "fixed-rate", "--rate", "400", "--jobs", "200", "--senders", "4", "--workers", "2", "--queues", "3"},
		{"--embedded", "--mode", "e2e", "--jobs", "100", "--producers", "2", "--workers", "2"},
	} {
		out, code := runCLI(t, s.url, append([]string{"bench", "-o", "json"}, args...)...)
		require.Equal(t, 0, code, "corvo bench %v:\n%s", args, out)
		line := out[strings.IndexByte(out, '{'):]
		require.Equal(t, strings.Count(line, "\n"), 1, "one JSON line: %s", out)
		r := decode[report](t, []byte(line))
		if args[0] == "--url" {
			require.NotNil(t, r.ServerCPUS, "%v: %s", args, out)
			require.Positive(t, *r.ServerCPUS, "%v", args)
		} else {
			require.Nil(t, r.ServerCPUS, "%v: %s", args, out)
		}
		require.Equal(t, r.Mode == "fixed-rate", r.FixedP99 != nil, "%v: %s", args, out)
		require.Zero(t, r.Errors, "%v", args)
		require.Equal(t, r.Enqueued, int64(mustAtoi(t, args[slices.Index(args, "--jobs")+1])), "%v", args)
		if r.Mode != "enqueue" {
			require.Equal(t, r.Enqueued, r.Completed, "%v", args)
			require.Equal(t, r.Completed, r.Latency["enqueue_to_start"].Count, "%v: %s", args, out)
		}
	}
	// Bad flags are a usage error.
	_, code := runCLI(t, s.url, "bench", "--mode", "sideways")
	require.Equal(t, exitUsage, code)
	out, code := runCLI(t, s.url, "bench", "--mode", "fixed-rate", "--jobs", "10")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "fixed-rate mode needs a rate")
	// --help documents the shapes.
	out, code = runCLI(t, s.url, "bench", "--help")
	require.Equal(t, 0, code, out)
	for _, want := range []string{"--senders", "fixed-rate", "rotated by one queue per fetch", "one line of JSON", "process_cpu_seconds_total"} {
		require.Contains(t, out, want)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// TestCLISearchPipeBulk: corvo search … --output json | corvo bulk retry,
// as the spec shows, plus bulk by --filter and by IDs.
func TestCLISearchPipeBulk(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	s := newServer(t)
	var jobs []map[string]any
	for i := 0; i < 30; i++ {
		jobs = append(jobs, map[string]any{"queue": "emails.send", "payload": map[string]int{"amount": i * 10}, "max_retries": 0})
	}
	code, body := do(t, "POST", s.url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs})
	require.Equal(t, 201, code, string(body))
	code, body = do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"emails.send"}, "count": 12, "worker_id": "w"})
	require.Equal(t, 200, code, string(body))
	for _, j := range decode[struct{ Jobs []fetched }](t, body).Jobs {
		code, _ := do(t, "POST", s.url+"/api/v1/fail/"+j.JobID, map[string]any{"error": "SMTP timeout"})
		require.Equal(t, 200, code)
	}
	search := func(args ...string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, code := runCLI(t, s.url, append([]string{"search"}, args...)...)
			require.Equal(t, 0, code, out)
			if !strings.Contains(out, "0 shown") || time.Now().After(deadline) {
				return out
			}
			time.Sleep(20 * time.Millisecond) // the mirror catches up asynchronously
		}
	}
	out := search("--queue", "emails.send", "--state", "dead", "--error-contains", "SMTP")
	require.Contains(t, out, "12 shown of 12 matching")

	// The spec's pipe, verbatim but for the address.
	pipe := exec.Command("bash", "-c", corvoBin+" search --queue emails.send --state dead --output json | "+corvoBin+" bulk retry")
	pipe.Env = append(os.Environ(), "CORVO_URL="+s.url)
	res, err := pipe.CombinedOutput()
	require.NoError(t, err, string(res))
	require.Contains(t, string(res), "retry: 12 jobs, 0 errors")
	code, body = do(t, "GET", s.url+"/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `"name":"emails.send","pending":30,"active":0,"scheduled":0,"retrying":0,"completed":0,"dead":0`)

	// Bulk by filter, after the mirror saw the retries.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(search("--queue", "emails.send", "--payload-jq", ".amount >= 200"), "10 shown") {
		require.True(t, time.Now().Before(deadline))
	}
	res2, code2 := runCLI(t, s.url, "bulk", "change-priority", "critical", "--filter", `{"queue":"emails.send","payload_jq":".amount >= 200"}`)
	require.Equal(t, 0, code2, res2)
	require.Contains(t, res2, "change_priority: 10 jobs")
	code, body = do(t, "POST", s.url+"/api/v1/fetch", map[string]any{"queues": []string{"emails.send"}})
	require.Equal(t, 200, code)
	require.Equal(t, "critical", decode[fetched](t, body).Priority)

	// IDs on stdin, one action per word.
	ids := strings.Join(s.deadIDs(t), " ")
	cmd := exec.Command(corvoBin, "bulk", "delete")
	cmd.Env = append(os.Environ(), "CORVO_URL="+s.url)
	cmd.Stdin = strings.NewReader(ids)
	res, err = cmd.CombinedOutput()
	require.NoError(t, err, string(res))
	require.Contains(t, string(res), "no jobs on stdin", "no dead jobs are left to delete")
	_, code = runCLI(t, s.url, "bulk", "explode")
	require.Equal(t, exitUsage, code)
}

func (s *server) deadIDs(t *testing.T) []string {
	code, body := do(t, "GET", s.url+"/api/v1/dead", nil)
	require.Equal(t, 200, code)
	var ids []string
	for _, j := range decode[struct{ Jobs []jobDoc }](t, body).Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestEveryCommandHasOutputFlag: --output json is on every command but
// the server itself.
func TestEveryCommandHasOutputFlag(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "server" && c.Name() != "help" && c.Name() != "completion" {
			f := c.Flags().Lookup("output")
			if f == nil {
				f = c.InheritedFlags().Lookup("output")
			}
			require.NotNil(t, f, "%s has no --output", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

// TestServerHelpHidesClientFlags: the root's client-only flags (--tls-ca,
// --api-key) are not listed by `corvo server --help`, and are by a client
// command's.
func TestServerHelpHidesClientFlags(t *testing.T) {
	t.Parallel()
	help := func(args ...string) string {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		require.NoError(t, root.Execute())
		return out.String()
	}
	for _, args := range [][]string{{"server", "--help"}, {"help", "server"}} {
		out := help(args...)
		require.Contains(t, out, "--tls-cert", args)
		for _, f := range clientOnlyFlags {
			require.NotContains(t, out, " --"+f+" ", args)
		}
	}
	out := help("queues", "--help")
	for _, f := range clientOnlyFlags {
		require.Contains(t, out, " --"+f+" ", "queues --help")
	}
}

// TestServerOIDCFlags: the single sign-on flags and their environment reach
// the gateway's config; a malformed role map is a usage error.
func TestServerOIDCFlags(t *testing.T) {
	t.Setenv("CORVO_OIDC_CLIENT_SECRET", "from-env")
	t.Setenv("CORVO_OIDC_ROLE_MAP", "")
	var f serverFlags
	fl := pflag.NewFlagSet("server", pflag.ContinueOnError)
	f.register(fl)
	require.NoError(t, fl.Parse([]string{"--oidc-issuer", "https://id.example", "--oidc-client-id", "corvo",
		"--oidc-redirect-url", "https://corvo.example/auth/oidc/callback", "--oidc-role-map", "ops=default:operator,devs=team-a:readonly",
		"--oidc-role-map", "admins=default:admin"}))
	c, err := f.config()
	require.NoError(t, err)
	o := c.Gateway.OIDC
	require.Equal(t, "https://id.example", o.Issuer)
	require.Equal(t, "from-env", o.ClientSecret)
	require.Equal(t, "groups", o.GroupsClaim)
	require.Equal(t, []gateway.RoleMapping{{Group: "ops", Namespace: "default", Role: "operator"},
		{Group: "devs", Namespace: "team-a", Role: "readonly"}, {Group: "admins", Namespace: "default", Role: "admin"}}, o.RoleMap)
	require.NoError(t, c.WithDefaults().Validate())

	var g serverFlags
	fl = pflag.NewFlagSet("server", pflag.ContinueOnError)
	g.register(fl)
	require.NoError(t, fl.Parse([]string{"--oidc-role-map", "ops-default-operator"}))
	_, err = g.config()
	require.ErrorContains(t, err, "want group=namespace:role")
}

// TestServerDiskFlags: --min-free-disk, --mirror-payload-max and
// --snapshot-bytes reach the node's config with their defaults; 0 turns
// the floor off and keeps whole payloads; a malformed floor is a usage
// error at parse time.
func TestServerDiskFlags(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (node.Config, error) {
		var f serverFlags
		fl := pflag.NewFlagSet("server", pflag.ContinueOnError)
		fl.SetOutput(io.Discard)
		f.register(fl)
		if err := fl.Parse(args); err != nil {
			return node.Config{}, err
		}
		return f.config()
	}
	c, err := parse()
	require.NoError(t, err)
	require.Equal(t, gateway.DiskFloor{Bytes: 2 << 30, Percent: 5}, c.Gateway.MinFreeDisk)
	require.Equal(t, 16<<10, c.MirrorPayloadMax)
	require.Equal(t, int64(32<<20), c.SnapshotBytes)

	c, err = parse("--min-free-disk", "10GiB", "--mirror-payload-max", "1024", "--snapshot-bytes", "1048576")
	require.NoError(t, err)
	require.Equal(t, gateway.DiskFloor{Bytes: 10 << 30}, c.Gateway.MinFreeDisk)
	require.Equal(t, 1024, c.MirrorPayloadMax)
	require.Equal(t, int64(1<<20), c.SnapshotBytes)

	c, err = parse("--min-free-disk", "0", "--mirror-payload-max", "0")
	require.NoError(t, err)
	require.Equal(t, gateway.DiskFloor{}, c.Gateway.MinFreeDisk, "no floor")
	require.Negative(t, c.MirrorPayloadMax, "whole payloads")

	_, err = parse("--min-free-disk", "lots")
	require.ErrorContains(t, err, "min-free-disk")
}

// TestServerMaxMemoryFlag: --max-memory (or CORVO_MAX_MEMORY) takes a size
// with a unit and reaches node.Config; without it the node computes the
// default; a malformed size is a usage error, a tiny one fails Validate.
func TestServerMaxMemoryFlag(t *testing.T) {
	parse := func(args ...string) (node.Config, error) {
		var f serverFlags
		fl := pflag.NewFlagSet("server", pflag.ContinueOnError)
		f.register(fl)
		require.NoError(t, fl.Parse(args))
		return f.config()
	}
	t.Setenv("CORVO_MAX_MEMORY", "")
	c, err := parse("--max-memory", "1GiB")
	require.NoError(t, err)
	require.Equal(t, int64(1<<30), c.MaxMemory)
	require.Zero(t, c.CacheBytes, "sized from the budget")
	c, err = parse("--cache-mb", "64")
	require.NoError(t, err)
	require.Zero(t, c.MaxMemory)
	require.Equal(t, int64(64<<20), c.CacheBytes)
	_, err = parse("--max-memory", "lots")
	require.ErrorContains(t, err, "--max-memory")
	c, err = parse("--max-memory", "1MiB")
	require.NoError(t, err)
	require.ErrorContains(t, c.WithDefaults().Validate(), "--max-memory must be at least")
	t.Setenv("CORVO_MAX_MEMORY", "512MiB")
	c, err = parse()
	require.NoError(t, err)
	require.Equal(t, int64(512<<20), c.MaxMemory)
}
