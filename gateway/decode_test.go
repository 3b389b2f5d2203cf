package gateway

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// TestEnqueueJobOptions: an enqueue without options gets
// statemachine.DefaultJobOptions, and each option of the request reaches
// its JobOptions field — a field no request member sets fails here.
func TestEnqueueJobOptions(t *testing.T) {
	t.Parallel()
	rt := router.New(4)
	toJob := func(body string) statemachine.Job {
		t.Helper()
		var req enqueueRequest
		require.Nil(t, decodeBody([]byte(body), &req, false))
		j, err := req.toJob(rt, MaxPayloadDefault, "")
		require.Nil(t, err)
		return j
	}
	require.Equal(t, statemachine.DefaultJobOptions(), toJob(`{"queue":"q"}`).JobOptions)

	got := toJob(`{"queue":"q","priority":"critical","max_retries":9,"retry_backoff":"fixed","retry_base_delay":"2s",
		"retry_max_delay":"1m","lease_duration":120,"scheduled_at":"2030-01-02T03:04:05Z","expire_after":"2h",
		"tags":{"a":"b"},"unique_key":"k","unique_period":30,"result_schema":{"type":"object"},
		"cache":{"enabled":true,"ttl":"1h","match":"key","cache_key_fields":["x"]},
		"routing":{"prefer":"big","fallback":["small"],"strategy":"lowest_cost","prices":{"big":3,"small":0.25}}}`).JobOptions
	require.Len(t, got.CacheKey, 64, "a sha-256 in hex")
	cacheKey := got.CacheKey
	require.Equal(t, statemachine.JobOptions{Priority: statemachine.PriorityCritical, MaxRetries: 9,
		Backoff: statemachine.BackoffFixed, BaseDelayMs: 2000, MaxDelayMs: 60_000, BaseDelay: "2s", MaxDelay: "1m",
		LeaseSeconds: 120, ScheduledAt: 1_893_553_445_000_000_000, ExpireAfter: "2h", ExpireAfterMs: 7_200_000,
		Tags: []byte(`{"a":"b"}`), UniqueKey: "k", UniquePeriod: 30, ResultSchema: []byte(`{"type":"object"}`),
		CacheKey: cacheKey, CacheTTLms: 3_600_000,
		Routing: &statemachine.Routing{Strategy: statemachine.RouteLowestCost, Models: []string{"big", "small"}, PriceNanos: []int64{3e9, 25e7}}}, got)
	def, gv := reflect.ValueOf(statemachine.DefaultJobOptions()), reflect.ValueOf(got)
	for i := 0; i < gv.NumField(); i++ {
		require.NotEqual(t, def.Field(i).Interface(), gv.Field(i).Interface(),
			"JobOptions.%s: no enqueue field sets it (gateway/enqueue.go)", gv.Type().Field(i).Name)
	}
}

// TestBatchJobsReuse: POST /enqueue/batch decodes into a slice kept from
// an earlier request (batchJobsPool). A job decoded into a reused element
// has none of the earlier job's members, and a slice given back is
// cleared to its capacity.
func TestBatchJobsReuse(t *testing.T) {
	t.Parallel()
	rt := router.New(4)
	var first batchEnqueueRequest
	require.Nil(t, decodeBody([]byte(`{"jobs":[{"queue":"a","priority":"critical","tags":{"t":"1"},"unique_key":"u",
		"max_retries":3,"depends_on":["job_0_x"]},{"queue":"b","payload":{"x":1}}]}`), &first, false))
	jobs := first.Jobs
	require.Len(t, jobs, 2)

	// The decoder reuses a slice's elements as they are (no pool between,
	// so nothing has cleared them): each must come out as if fresh.
	second := batchEnqueueRequest{Jobs: jobs[:0]}
	require.Nil(t, decodeBody([]byte(`{"jobs":[{"queue":"c"}]}`), &second, false))
	require.Len(t, second.Jobs, 1)
	require.Same(t, &jobs[0], &second.Jobs[0], "the element was reused")
	j, aerr := second.Jobs[0].toJob(rt, MaxPayloadDefault, "")
	require.Nil(t, aerr)
	fresh, aerr := (&enqueueRequest{Queue: second.Jobs[0].Queue}).toJob(rt, MaxPayloadDefault, "")
	require.Nil(t, aerr)
	require.Equal(t, fresh, j)

	for i, r := range clearedBatchJobs(jobs[:1]) {
		require.Zero(t, r, "element %d still holds its request", i)
	}
}

// TestGroupByShard: a fetch's queues grouped by shard keep their order
// within each shard (the rotation the worker asked for), shards come in
// the order of their first queue, and every queue lands once.
func TestGroupByShard(t *testing.T) {
	t.Parallel()
	s := &Server{rt: router.New(4)}
	var queues []string
	for i := 0; i < 40; i++ {
		queues = append(queues, fmt.Sprintf("q%d", i))
	}
	parts := s.groupByShard(nil, queues, false)
	require.Len(t, parts, 4)
	seen := map[int]bool{}
	var firstOf []int // each shard at its first queue
	for _, q := range queues {
		if sh := s.rt.ShardForQueue(q); !seen[sh] {
			seen[sh] = true
			firstOf = append(firstOf, sh)
		}
	}
	n := 0
	for i, p := range parts {
		require.Equal(t, firstOf[i], p.shard)
		var want []string
		for _, q := range queues {
			if s.rt.ShardForQueue(q) == p.shard {
				want = append(want, q)
			}
		}
		require.Equal(t, want, p.queues)
		n += len(p.queues)
	}
	require.Equal(t, len(queues), n)
}
