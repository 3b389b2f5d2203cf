package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

type providerDoc struct {
	Name           string   `json:"name"`
	RPMLimit       *int64   `json:"rpm_limit"`
	InputTPMLimit  *int64   `json:"input_tpm_limit"`
	OutputTPMLimit *int64   `json:"output_tpm_limit"`
	Queues         []string `json:"queues"`
	Window         struct {
		Requests     int64 `json:"requests"`
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"window"`
	Shares []struct {
		Shard    int    `json:"shard"`
		RPM      *int64 `json:"rpm"`
		InputTPM *int64 `json:"input_tpm"`
		Window   struct {
			Requests int64 `json:"requests"`
		} `json:"window"`
	} `json:"shares"`
}

func providerOf(t *testing.T, name string) *providerDoc {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/providers", nil)
	require.Equal(t, 200, code, string(body))
	for _, p := range mustJSON[struct {
		Providers []providerDoc `json:"providers"`
	}](t, body).Providers {
		if p.Name == name {
			return &p
		}
	}
	return nil
}

func fetchAll(t *testing.T, q string) []fetchedJob {
	t.Helper()
	code, body := call(t, "POST", "/api/v1/fetch", map[string]any{"queues": []string{q}, "count": 100, "worker_id": "w-" + t.Name()})
	if code == 204 {
		return nil
	}
	require.Equal(t, 200, code, string(body))
	return mustJSON[struct{ Jobs []fetchedJob }](t, body).Jobs
}

func queueProvider(t *testing.T, q string) *string {
	t.Helper()
	code, body := call(t, "GET", "/api/v1/queues", nil)
	require.Equal(t, 200, code, string(body))
	for _, d := range mustJSON[struct {
		Queues []struct {
			Name     string  `json:"name"`
			Provider *string `json:"provider"`
		} `json:"queues"`
	}](t, body).Queues {
		if d.Name == q {
			return d.Provider
		}
	}
	t.Fatalf("no queue %s", q)
	return nil
}

// TestAPIProviders: a provider's requests per minute are split over the
// shards of its linked queues (the remainder to the lower shard); two
// queues on different shards together get exactly the limit; usage
// reports fill the token window; unlinking gives the other shard the
// whole pool; deleting the provider unlinks its queues.
func TestAPIProviders(t *testing.T) {
	t.Parallel()
	name := uq("anthropic")
	qs := queuesOnDistinctShards(t, "prov", 2)
	code, body := call(t, "PUT", "/api/v1/providers", map[string]any{"name": name, "rpm_limit": 9, "input_tpm_limit": 1_000_000})
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"name":"`+name+`","rpm_limit":9,"input_tpm_limit":1000000,"output_tpm_limit":null}`, string(body))
	for _, q := range qs {
		for range 12 {
			enqueue(t, map[string]any{"queue": q})
		}
		code, body = call(t, "POST", "/api/v1/queues/"+q+"/provider", map[string]any{"provider": name})
		require.Equal(t, 200, code, string(body))
		require.JSONEq(t, `{"queue":"`+q+`","provider":"`+name+`"}`, string(body))
		require.Equal(t, name, *queueProvider(t, q))
	}
	p := providerOf(t, name)
	require.NotNil(t, p)
	require.ElementsMatch(t, qs, p.Queues)
	require.Len(t, p.Shares, 2)
	rt := router.New(4)
	lo, hi := qs[0], qs[1]
	if rt.ShardForQueue(lo) > rt.ShardForQueue(hi) {
		lo, hi = hi, lo
	}
	require.Equal(t, rt.ShardForQueue(lo), p.Shares[0].Shard)
	require.Equal(t, []int64{5, 4}, []int64{*p.Shares[0].RPM, *p.Shares[1].RPM})
	require.Equal(t, []int64{500_000, 500_000}, []int64{*p.Shares[0].InputTPM, *p.Shares[1].InputTPM})

	got := fetchAll(t, lo)
	require.Len(t, got, 5, "the lower shard's share")
	require.Len(t, fetchAll(t, hi), 4)
	require.Empty(t, fetchAll(t, lo), "the window is full")
	require.Empty(t, fetchAll(t, hi))
	code, body = call(t, "POST", "/api/v1/ack/"+got[0].JobID, map[string]any{"worker_id": "w-" + t.Name(),
		"usage": map[string]any{"input_tokens": 1200, "output_tokens": 30}})
	require.Equal(t, 200, code, string(body))
	p = providerOf(t, name)
	require.Equal(t, int64(9), p.Window.Requests)
	require.Equal(t, int64(1200), p.Window.InputTokens)
	require.Equal(t, int64(30), p.Window.OutputTokens)

	// Unlinked, a queue is the provider's no more; the other shard's
	// share is the whole limit, less what its window holds.
	code, body = call(t, "DELETE", "/api/v1/queues/"+hi+"/provider", nil)
	require.Equal(t, 200, code, string(body))
	require.Nil(t, queueProvider(t, hi))
	require.Len(t, fetchAll(t, hi), 8, "no provider: the rest of its jobs")
	p = providerOf(t, name)
	require.Len(t, p.Shares, 1)
	require.Equal(t, int64(9), *p.Shares[0].RPM)
	require.Len(t, fetchAll(t, lo), 4, "9 of the minute, 5 taken")

	code, body = call(t, "DELETE", "/api/v1/providers/"+name, nil)
	require.Equal(t, 200, code, string(body))
	require.Nil(t, providerOf(t, name))
	require.Nil(t, queueProvider(t, lo), "unlinked with its provider")
	require.Len(t, fetchAll(t, lo), 3)
	code, _ = call(t, "DELETE", "/api/v1/providers/"+name, nil)
	require.Equal(t, 404, code)
}

// TestAPIProviderBadInput: bad providers and links answer 4xx and change
// nothing.
func TestAPIProviderBadInput(t *testing.T) {
	t.Parallel()
	name := uq("bad-prov")
	for _, b := range []map[string]any{
		{"name": name},                               // no limit
		{"name": name, "rpm_limit": -1},              // negative
		{"name": name, "rpm_limit": int64(1) << 41},  // too large
		{"name": "", "rpm_limit": 1},                 // no name
		{"name": "a b", "rpm_limit": 1},              // bad name
		{"name": name, "rpm_limit": 1, "burst": 2},   // unknown field
		{"name": name, "rpm_limit": "10"},            // wrong type
		{"name": name, "input_tpm_limit": 1.5},       // not an integer
		{"name": name + "/x", "output_tpm_limit": 1}, // bad name
	} {
		code, body := call(t, "PUT", "/api/v1/providers", b)
		require.Equal(t, 400, code, "%v: %s", b, body)
	}
	require.Nil(t, providerOf(t, name))
	q := uq("bad-link")
	enqueue(t, map[string]any{"queue": q})
	code, body := call(t, "POST", "/api/v1/queues/"+q+"/provider", map[string]any{"provider": name})
	require.Equal(t, 404, code, string(body))
	code, body = call(t, "POST", "/api/v1/queues/"+q+"/provider", map[string]any{"provider": "no such"})
	require.Equal(t, 400, code, string(body))
	code, body = call(t, "POST", "/api/v1/queues/"+q+"/provider", map[string]any{"name": name})
	require.Equal(t, 400, code, string(body))
	require.Nil(t, queueProvider(t, q))
	code, _ = call(t, "DELETE", "/api/v1/providers/"+name, nil)
	require.Equal(t, 404, code)
	code, _ = call(t, "DELETE", "/api/v1/providers/no%20such", nil)
	require.Equal(t, 400, code)
}

// TestAPIProviderRebalance: two queues of one provider on different
// shards, one with jobs waiting and one idle. The busy shard first uses
// its equal half; a rebalance then lowers the idle shard to the floor and
// raises the busy one by what that frees — never past the limit while
// the window holds the first half; a job arriving at the idle queue is
// fetched within its floor. A rebalance that would change nothing
// proposes nothing.
func TestAPIProviderRebalance(t *testing.T) {
	t.Parallel()
	name := uq("rebal")
	qs := queuesOnDistinctShards(t, "rebal", 2)
	busy, idle := qs[0], qs[1]
	code, body := call(t, "PUT", "/api/v1/providers", map[string]any{"name": name, "rpm_limit": 40})
	require.Equal(t, 200, code, string(body))
	for _, q := range qs {
		code, body = call(t, "POST", "/api/v1/queues/"+q+"/provider", map[string]any{"provider": name})
		require.Equal(t, 200, code, string(body))
	}
	for range 60 {
		enqueue(t, map[string]any{"queue": busy})
	}
	got := 0
	for range 3 {
		got += len(fetchAll(t, busy))
	}
	require.Equal(t, 20, got, "the equal half")

	srv, _ := frontServer(t, Config{ProviderRebalance: -1}, testEngine)
	mine := func(p *statemachine.Provider) bool { return p.Name == name }
	require.NoError(t, srv.rebalanceProviders(mine))
	rt := router.New(4)
	shareOf := func(p *providerDoc, q string) int64 {
		for _, s := range p.Shares {
			if s.Shard == rt.ShardForQueue(q) {
				return *s.RPM
			}
		}
		t.Fatalf("no share of %s's shard", q)
		return 0
	}
	p := providerOf(t, name)
	require.Equal(t, []int64{39, 1}, []int64{shareOf(p, busy), shareOf(p, idle)}, "floor 1 for the idle shard, the rest to the busy one")
	for range 3 {
		got += len(fetchAll(t, busy))
	}
	require.Equal(t, 39, got, "raised by what the idle shard left")
	gens := func() []uint64 {
		parts, err := srv.readEach(func(int) any { return statemachine.ProvidersQuery{Now: time.Now().UnixNano()} })
		require.NoError(t, err)
		var out []uint64
		for _, part := range parts {
			for _, pi := range part.([]statemachine.ProviderInfo) {
				if pi.Name == name {
					out = append(out, pi.ShareGen)
				}
			}
		}
		return out
	}
	enqueue(t, map[string]any{"queue": idle})
	require.Len(t, fetchAll(t, idle), 1, "the idle shard's floor")
	require.Empty(t, fetchAll(t, busy))
	p = providerOf(t, name)
	require.Equal(t, int64(40), p.Window.Requests, "the pool's limit, not more")
	before := gens()
	require.NoError(t, srv.rebalanceProviders(mine))
	require.Equal(t, before, gens(), "the plan is the shares: nothing proposed")

	// Both busy now (a job waits on the idle queue): the plan is the
	// equal split, so the busy shard is lowered to 20, but its window
	// holds 39: the other is not raised while it does.
	enqueue(t, map[string]any{"queue": idle})
	require.NoError(t, srv.rebalanceProviders(mine))
	p = providerOf(t, name)
	require.Equal(t, []int64{20, 1}, []int64{shareOf(p, busy), shareOf(p, idle)})
	require.Empty(t, fetchAll(t, idle))
	require.Empty(t, fetchAll(t, busy))
	require.Equal(t, int64(40), providerOf(t, name).Window.Requests)
	before = gens()
	require.NoError(t, srv.rebalanceProviders(mine))
	require.Equal(t, before, gens(), "no room to raise into and nothing to lower: nothing proposed")
}
