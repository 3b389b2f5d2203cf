package corvo

import (
	"context"
	"net/http"
	"net/url"
)

// Provider is a model provider's limits per minute (nil: none), shared by
// every queue linked to it across the cluster, with what its pool used in
// the last minute and each shard's share of it.
type Provider struct {
	Name           string          `json:"name"`
	RPMLimit       *int64          `json:"rpm_limit"`
	InputTPMLimit  *int64          `json:"input_tpm_limit"`
	OutputTPMLimit *int64          `json:"output_tpm_limit"`
	Queues         []string        `json:"queues"`
	Window         ProviderWindow  `json:"window"`
	Shares         []ProviderShare `json:"shares"`
}

// ProviderWindow is what a provider's pool (or one shard's part of it)
// handed out and was reported in the last minute.
type ProviderWindow struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// ProviderShare is what one shard hosting linked queues may use of a
// provider's limits per minute (nil: that limit is not set).
type ProviderShare struct {
	Shard     int            `json:"shard"`
	RPM       *int64         `json:"rpm"`
	InputTPM  *int64         `json:"input_tpm"`
	OutputTPM *int64         `json:"output_tpm"`
	Window    ProviderWindow `json:"window"`
	// Pending is how many jobs of the shard's linked queues wait: the
	// demand the shares are rebalanced by.
	Pending int64 `json:"pending"`
}

// ProviderRequest creates a provider or changes its limits (nil or 0: no
// limit; at least one is needed).
type ProviderRequest struct {
	Name           string `json:"name"`
	RPMLimit       *int64 `json:"rpm_limit,omitempty"`
	InputTPMLimit  *int64 `json:"input_tpm_limit,omitempty"`
	OutputTPMLimit *int64 `json:"output_tpm_limit,omitempty"`
}

// QueueProvider is the answer to a link (Provider nil: unlinked).
type QueueProvider struct {
	Queue    string  `json:"queue"`
	Provider *string `json:"provider"`
}

// SetProvider creates a provider or changes its limits.
func (c *Client) SetProvider(ctx context.Context, p ProviderRequest) (*Provider, error) {
	var out Provider
	_, err := c.do(ctx, http.MethodPut, "/api/v1/providers", p, &out)
	return &out, err
}

// Providers lists the namespace's providers.
func (c *Client) Providers(ctx context.Context) ([]Provider, error) {
	var out struct {
		Providers []Provider `json:"providers"`
	}
	_, err := c.do(ctx, http.MethodGet, "/api/v1/providers", nil, &out)
	return out.Providers, err
}

// DeleteProvider removes a provider; its queues are unlinked.
func (c *Client) DeleteProvider(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/api/v1/providers/"+url.PathEscape(name), nil, nil)
	return err
}

// LinkProvider links a queue to a provider ("": unlinks it).
func (c *Client) LinkProvider(ctx context.Context, queue, provider string) (*QueueProvider, error) {
	var out QueueProvider
	body := map[string]any{"provider": nil}
	if provider != "" {
		body["provider"] = provider
	}
	_, err := c.do(ctx, http.MethodPost, "/api/v1/queues/"+url.PathEscape(queue)+"/provider", body, &out)
	return &out, err
}
