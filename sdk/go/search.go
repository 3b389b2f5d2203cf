package corvo

import (
	"context"
	"iter"
	"net/http"
)

// Search reads one page of a search (POST /api/v1/jobs/search): pass the
// page's Cursor back in r.Cursor for the next one.
func (c *Client) Search(ctx context.Context, r SearchRequest) (*SearchPage, error) {
	var out SearchPage
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/jobs/search", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SearchPages walks a search page by page, following each page's cursor
// from r.Cursor on (keyset pagination: no duplicates or gaps while jobs
// are added), until a page says it has no more or the loop stops. An
// error ends the walk after it is yielded.
func (c *Client) SearchPages(ctx context.Context, r SearchRequest) iter.Seq2[*SearchPage, error] {
	return func(yield func(*SearchPage, error) bool) {
		for {
			page, err := c.Search(ctx, r)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || !page.HasMore || page.Cursor == nil || *page.Cursor == "" {
				return
			}
			r.Cursor = page.Cursor
		}
	}
}
