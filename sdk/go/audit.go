package corvo

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The audit log: GET /api/v1/audit (see docs/api.md, "Audit log").

// AuditRecord is one audited call.
type AuditRecord struct {
	ID        string    `json:"id"`
	At        time.Time `json:"at"`
	KeyID     string    `json:"key_id"`   // "" for an anonymous caller, or a refused one that sent no key of ours
	KeyName   string    `json:"key_name"` // "anonymous" on an open server, "cluster" for another node
	Role      string    `json:"role"`
	Namespace string    `json:"namespace"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Status    int       `json:"status"`
	Summary   string    `json:"summary"`
	Remote    string    `json:"remote"`
}

// AuditPage is GET /api/v1/audit: records newest first.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	HasMore bool          `json:"has_more"`
	Cursor  *string       `json:"cursor"`
}

// AuditFilter selects audit records; zero fields select any.
type AuditFilter struct {
	Namespace  string
	KeyID      string
	Method     string
	PathPrefix string
	Status     int
	Since      time.Time // inclusive
	Until      time.Time // exclusive
	Limit      int       // 1–1000, default 50
	Cursor     string    // the cursor of the previous page
}

// Query is the filter as GET /api/v1/audit's query string.
func (f AuditFilter) Query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "key_id": f.KeyID, "method": f.Method,
		"path_prefix": f.PathPrefix, "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Status != 0 {
		q.Set("status", strconv.Itoa(f.Status))
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// Audit reads one page of the audit log.
func (c *Client) Audit(ctx context.Context, f AuditFilter) (*AuditPage, error) {
	var out AuditPage
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/audit?"+f.Query().Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
