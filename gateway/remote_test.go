package gateway

import (
	"time"

	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/peer"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/shard"
	"github.com/corvohq/corvo/statemachine"
)

// hostsOnly is the real engine on a node that hosts only some shards. It
// counts every use of a shard it does not host (none must happen: the
// gateway asks a node that hosts it) and refuses proposals and reads
// there, as a node without the replica would.
type hostsOnly struct {
	Engine
	hosts   map[int]bool
	wrong   *atomic.Int64
	watches *atomic.Int64 // Watch calls: a long-poll is waiting
}

var rt4 = router.New(4)

func newHostsOnly(shards ...int) hostsOnly {
	h := hostsOnly{Engine: testEngine, hosts: map[int]bool{}, wrong: new(atomic.Int64), watches: new(atomic.Int64)}
	for _, sh := range shards {
		h.hosts[sh] = true
	}
	return h
}

func (h hostsOnly) Hosts(sh int) bool { return h.hosts[sh] }

func (h hostsOnly) misuse(sh int) bool {
	if h.hosts[sh] {
		return false
	}
	h.wrong.Add(1)
	return true
}

func (h hostsOnly) Propose(ctx context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if h.misuse(sh) {
		return nil, shard.ErrUnavailable
	}
	return h.Engine.Propose(ctx, sh, ops...)
}

func (h hostsOnly) Read(sh int, q interface{}) (interface{}, error) {
	if h.misuse(sh) {
		return nil, shard.ErrUnavailable
	}
	return h.Engine.Read(sh, q)
}

func (h hostsOnly) Fetchable(q string) bool {
	h.misuse(rt4.ShardForQueue(q))
	return h.Engine.Fetchable(q)
}

func (h hostsOnly) ThrottledUntil(q string) int64 {
	h.misuse(rt4.ShardForQueue(q))
	return h.Engine.ThrottledUntil(q)
}

func (h hostsOnly) Watch(q string) <-chan struct{} {
	h.misuse(rt4.ShardForQueue(q))
	h.watches.Add(1)
	return h.Engine.Watch(q)
}

func (h hostsOnly) Head(q string) statemachine.QueueHead {
	h.misuse(rt4.ShardForQueue(q))
	return h.Engine.Head(q)
}

func (h hostsOnly) Park(sh int, op *statemachine.FetchOp, g *shard.ParkGroup) *shard.Parked {
	if h.misuse(sh) {
		return nil
	}
	return h.Engine.Park(sh, op, g)
}

// realAddr is the shared test server's host:port: it hosts every shard.
func realAddr() string { return strings.TrimPrefix(baseURL, "http://") }

// toReal: every shard is hosted on the shared test server.
func toReal(int) []string { return []string{realAddr()} }

// sameAnswer compares two query answers field by field, unexported fields
// included; a nil and an empty slice or map are the same answer (gob
// does not tell them apart, and nothing renders them differently).
func sameAnswer(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !sameAnswer(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if !sameAnswer(a.MapIndex(k), b.MapIndex(k)) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameAnswer(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !sameAnswer(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.String:
		return a.String() == b.String()
	}
	panic("sameAnswer: unsupported kind " + a.Kind().String())
}

// gatewayQueries lists the statemachine query types the gateway's
// non-test code builds (statemachine.XxxQuery{...}).
func gatewayQueries(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		file, err := parser.ParseFile(fset, f, src, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			if cl, ok := n.(*ast.CompositeLit); ok {
				if sel, ok := cl.Type.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "statemachine" && strings.HasSuffix(sel.Sel.Name, "Query") {
						seen[sel.Sel.Name] = true
					}
				}
			}
			return true
		})
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRemoteReadRegistry: every query type the gateway builds can be asked
// of another node (a new one must be registered in remote.go), and one
// that is not registered is an error, not a silent wrong answer.
func TestRemoteReadRegistry(t *testing.T) {
	t.Parallel()
	used := gatewayQueries(t)
	require.Contains(t, used, "ListQueuesQuery", "the scan finds the gateway's queries")
	for _, name := range used {
		ok := slices.Contains(peer.ReadKinds(), name)
		require.True(t, ok, "statemachine.%s is used by the gateway but not registered in remote.go", name)
	}
	srv, _ := frontServer(t, Config{Peer: peerTo(toReal)}, newHostsOnly())
	_, err := srv.read(0, statemachine.PeekQuery{Queues: []string{"x"}})
	require.ErrorContains(t, err, "not registered")
	require.Equal(t, 500, engineError(err).status)
}

// TestRemoteReadEveryQuery: each query the gateway reads, asked of another
// node through the internal read endpoint, answers what the local Read
// answers, for every shard, found or not.
func TestRemoteReadEveryQuery(t *testing.T) {
	// Not parallel: the shard-wide lists (queues, workers, schedules) must
	// hold still between the local and the remote read.
	qs := queuesOnDistinctShards(t, "rread", 4)
	wid := uq("rread-worker")
	var onShard [4]string // a live job per shard
	var dead [4]string
	for i, q := range qs {
		sh := rt4.ShardForQueue(q)
		onShard[sh] = enqueue(t, map[string]any{"queue": q, "payload": map[string]int{"i": i}, "tags": map[string]string{"t": "x"}})
		dead[sh] = enqueue(t, map[string]any{"queue": q, "max_retries": 0, "priority": "critical"})
		code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "worker_id": wid, "hostname": "h1"})
		require.Equal(t, 200, code, string(body))
		require.Equal(t, dead[sh], mustJSON[fetchedJob](t, body).JobID)
		code, body = call(t, "POST", "/api/v1/fail/"+dead[sh], map[string]any{"error": "boom", "backtrace": "at x"})
		require.Equal(t, 200, code, string(body))
	}
	code, body := call(t, "POST", "/api/v1/enqueue/batch", map[string]any{"jobs": []map[string]any{{"queue": qs[1]}, {"queue": qs[2]}},
		"batch": map[string]any{"callback_queue": qs[0], "callback_payload": map[string]int{"cb": 1}}})
	require.Equal(t, 201, code, string(body))
	batchID := mustJSON[struct {
		BatchID string `json:"batch_id"`
	}](t, body).BatchID
	moved := enqueue(t, map[string]any{"queue": qs[1]})
	code, body = call(t, "POST", "/api/v1/jobs/"+moved+"/move", map[string]any{"queue": qs[2]})
	require.Equal(t, 200, code, string(body))
	code, body = call(t, "POST", "/api/v1/schedules", map[string]any{"name": uq("rread"), "queue": qs[3], "cron": "0 9 * * *", "payload": map[string]int{"s": 1}})
	require.Equal(t, 201, code, string(body))
	code, body = call(t, "PUT", "/api/v1/budgets", map[string]any{"scope": "queue:" + qs[0], "daily_usd": 0.5, "per_job_usd": 0.01})
	require.Equal(t, 200, code, string(body))
	prov := uq("rread-prov")
	code, body = call(t, "PUT", "/api/v1/providers", map[string]any{"name": prov, "rpm_limit": 60, "output_tpm_limit": 1000})
	require.Equal(t, 200, code, string(body))
	code, body = call(t, "POST", "/api/v1/queues/"+qs[2]+"/provider", map[string]any{"provider": prov})
	require.Equal(t, 200, code, string(body))

	srv, _ := frontServer(t, Config{Peer: peerTo(toReal)}, newHostsOnly())
	kinds := map[string]bool{}
	for sh := 0; sh < 4; sh++ {
		queries := []any{
			statemachine.GetJobQuery{ID: onShard[sh]},
			statemachine.GetJobQuery{ID: dead[sh]},
			statemachine.GetJobQuery{ID: router.JobID(sh, ulid.Make())}, // no such job: a typed nil
			statemachine.MovedQuery{ID: moved},
			statemachine.MovedQuery{ID: onShard[sh]},
			statemachine.BatchQuery{ID: batchID},
			statemachine.BatchQuery{ID: "batch_" + itoa(sh) + "_none"},
			statemachine.ListQueuesQuery{},
			statemachine.DeadQuery{Queue: qs[sh], Limit: 10},
			statemachine.DeadQuery{Limit: 3},
			statemachine.DeadQuery{Namespace: auth.DefaultNamespace, Limit: 3},
			statemachine.JobQueuesQuery{IDs: []string{onShard[sh], dead[sh], router.JobID(sh, ulid.Make())}},
			statemachine.SchedulesQuery{},
			statemachine.WorkersQuery{},
			statemachine.BudgetsQuery{Day: statemachine.UsageDay(time.Now().UnixNano())},
			statemachine.ProvidersQuery{Now: time.Now().UnixNano()},
			statemachine.AuditQuery{Limit: 5},
			statemachine.AuditQuery{Namespace: auth.DefaultNamespace, Method: "POST", Limit: 2},
		}
		for _, q := range queries {
			kinds[reflect.TypeOf(q).Name()] = true
			var local, remote any
			same := false
			for attempt := 0; attempt < 50 && !same; attempt++ {
				var err error
				local, err = testEngine.Read(sh, q)
				require.NoError(t, err)
				remote, err = srv.read(sh, q)
				require.NoError(t, err, "%T on shard %d", q, sh)
				again, err := testEngine.Read(sh, q)
				require.NoError(t, err)
				// Equal to the local answer when it held still meanwhile.
				same = sameAnswer(reflect.ValueOf(local), reflect.ValueOf(again)) && sameAnswer(reflect.ValueOf(local), reflect.ValueOf(remote))
			}
			require.True(t, same, "%T%+v on shard %d:\nlocal  %#v\nremote %#v", q, q, sh, local, remote)
		}
	}
	for _, k := range peer.ReadKinds() {
		require.True(t, kinds[k], "registered query %s has no round-trip case here", k)
	}
	require.Zero(t, srv.eng.(hostsOnly).wrong.Load())
}

// TestInternalShardEndpointsBadInput: bodies that do not decode, unknown
// shards and empty entries are 400s; a node that does not host the shard
// answers 503 with Retry-After and the not-hosted mark, and does nothing.
func TestInternalShardEndpointsBadInput(t *testing.T) {
	t.Parallel()
	q := uq("rbad")
	sh := rt4.ShardForQueue(q)
	good := (&statemachine.Entry{Ops: []statemachine.Op{&statemachine.EnqueueOp{Job: statemachine.Job{ID: router.JobID(sh, ulid.Make()), Queue: q}}}}).Encode(nil)
	_, readBody, err := encodeReadQuery(statemachine.ListQueuesQuery{})
	require.NoError(t, err)
	post := func(url string, body []byte) (*http.Response, []byte) {
		resp, err := peerPost(url, body, testClusterSecret)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, out
	}
	for _, c := range []struct {
		path string
		body []byte
	}{
		{"/internal/v1/shards/" + itoa(sh) + "/propose", []byte("garbage")},
		{"/internal/v1/shards/" + itoa(sh) + "/propose", nil},
		{"/internal/v1/shards/" + itoa(sh) + "/propose", good[:len(good)-1]},
		{"/internal/v1/shards/" + itoa(sh) + "/propose", append(append([]byte(nil), good...), 0)},
		{"/internal/v1/shards/" + itoa(sh) + "/propose", (&statemachine.Entry{}).Encode(nil)},
		{"/internal/v1/shards/9/propose", good},
		{"/internal/v1/shards/-1/propose", good},
		{"/internal/v1/shards/x/propose", good},
		{"/internal/v1/shards/01/propose", good},
		{"/internal/v1/shards/0/read", []byte("garbage")},
		{"/internal/v1/shards/0/read", nil},
		{"/internal/v1/shards/0/read", readBody[:len(readBody)-1]},
		{"/internal/v1/shards/0/read", append(append([]byte(nil), readBody...), 7)},
		{"/internal/v1/shards/4/read", readBody},
	} {
		resp, out := post(baseURL+c.path, c.body)
		require.Equal(t, 400, resp.StatusCode, "%s %q: %s", c.path, c.body, out)
		require.Contains(t, string(out), `"code":`)
	}
	// A node without the shard refuses, whatever it is sent.
	_, front := frontServer(t, Config{Peer: peerTo(toReal)}, newHostsOnly())
	for _, path := range []string{"/internal/v1/shards/" + itoa(sh) + "/propose", "/internal/v1/shards/" + itoa(sh) + "/read"} {
		body := good
		if strings.HasSuffix(path, "read") {
			body = readBody
		}
		resp, out := post("http://"+front+path, body)
		require.Equal(t, 503, resp.StatusCode, string(out))
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Equal(t, "1", resp.Header.Get(peer.NotHostedHeader))
		require.Contains(t, string(out), `"code":"unavailable"`)
	}
	code, out := call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	require.NotContains(t, string(out), `"`+q+`"`, "nothing was enqueued")
	// The same entry, well formed, to a node hosting the shard: applied.
	resp, out := post(baseURL+"/internal/v1/shards/"+itoa(sh)+"/propose", good)
	require.Equal(t, 200, resp.StatusCode, string(out))
	rs, err := statemachine.DecodeResults(out)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, statemachine.StatusOK, rs[0].Status)
}

// TestInternalWait: the node-to-node wait answers 200 at once for a queue
// with a pending job, and claims nothing; for an empty queue it waits
// (TimeoutHeader) and answers 204, or 200 as soon as a job is enqueued;
// bad bodies are 400s and a node not hosting a queue's shard answers 503
// with the not-hosted mark.
func TestInternalWait(t *testing.T) {
	t.Parallel()
	q := uq("iwait")
	wait := func(addr string, body string, ms int) (int, string) {
		req, err := http.NewRequest("POST", "http://"+addr+peer.WaitPath, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(peer.SecretHeader, testClusterSecret)
		req.Header.Set(peer.TimeoutHeader, itoa(ms))
		resp, err := httpc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		if resp.StatusCode == 503 {
			require.Equal(t, "1", resp.Header.Get(peer.NotHostedHeader))
		}
		return resp.StatusCode, string(out)
	}
	body := `{"queues":["` + q + `"]}`
	for _, bad := range []string{`garbage`, `{}`, `{"queues":[]}`, `{"queues":["a b"]}`, `{"queues":["` + q + `"],"count":1}`} {
		code, out := wait(realAddr(), bad, 10)
		require.Equal(t, 400, code, "%s: %s", bad, out)
	}
	_, none := frontServer(t, Config{Peer: peerTo(toReal)}, newHostsOnly())
	code, out := wait(none, body, 10)
	require.Equal(t, 503, code, out)

	code, _ = wait(realAddr(), body, 100)
	require.Equal(t, 204, code, "empty queue: nothing within the wait")
	done := make(chan int, 1)
	go func() {
		code, _ := wait(realAddr(), body, 30_000)
		done <- code
	}()
	id := enqueue(t, map[string]any{"queue": q, "payload": 1})
	require.Equal(t, 200, <-done, "woken by the job")
	code, out = wait(realAddr(), body, 10)
	require.Equal(t, 200, code, out)
	require.JSONEq(t, `{"ready":true}`, out)
	code, job := call(t, "GET", "/api/v1/jobs/"+id, nil)
	require.Equal(t, 200, code)
	require.Equal(t, "pending", mustJSON[struct {
		State string `json:"state"`
	}](t, job).State, "waits claim nothing")
}

// encodeReadQuery writes the body of an internal read: the query's type
// name, then the query, gob-encoded.
func encodeReadQuery(q any) (string, []byte, error) {
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	kind := reflect.TypeOf(q).Name()
	if err := enc.Encode(kind); err != nil {
		return "", nil, err
	}
	err := enc.Encode(q)
	return kind, buf.Bytes(), err
}

// TestRemoteMultiShardHandlers: through a node hosting one shard of four,
// the handlers that touch every shard (batch enqueue with a batch, ack
// batch, heartbeat, bulk, queue, dead, worker, schedule and batch reads)
// answer what the node hosting them all answers, without using a shard
// it does not host.
func TestRemoteMultiShardHandlers(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "rmulti", 4)
	eng := newHostsOnly(rt4.ShardForQueue(qs[0]))
	dead := freeLocalAddr(t)
	_, front := frontServer(t, Config{Peer: peerTo(func(int) []string { return []string{dead, realAddr()} })}, eng)
	furl := "http://" + front
	wid := uq("rmulti-worker")

	var jobs []map[string]any
	for i := 0; i < 12; i++ {
		jobs = append(jobs, map[string]any{"queue": qs[i%4], "payload": map[string]int{"i": i}, "max_retries": 0})
	}
	code, body := callAt(t, "POST", furl+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs,
		"batch": map[string]any{"callback_queue": qs[3], "callback_payload": map[string]int{"cb": 1}}})
	require.Equal(t, 201, code, string(body))
	br := mustJSON[struct {
		JobIDs  []string `json:"job_ids"`
		BatchID string   `json:"batch_id"`
	}](t, body)
	require.Len(t, br.JobIDs, 12)
	for i, id := range br.JobIDs {
		sh, err := rt4.ShardForJob(id)
		require.NoError(t, err)
		require.Equal(t, rt4.ShardForQueue(qs[i%4]), sh)
		code, body := call(t, "GET", "/api/v1/jobs/"+id, nil)
		require.Equal(t, 200, code, string(body))
		require.Contains(t, string(body), `"queue":"`+qs[i%4]+`"`)
	}
	sameAt := func(path string) []byte {
		t.Helper()
		code, want := call(t, "GET", path, nil)
		require.Equal(t, 200, code, string(want))
		code, got := callAt(t, "GET", furl+path, nil)
		require.Equal(t, 200, code, string(got))
		require.JSONEq(t, string(want), string(got), path)
		return got
	}
	sameAt("/api/v1/batches/" + br.BatchID)

	// Claim everything (on the real node), then heartbeat, fail, ack
	// through the front.
	code, body = call(t, "POST", "/api/v1/fetch", map[string]any{"queues": qs, "worker_id": wid, "hostname": "h", "count": 12})
	require.Equal(t, 200, code, string(body))
	got := mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs
	require.Len(t, got, 12)
	hb := map[string]any{}
	for _, j := range got {
		hb[j.JobID] = map[string]any{"progress": map[string]int{"p": 1}}
	}
	hb["job_0_nonsense"] = map[string]any{}
	code, body = callAt(t, "POST", furl+"/api/v1/heartbeat", map[string]any{"worker_id": wid, "jobs": hb})
	require.Equal(t, 200, code, string(body))
	code, want := call(t, "POST", "/api/v1/heartbeat", map[string]any{"worker_id": wid, "jobs": hb})
	require.Equal(t, 200, code)
	require.JSONEq(t, string(want), string(body))
	require.Equal(t, 12, strings.Count(string(body), `"status":"ok"`), string(body))

	// Four die (one per shard) through the front's fail forwarding, the
	// rest are acked in one batch through it.
	var acks []map[string]any
	deadIDs := map[string]bool{}
	var died []string
	for _, j := range got {
		if !deadIDs[j.Queue] {
			deadIDs[j.Queue] = true
			died = append(died, j.JobID)
			code, body := callAt(t, "POST", furl+"/api/v1/fail/"+j.JobID, map[string]any{"error": "boom"})
			require.Equal(t, 200, code, string(body))
			continue
		}
		acks = append(acks, map[string]any{"job_id": j.JobID, "worker_id": wid, "result": map[string]int{"ok": 1}})
	}
	acks = append(acks, map[string]any{"job_id": router.JobID(rt4.ShardForQueue(qs[2]), ulid.Make())})
	code, body = callAt(t, "POST", furl+"/api/v1/ack/batch", map[string]any{"acks": acks})
	require.Equal(t, 200, code, string(body))
	ar := mustJSON[struct {
		Acked  int `json:"acked"`
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}](t, body)
	require.Equal(t, 8, ar.Acked)
	require.Len(t, ar.Errors, 1)
	require.Equal(t, "not_found", ar.Errors[0].Code)

	// Every job is done: the batch's callback job is enqueued on qs[3]'s
	// shard through the outbox. Wait for it, so the queue lists below do
	// not race its arrival.
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", "/api/v1/batches/"+br.BatchID, nil)
		var bv struct {
			CallbackJobID *string `json:"callback_job_id"`
		}
		if json.Unmarshal(b, &bv) != nil || bv.CallbackJobID == nil {
			return false
		}
		code, _ := call(t, "GET", "/api/v1/jobs/"+*bv.CallbackJobID, nil)
		return code == 200
	}, 10*time.Second, 10*time.Millisecond, "the batch callback never arrived")

	// The dead list (every shard is read for it; one call each, as a
	// queue's list scans every dead job of every shard).
	dl := sameAt("/api/v1/dead?queue=" + qs[1])
	require.Contains(t, string(dl), `"queue":"`+qs[1]+`"`)
	// The queue list: the same counts for these queues (throughput is each
	// node's own sample; this front has no history, so no latency).
	ours := func(b []byte) []map[string]any {
		var r struct {
			Queues []map[string]any `json:"queues"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		var out []map[string]any
		for _, q := range r.Queues {
			for _, name := range qs {
				if q["name"] == name {
					delete(q, "throughput")
					delete(q, "latency")
					out = append(out, q)
				}
			}
		}
		return out
	}
	code, want = call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code)
	code, body = callAt(t, "GET", furl+"/api/v1/queues", nil)
	require.Equal(t, 200, code, string(body))
	require.Len(t, ours(body), 4)
	require.Equal(t, ours(want), ours(body))
	require.Contains(t, string(body), `"completed":2`)

	// Workers: this worker as the real node sees it.
	worker := func(b []byte) map[string]any {
		var r struct {
			Workers []map[string]any `json:"workers"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		for _, w := range r.Workers {
			if w["id"] == wid {
				return w
			}
		}
		return nil
	}
	code, want = call(t, "GET", "/api/v1/workers", nil)
	require.Equal(t, 200, code)
	code, body = callAt(t, "GET", furl+"/api/v1/workers", nil)
	require.Equal(t, 200, code)
	require.NotNil(t, worker(body), string(body))
	require.Equal(t, worker(want), worker(body))

	// Schedules: created through the front on a shard it does not host.
	name := uq("rmulti-sched")
	code, body = callAt(t, "POST", furl+"/api/v1/schedules", map[string]any{"name": name, "queue": qs[1], "cron": "0 9 * * *"})
	require.Equal(t, 201, code, string(body))
	sc := mustJSON[struct {
		ID      string `json:"id"`
		NextRun string `json:"next_run"`
	}](t, body)
	require.NotEmpty(t, sc.NextRun, "answered with the stored record")
	code, want = call(t, "GET", "/api/v1/schedules", nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(want), sc.ID, "the hosting node lists it")
	code, body = callAt(t, "GET", furl+"/api/v1/schedules", nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(body), sc.ID)
	code, body = callAt(t, "DELETE", furl+"/api/v1/schedules/"+sc.ID, nil)
	require.Equal(t, 200, code, string(body))

	// Bulk by IDs over every shard: the dead ones retried (one ID names
	// no job).
	ids := append(died, router.JobID(rt4.ShardForQueue(qs[1]), ulid.Make()))
	code, body = callAt(t, "POST", furl+"/api/v1/jobs/bulk", map[string]any{"job_ids": ids, "action": "retry"})
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"affected":4,"errors":1`)
	for _, id := range died {
		require.Equal(t, "pending", getJob(t, id).State)
	}
	require.Zero(t, eng.wrong.Load(), "the front used a shard it does not host")
}

// busyShard is the real engine except that one shard is overloaded.
type busyShard struct {
	Engine
	busy int
}

func (b busyShard) Propose(ctx context.Context, sh int, ops ...statemachine.Op) ([]statemachine.Result, error) {
	if sh == b.busy {
		return nil, shard.ErrBusy
	}
	return b.Engine.Propose(ctx, sh, ops...)
}

// TestRemoteProposeErrors: an engine error on the node hosting the shard
// reaches the client as the same error a local one would be (overload:
// 429 with Retry-After); no node to ask is a 503.
func TestRemoteProposeErrors(t *testing.T) {
	t.Parallel()
	qs := queuesOnDistinctShards(t, "rerr", 2)
	busy := rt4.ShardForQueue(qs[1])
	_, backend := frontServer(t, Config{}, busyShard{Engine: testEngine, busy: busy})
	eng := newHostsOnly(rt4.ShardForQueue(qs[0]))
	_, front := frontServer(t, Config{Peer: peerTo(func(int) []string { return []string{backend} })}, eng)
	body, err := json.Marshal(map[string]any{"jobs": []map[string]any{{"queue": qs[0]}, {"queue": qs[1]}}})
	require.NoError(t, err)
	for _, addr := range []string{backend, front} {
		resp, err := httpc.Post("http://"+addr+"/api/v1/enqueue/batch", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 429, resp.StatusCode, string(out))
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Contains(t, string(out), `"code":"overloaded"`)
		require.Contains(t, string(out), `"not_applied":[1]`)
	}
	_, lonely := frontServer(t, Config{Peer: peerTo(func(int) []string { return nil })}, eng)
	code, out := callAt(t, "GET", "http://"+lonely+"/api/v1/queues", nil)
	require.Equal(t, 503, code, string(out))
	require.Contains(t, string(out), `"code":"unavailable"`)
	require.Zero(t, eng.wrong.Load())
}
