package corvo

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Usage is what a job's LLM calls used, as a worker reports it on an ack,
// a fail or a heartbeat. On a heartbeat it is cumulative for the attempt
// (each report replaces the attempt's previous one); on an ack or a fail
// it is what the attempt used beyond its heartbeats (added to them).
type Usage struct {
	InputTokens         int64   `json:"input_tokens,omitempty"`
	OutputTokens        int64   `json:"output_tokens,omitempty"`
	CacheCreationTokens int64   `json:"cache_creation_tokens,omitempty"`
	CacheReadTokens     int64   `json:"cache_read_tokens,omitempty"`
	Model               string  `json:"model,omitempty"`
	Provider            string  `json:"provider,omitempty"`
	CostUSD             float64 `json:"cost_usd,omitempty"`
	LatencyMs           int64   `json:"latency_ms,omitempty"`
}

// Add adds o's tokens, cost and latency to u; o's model and provider
// replace u's when set.
func (u *Usage) Add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheCreationTokens += o.CacheCreationTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CostUSD += o.CostUSD
	u.LatencyMs += o.LatencyMs
	if o.Model != "" {
		u.Model = o.Model
	}
	if o.Provider != "" {
		u.Provider = o.Provider
	}
}

// JobUsage is a job document's "usage": its totals and every report.
type JobUsage struct {
	UsageCounts
	Reports []UsageReport `json:"reports"`
}

// UsageCounts are tokens and cost added up.
type UsageCounts struct {
	InputTokens         int64   `json:"input_tokens"`
	OutputTokens        int64   `json:"output_tokens"`
	CacheCreationTokens int64   `json:"cache_creation_tokens"`
	CacheReadTokens     int64   `json:"cache_read_tokens"`
	CostUSD             float64 `json:"cost_usd"`
}

// UsageReport is one usage record of a job: an attempt's heartbeats (the
// latest cumulative report), its ack or its fail.
type UsageReport struct {
	Attempt int    `json:"attempt"`
	Phase   string `json:"phase"` // heartbeat, ack, fail
	UsageCounts
	Model     *string   `json:"model"`
	Provider  *string   `json:"provider"`
	LatencyMs int64     `json:"latency_ms"`
	At        time.Time `json:"at"`
}

// UsageSummaryParams is GET /api/v1/usage/summary's query.
type UsageSummaryParams struct {
	Period  string // 24h (default), 7d or 30d
	GroupBy string // "", queue, model, provider or tag:<key>
}

// UsageSummary is the answer to GET /api/v1/usage/summary.
type UsageSummary struct {
	Period  string       `json:"period"`
	GroupBy *string      `json:"group_by"`
	Groups  []UsageGroup `json:"groups"`
	Totals  UsageTotals  `json:"totals"`
	Cache   UsageCache   `json:"cache"`
}

// UsageCache counts the jobs enqueued in the period with a cache: those
// completed from the cache (hits: they never reached a worker) and the
// others, and what the hits saved (the cost of the jobs they took their
// results from).
type UsageCache struct {
	Hits                int64   `json:"hits"`
	Misses              int64   `json:"misses"`
	HitRate             float64 `json:"hit_rate"`
	EstimatedSavingsUSD float64 `json:"estimated_savings_usd"`
}

// UsageTotals adds up the usage reported in a period: tokens, cost, the
// jobs that reported any and the reports, and the cost per job.
type UsageTotals struct {
	UsageCounts
	Jobs          int64   `json:"jobs"`
	Reports       int64   `json:"reports"`
	CostPerJobUSD float64 `json:"cost_per_job_usd"`
}

// UsageGroup is one group of a summary; Key is nil for the reports
// without a value (no model, no such tag).
type UsageGroup struct {
	Key *string `json:"key"`
	UsageTotals
}

// UsageSummary reads the usage reported in a period, grouped.
func (c *Client) UsageSummary(ctx context.Context, p UsageSummaryParams) (*UsageSummary, error) {
	q := url.Values{}
	if p.Period != "" {
		q.Set("period", p.Period)
	}
	if p.GroupBy != "" {
		q.Set("group_by", p.GroupBy)
	}
	path := "/api/v1/usage/summary"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out UsageSummary
	if _, err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
