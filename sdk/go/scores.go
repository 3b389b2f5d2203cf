package corvo

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// ScoreRequest is a score of a job's result: free-form dimensions (names
// of 1–64 bytes, finite numbers), who scored, and an optional comment.
type ScoreRequest struct {
	Dimensions map[string]float64 `json:"dimensions"`
	Scorer     string             `json:"scorer"`
	Comment    string             `json:"comment,omitempty"`
}

// Scored is the answer to a score.
type Scored struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"` // the job's state
}

// JobScore is one score in a job document.
type JobScore struct {
	Scorer     string             `json:"scorer"`
	Dimensions map[string]float64 `json:"dimensions"`
	Comment    *string            `json:"comment"`
	At         time.Time          `json:"at"`
}

// Score adds a score to a job (a job may have several).
func (c *Client) Score(ctx context.Context, jobID string, s ScoreRequest) (*Scored, error) {
	var out Scored
	if _, err := c.doAt(ctx, c.routeJob(jobID), http.MethodPost, "/api/v1/jobs/"+url.PathEscape(jobID)+"/score", s, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ScoresParams is the query of ScoresSummary and ScoresCompare.
type ScoresParams struct {
	Queue   string // "": every queue
	Period  string // 24h, 7d (default) or 30d
	Scorer  string // "": every scorer
	GroupBy string // ScoresCompare only: tag:<key>
}

// ScoreStats summarises one dimension.
type ScoreStats struct {
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P5    float64 `json:"p5"`
	Count int64   `json:"count"`
}

// ScoresSummary is the answer to GET /api/v1/scores/summary.
type ScoresSummary struct {
	Period     string                `json:"period"`
	Queue      *string               `json:"queue"`
	Scorer     *string               `json:"scorer"`
	Dimensions map[string]ScoreStats `json:"dimensions"`
}

// ScoresGroup is one group of a comparison (Key nil: the jobs without
// the tag).
type ScoresGroup struct {
	Key        *string               `json:"key"`
	Dimensions map[string]ScoreStats `json:"dimensions"`
}

// ScoresComparison is the answer to GET /api/v1/scores/compare.
type ScoresComparison struct {
	Period  string        `json:"period"`
	Queue   *string       `json:"queue"`
	Scorer  *string       `json:"scorer"`
	GroupBy string        `json:"group_by"`
	Groups  []ScoresGroup `json:"groups"`
}

func (p ScoresParams) query(groupBy bool) string {
	q := url.Values{}
	for k, v := range map[string]string{"queue": p.Queue, "period": p.Period, "scorer": p.Scorer} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if groupBy && p.GroupBy != "" {
		q.Set("group_by", p.GroupBy)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// ScoresSummary summarises the scores posted in a period: per dimension,
// the mean, median, 5th percentile and count.
func (c *Client) ScoresSummary(ctx context.Context, p ScoresParams) (*ScoresSummary, error) {
	var out ScoresSummary
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/scores/summary"+p.query(false), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ScoresCompare summarises the scores per value of a tag (GroupBy
// tag:<key>), for A/B tests of prompts.
func (c *Client) ScoresCompare(ctx context.Context, p ScoresParams) (*ScoresComparison, error) {
	var out ScoresComparison
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/scores/compare"+p.query(true), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// providerError marks a handler's error as the model provider's.
type providerError struct{ err error }

func (e *providerError) Error() string { return e.err.Error() }
func (e *providerError) Unwrap() error { return e.err }

// AsProviderError marks err as a failure of the model's provider (an
// outage, a 5xx, a rate limit), not of the job: a handler that returns
// it fails the attempt with Failure.ProviderError, so a job with Routing
// moves to its next model (JobContext.Routing.Target) at once.
func AsProviderError(err error) error {
	if err == nil {
		return nil
	}
	return &providerError{err: err}
}
