package corvo

import (
	"context"
	"net/http"
	"net/url"
)

// Budget is a spending limit over a queue (Scope "queue:<name>"), a tag
// value ("tag:<key>=<value>") or the namespace ("global"), with the spend
// of the current UTC day (Day) summed over the cluster.
type Budget struct {
	Scope     string   `json:"scope"`
	DailyUSD  *float64 `json:"daily_usd"`
	PerJobUSD *float64 `json:"per_job_usd"`
	OnExceed  string   `json:"on_exceed"` // hold, reject or alert_only
	Day       string   `json:"day"`
	SpentUSD  float64  `json:"spent_usd"`
	Exceeded  bool     `json:"exceeded"`
}

// BudgetRequest sets a scope's budget: DailyUSD, PerJobUSD or both;
// OnExceed hold (the default), reject or alert_only.
type BudgetRequest struct {
	Scope     string   `json:"scope"`
	DailyUSD  *float64 `json:"daily_usd,omitempty"`
	PerJobUSD *float64 `json:"per_job_usd,omitempty"`
	OnExceed  string   `json:"on_exceed,omitempty"`
}

// SetBudget creates or replaces the budget of a scope.
func (c *Client) SetBudget(ctx context.Context, b BudgetRequest) (*Budget, error) {
	var out Budget
	_, err := c.do(ctx, http.MethodPut, "/api/v1/budgets", b, &out)
	return &out, err
}

// Budgets lists the namespace's budgets with today's spend.
func (c *Client) Budgets(ctx context.Context) ([]Budget, error) {
	var out struct {
		Budgets []Budget `json:"budgets"`
	}
	_, err := c.do(ctx, http.MethodGet, "/api/v1/budgets", nil, &out)
	return out.Budgets, err
}

// DeleteBudget removes the budget of a scope.
func (c *Client) DeleteBudget(ctx context.Context, scope string) error {
	_, err := c.do(ctx, http.MethodDelete, "/api/v1/budgets/"+url.PathEscape(scope), nil, nil)
	return err
}
