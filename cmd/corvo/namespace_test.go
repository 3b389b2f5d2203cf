package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterNamespacesIsolate: two namespaces with the same queue names on
// a 3-node cluster whose shards each live on one node (--replicas 1), so
// fetches, searches and event streams cross nodes. Each tenant's keys
// enqueue, fetch, search, list, bulk-cancel and stream events without
// ever meeting the other tenant's jobs, through every node.
func TestClusterNamespacesIsolate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	nodes, _ := newSpreadCluster(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	admin := map[string]string{"Authorization": "Bearer " + testAdminKey}
	for _, ns := range []string{"acme", "beta"} {
		code, body := doWith(t, "POST", n1.url+"/api/v1/namespaces", map[string]any{"name": ns}, admin)
		require.Equal(t, 201, code, string(body))
	}
	code, body := doWith(t, "POST", n2.url+"/api/v1/namespaces", map[string]any{"name": "acme"}, admin)
	require.Equal(t, 409, code, "a namespace made twice: %s", body)

	key := func(ns, role string) map[string]string {
		code, body := doWith(t, "POST", n2.url+"/api/v1/auth/keys", map[string]any{"name": ns + "-" + role, "namespace": ns, "role": role}, admin)
		require.Equal(t, 201, code, string(body))
		return map[string]string{"Authorization": "Bearer " + decode[struct {
			Key string `json:"key"`
		}](t, body).Key}
	}
	type tenant struct {
		name         string
		ops, workers map[string]string
		ids          map[string]bool
	}
	tenants := []*tenant{
		{name: "acme", ops: key("acme", "operator"), workers: key("acme", "worker"), ids: map[string]bool{}},
		{name: "beta", ops: key("beta", "operator"), workers: key("beta", "worker"), ids: map[string]bool{}},
	}
	queues := []string{"emails", "reports", "q2", "q3", "q4", "q5"} // names both tenants use, over several shards
	for i, tn := range tenants {
		for j, q := range queues {
			for k := 0; k < 2; k++ {
				node := nodes[(i+j+k)%3]
				code, body := doWith(t, "POST", node.url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]string{"tenant": tn.name}}, tn.ops)
				require.Equal(t, 201, code, string(body))
				tn.ids[decode[struct {
					JobID string `json:"job_id"`
				}](t, body).JobID] = true
			}
		}
	}
	other := func(tn *tenant) *tenant {
		if tn == tenants[0] {
			return tenants[1]
		}
		return tenants[0]
	}

	for i, tn := range tenants {
		node := nodes[i]
		// Lists: the namespace's queues, under their own names, with its counts.
		code, body := doWith(t, "GET", node.url+"/api/v1/queues", nil, tn.ops)
		require.Equal(t, 200, code, string(body))
		var ql struct {
			Queues []struct {
				Name    string `json:"name"`
				Pending int    `json:"pending"`
			} `json:"queues"`
		}
		require.NoError(t, json.Unmarshal(body, &ql))
		require.Len(t, ql.Queues, len(queues), string(body))
		for _, q := range ql.Queues {
			require.NotContains(t, q.Name, "/", "a stored name leaked")
			require.Equal(t, 2, q.Pending, "queue %s of %s: %s", q.Name, tn.name, body)
		}
		// Search, from every node (each holds a third of the shards).
		for _, n := range nodes {
			code, body = doWith(t, "POST", n.url+"/api/v1/jobs/search", map[string]any{"limit": 100}, tn.ops)
			require.Equal(t, 200, code, string(body))
			var res struct {
				Jobs []struct {
					ID      string            `json:"id"`
					Queue   string            `json:"queue"`
					Payload map[string]string `json:"payload"`
				} `json:"jobs"`
				Total int `json:"total"`
			}
			require.NoError(t, json.Unmarshal(body, &res))
			require.Equal(t, len(tn.ids), res.Total, "search of %s through %s", tn.name, n.url)
			for _, j := range res.Jobs {
				require.True(t, tn.ids[j.ID], "%s's search found %s (%s)", tn.name, j.ID, j.Payload["tenant"])
				require.NotContains(t, j.Queue, "/")
			}
		}
		// Another tenant's job by ID is not found; a bulk by its ID fails.
		for id := range other(tn).ids {
			code, _ = doWith(t, "GET", node.url+"/api/v1/jobs/"+id, nil, tn.ops)
			require.Equal(t, 404, code, "%s read %s", tn.name, id)
			code, body = doWith(t, "POST", node.url+"/api/v1/jobs/"+id+"/cancel", nil, tn.ops)
			require.Equal(t, 404, code, "%s cancelled %s: %s", tn.name, id, body)
			code, body = doWith(t, "POST", node.url+"/api/v1/jobs/bulk", map[string]any{"job_ids": []string{id}, "action": "cancel"}, tn.ops)
			require.Equal(t, 200, code, string(body))
			require.Contains(t, string(body), `"affected":0`, body)
			break
		}
		// Its own namespace only: naming another is refused.
		h := map[string]string{"Authorization": tn.ops["Authorization"], "X-Corvo-Namespace": other(tn).name}
		code, _ = doWith(t, "GET", node.url+"/api/v1/queues", nil, h)
		require.Equal(t, 403, code)
	}

	// Fetch: each tenant's workers, through a node that hosts a third of
	// the shards, get their own jobs only, named as they named them.
	for i, tn := range tenants {
		got := 0
		for got < 4 {
			code, body := doWith(t, "POST", nodes[(i+1)%3].url+"/api/v1/fetch", map[string]any{"queues": queues[:2], "worker_id": tn.name + "-w", "timeout": 2, "count": 4}, tn.workers)
			require.Equal(t, 200, code, string(body))
			var fr struct {
				Jobs []struct {
					JobID   string            `json:"job_id"`
					Queue   string            `json:"queue"`
					Payload map[string]string `json:"payload"`
				} `json:"jobs"`
			}
			require.NoError(t, json.Unmarshal(body, &fr))
			for _, j := range fr.Jobs {
				require.True(t, tn.ids[j.JobID], "%s's worker got %s of %s", tn.name, j.JobID, j.Payload["tenant"])
				require.Equal(t, tn.name, j.Payload["tenant"])
				require.Contains(t, queues[:2], j.Queue)
				code, body = doWith(t, "POST", nodes[i].url+"/api/v1/ack/"+j.JobID, map[string]any{}, tn.workers)
				require.Equal(t, 200, code, string(body))
				// The other tenant's worker cannot ack (or even see) it.
				code, _ = doWith(t, "POST", nodes[i].url+"/api/v1/ack/"+j.JobID, map[string]any{}, other(tn).workers)
				require.Equal(t, 404, code)
			}
			got += len(fr.Jobs)
		}
		require.Equal(t, 4, got, "%s's emails and reports", tn.name)
	}

	// Events: acme's stream shows acme's job, never beta's enqueued before it.
	acme, beta := tenants[0], tenants[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", n3.url+"/api/v1/events?type=enqueued", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", acme.ops["Authorization"])
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	enqueueVia := func(n *server, tn *tenant, q string) string {
		code, body := doWith(t, "POST", n.url+"/api/v1/enqueue", map[string]any{"queue": q, "payload": map[string]string{"tenant": tn.name}}, tn.ops)
		require.Equal(t, 201, code, string(body))
		return decode[struct {
			JobID string `json:"job_id"`
		}](t, body).JobID
	}
	// The stream opens its upstreams asynchronously: enqueue acme jobs
	// until one shows up, with beta's in between.
	var betaIDs []string
	seen := false
	for round := 0; !seen && round < 20; round++ {
		for _, q := range queues {
			betaIDs = append(betaIDs, enqueueVia(n1, beta, q))
		}
		want := enqueueVia(n2, acme, queues[round%len(queues)])
		deadline := time.After(500 * time.Millisecond)
	read:
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the stream ended")
				for _, id := range betaIDs {
					require.NotContains(t, l, id, "acme's stream showed beta's job")
				}
				if strings.HasPrefix(l, "data:") {
					require.NotContains(t, l, `"queue":"beta/`)
				}
				if strings.Contains(l, want) {
					seen = true
					break read
				}
			case <-deadline:
				break read
			}
		}
	}
	require.True(t, seen, "acme's stream never showed acme's job")

	// Bulk by filter over a queue both tenants have: acme's only.
	code, body = doWith(t, "POST", n3.url+"/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{"queue": "q3"}, "action": "cancel", "confirm": true}, acme.ops)
	require.Equal(t, 200, code, string(body))
	code, body = doWith(t, "POST", n1.url+"/api/v1/jobs/search", map[string]any{"queue": "q3", "state": []string{"pending"}}, beta.ops)
	require.Equal(t, 200, code, string(body))
	require.NotContains(t, string(body), `"total":0,`, "acme's bulk cancel reached beta's q3: %s", body)
	code, body = doWith(t, "POST", n1.url+"/api/v1/jobs/search", map[string]any{"queue": "q3", "state": []string{"pending"}}, acme.ops)
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"total":0,`, "acme's q3 still pending: %s", body)

	// An admin crosses namespaces by naming one; a namespace with keys
	// cannot be deleted.
	code, body = doWith(t, "GET", n2.url+"/api/v1/queues", nil, map[string]string{"Authorization": admin["Authorization"], "X-Corvo-Namespace": "beta"})
	require.Equal(t, 200, code, string(body))
	require.Contains(t, string(body), `"name":"q3"`)
	code, body = doWith(t, "DELETE", n1.url+"/api/v1/namespaces/beta", nil, admin)
	require.Equal(t, 409, code, string(body))
	// A backup of acme through one node reads every shard (two thirds of
	// them on the other nodes): acme's jobs, every one, and no other's.
	code, body = doWith(t, "GET", n2.url+"/api/v1/backup?namespace=acme", nil, admin)
	require.Equal(t, 200, code, string(body))
	jobs := 0
	var trailer map[string]int
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var r struct {
			Kind   string         `json:"kind"`
			Counts map[string]int `json:"counts"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		switch r.Kind {
		case "job":
			jobs++
		case "trailer":
			trailer = r.Counts
		}
		require.NotContains(t, line, `"beta/`, "acme's backup holds beta's")
	}
	require.Equal(t, jobs, trailer["job"])
	// The search (the mirrors, which may still be writing the last
	// enqueues) comes to the same count.
	searchTotal := func() int {
		code, body := doWith(t, "POST", n1.url+"/api/v1/jobs/search", map[string]any{"limit": 1}, acme.ops)
		require.Equal(t, 200, code, string(body))
		return decode[struct {
			Total int `json:"total"`
		}](t, body).Total
	}
	require.Eventually(t, func() bool { return searchTotal() == jobs }, 10*time.Second, 20*time.Millisecond,
		"acme's backup through node 2 has %d jobs", jobs)

	// Metrics name a namespace's queues by namespace and name.
	code, body = doWith(t, "GET", n1.url+"/api/v1/metrics", nil, admin)
	require.Equal(t, 200, code)
	require.True(t, strings.Contains(string(body), `corvo_jobs_enqueued_total{namespace="acme",queue="`) &&
		!strings.Contains(string(body), `queue="acme/`), "metrics labels of another namespace's queues")
}
