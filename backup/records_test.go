package backup

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// sampleAI is a backup with issue 20's records: a job with routing, cache
// options, usage and scores, a budget with its spend, a cache entry and a
// queue's daily totals.
const sampleAI = `{"kind":"header","format":1,"created_at":1,"shards":8,"namespace":"acme","keys":"metadata"}
{"kind":"budget","budget":{"namespace":"acme","queue":"acme/llm","daily_nanos":5000000000,"on_exceed":"reject","spend":[{"day":"2026-02-10","spent_nanos":7},{"day":"2026-02-11","spent_nanos":600000000}]}}
{"kind":"budget","budget":{"namespace":"acme","tag_key":"team","tag_value":"a","per_job_nanos":1000,"on_exceed":"hold"}}
{"kind":"job","job":{"id":"job_7_01J00000000000000000000000","queue":"acme/llm","priority":"normal","max_retries":3,"backoff":"exponential","base_delay_ms":1,"max_delay_ms":2,"lease_seconds":60,"created_at":5,"state":"completed","result":{"a":1},"cache_key":"k1","cache_ttl_ms":3600000,"result_schema":{"type":"object"},"routing":{"strategy":"lowest_cost","models":["big","small"],"price_nanos":[3,1]},"route_index":1,"route_fallbacks":1,"usage":[{"attempt":1,"started_at":4,"phase":"heartbeat","at":6,"queue":"acme/llm","input_tokens":100,"model":"big","provider":"p","cost_nanos":300000000},{"attempt":1,"started_at":4,"phase":"ack","at":7,"queue":"acme/llm","output_tokens":20,"model":"small","cost_nanos":200000000}],"scores":[{"queue":"acme/llm","at":8,"scorer":"ann","dimensions":[{"name":"accuracy","value":0.75},{"name":"tone","value":-1}]}]}}
{"kind":"job","job":{"id":"job_7_01J00000000000000000000001","queue":"acme/llm","priority":"normal","max_retries":3,"backoff":"exponential","base_delay_ms":1,"max_delay_ms":2,"lease_seconds":60,"created_at":9,"state":"completed","cached_from":"job_7_01J00000000000000000000000","saved_nanos":500000000}}
{"kind":"cache","cache":{"queue":"acme/llm","key":"k1","job_id":"job_7_01J00000000000000000000000","completed_at":7,"expires_at":3600000000007,"cost_nanos":500000000}}
{"kind":"usage_day","usage_day":{"queue":"acme/llm","day":"2026-02-11","input_tokens":100,"output_tokens":20,"cost_nanos":500000000,"reports":2}}
{"kind":"trailer","counts":{"budget":2,"job":2,"cache":1,"usage_day":1}}
`

func readAll(t *testing.T, s string) []Record {
	t.Helper()
	r, err := NewReader(bytes.NewReader([]byte(s)))
	require.NoError(t, err)
	var out []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, rec)
	}
}

// TestRecordsAIRoundTrip: the state machine's form of issue 20's records
// and back gives the same backup records; a restore into another
// namespace and shard count moves their queues, namespace and job IDs.
func TestRecordsAIRoundTrip(t *testing.T) {
	recs := readAll(t, sampleAI)
	require.Len(t, recs, 6)
	for _, rec := range recs {
		switch {
		case rec.Job != nil:
			e, err := ToJob(rec.Job)
			require.NoError(t, err)
			require.Equal(t, rec.Job, FromJob(e))
		case rec.Budget != nil:
			e, err := ToBudget(rec.Budget)
			require.NoError(t, err)
			require.Equal(t, rec.Budget, FromBudget(e))
		case rec.Cache != nil:
			e, err := ToCache(rec.Cache)
			require.NoError(t, err)
			require.Equal(t, rec.Cache, FromCache(e))
		case rec.UsageDay != nil:
			e, err := ToUsageDay(rec.UsageDay)
			require.NoError(t, err)
			require.Equal(t, rec.UsageDay, FromUsageDay(e))
		}
	}
	job, err := ToJob(recs[2].Job)
	require.NoError(t, err)
	v := &job.View
	require.Equal(t, "small", v.Job.Routing.Target(0), "lowest_cost orders by price")
	require.Equal(t, statemachine.PhaseAck, v.Usage[1].Phase)
	require.Equal(t, uint32(2), v.Usage[1].N)
	require.Equal(t, -1.0, v.Scores[0].Dims[1].Value)
	b, err := ToBudget(recs[0].Budget)
	require.NoError(t, err)
	require.Equal(t, "acme", b.Budget.Namespace)
	require.Equal(t, statemachine.UsageDay(1770768000e9), b.Spend[1].Day, "2026-02-11")

	// Into another namespace, on 3 shards.
	p := NewPlan(3, "staging")
	for i := range recs {
		require.NoError(t, p.See(&recs[i]))
	}
	for i := range recs {
		require.NoError(t, p.Rewrite(&recs[i]))
	}
	newID := p.JobID("job_7_01J00000000000000000000000")
	require.NotEqual(t, "job_7_01J00000000000000000000000", newID)
	require.Equal(t, "staging", recs[0].Budget.Namespace)
	require.Equal(t, "staging/llm", recs[0].Budget.Queue)
	require.Equal(t, "staging", recs[1].Budget.Namespace)
	require.Equal(t, "staging/llm", recs[2].Job.Usage[0].Queue)
	require.Equal(t, "staging/llm", recs[2].Job.Scores[0].Queue)
	require.Equal(t, newID, recs[3].Job.CachedFrom)
	require.Equal(t, Cache{Queue: "staging/llm", Key: "k1", JobID: newID, CompletedAt: 7, ExpiresAt: 3600000000007, CostNanos: 500000000}, *recs[4].Cache)
	require.Equal(t, "staging/llm", recs[5].UsageDay.Queue)
	sh := p.Shard(&recs[2])
	for _, i := range []int{0, 4, 5} {
		require.Equal(t, sh, p.Shard(&recs[i]), "the queue's records go to its shard")
	}
	require.Equal(t, 0, p.Shard(&recs[1]), "a tag budget's spend goes to shard 0")

	// Sums over shards.
	sum := Budget{Spend: []DaySpend{{Day: "2026-02-11", SpentNanos: 5}}}
	sum.SumSpend([]DaySpend{{Day: "2026-02-10", SpentNanos: 1}, {Day: "2026-02-11", SpentNanos: 2}})
	require.Equal(t, []DaySpend{{Day: "2026-02-10", SpentNanos: 1}, {Day: "2026-02-11", SpentNanos: 7}}, sum.Spend)
}

// TestRecordsAIRefused: records no corvo writes fail to convert.
func TestRecordsAIRefused(t *testing.T) {
	recs := readAll(t, sampleAI)
	bad := *recs[2].Job
	bad.Routing = &Routing{Strategy: "cheapest", Models: []string{"m"}}
	_, err := ToJob(&bad)
	require.ErrorContains(t, err, "routing strategy")
	bad = *recs[2].Job
	bad.Usage = []UsageRecord{{Phase: "retry"}}
	_, err = ToJob(&bad)
	require.ErrorContains(t, err, "phase")
	bad = *recs[2].Job
	bad.Scores = []Score{{Scorer: "s"}}
	_, err = ToJob(&bad)
	require.ErrorContains(t, err, "score")
	_, err = ToBudget(&Budget{Namespace: "acme", Queue: "other/q", DailyNanos: 1, OnExceed: "hold"})
	require.ErrorContains(t, err, "namespace")
	_, err = ToBudget(&Budget{Namespace: "acme", DailyNanos: 1, OnExceed: "hold", Spend: []DaySpend{{Day: "11/02/2026"}}})
	require.ErrorContains(t, err, "YYYY-MM-DD")
	_, err = ToCache(&Cache{Queue: "q", Key: "k", JobID: "nope"})
	require.ErrorContains(t, err, "job id")
	_, err = ToUsageDay(&UsageDay{Queue: "q", Day: "yesterday"})
	require.Error(t, err)
	// A record of a new kind must hold its object.
	_, err = NewReader(bytes.NewReader([]byte(`{"kind":"header","format":1,"shards":1,"namespace":"all","keys":"full"}` + "\n")))
	require.NoError(t, err)
	r, _ := NewReader(bytes.NewReader([]byte(`{"kind":"header","format":1,"shards":1,"namespace":"all","keys":"full"}` + "\n" +
		`{"kind":"budget","cache":{"queue":"q","key":"k","job_id":"j","completed_at":1,"expires_at":2}}` + "\n")))
	_, err = r.Next()
	require.ErrorContains(t, err, "exactly")
}

// TestRecordsOlderFile: a file written before issue 20's records and
// fields reads and converts as before: the job has no usage, scores,
// routing or cache key, so a restore writes none.
func TestRecordsOlderFile(t *testing.T) {
	recs := readAll(t, sample)
	require.Len(t, recs, 2)
	e, err := ToJob(recs[1].Job)
	require.NoError(t, err)
	require.Nil(t, e.View.Usage)
	require.Nil(t, e.View.Scores)
	require.Nil(t, e.View.Job.Routing)
	require.Empty(t, e.View.Job.CacheKey)
	require.Zero(t, e.View.State.RouteIndex)
	require.Equal(t, recs[1].Job, FromJob(e))
}

// sampleProviders is a backup with a provider and a queue linked to it.
const sampleProviders = `{"kind":"header","format":1,"created_at":1,"shards":4,"namespace":"acme","keys":"metadata"}
{"kind":"provider","provider":{"namespace":"acme","name":"anthropic","rpm_limit":60,"output_tpm_limit":9000}}
{"kind":"queue","queue":{"name":"acme/llm","provider":"anthropic"}}
{"kind":"trailer","counts":{"provider":1,"queue":1}}
`

// TestRecordsProviders: a provider converts to the state machine's form
// and back, a restore into another namespace moves it there (the queue's
// link names it by name, so it follows), and a provider no server would
// hold fails to convert.
func TestRecordsProviders(t *testing.T) {
	recs := readAll(t, sampleProviders)
	require.Len(t, recs, 2)
	p, err := ToProvider(recs[0].Provider)
	require.NoError(t, err)
	require.Equal(t, statemachine.Provider{Namespace: "acme", Name: "anthropic", RPM: 60, OutputTPM: 9000}, *p)
	require.Equal(t, recs[0].Provider, FromProvider(p))
	require.Equal(t, "anthropic", recs[1].Queue.Provider)

	def, err := ToProvider(&Provider{Namespace: "default", Name: "openai", InputTPMLimit: 5})
	require.NoError(t, err)
	require.Empty(t, def.Namespace, "the default namespace is stored as \"\"")
	require.Equal(t, "default", FromProvider(def).Namespace)

	plan := NewPlan(3, "staging")
	for i := range recs {
		require.NoError(t, plan.See(&recs[i]))
		require.NoError(t, plan.Rewrite(&recs[i]))
	}
	require.Equal(t, "staging", recs[0].Provider.Namespace)
	require.Equal(t, Queue{Name: "staging/llm", Provider: "anthropic"}, *recs[1].Queue)

	for _, bad := range []struct {
		p    Provider
		want string
	}{
		{Provider{Namespace: "acme", Name: "anthropic"}, "needs rpm_limit"},
		{Provider{Namespace: "acme", Name: "an thropic", RPMLimit: 1}, "invalid character"},
		{Provider{Namespace: "acme", Name: "a", RPMLimit: -1}, "limits are"},
		{Provider{Namespace: "Not A Namespace", Name: "a", RPMLimit: 1}, "provider a"},
	} {
		_, err := ToProvider(&bad.p)
		require.ErrorContains(t, err, bad.want)
	}
}
