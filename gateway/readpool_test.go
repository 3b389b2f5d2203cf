package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/mirror"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// TestReadPoolBound: at most `running` reads hold a slot and `queued`
// more wait; one more is refused at once, and a waiting one gives up
// when its context ends; a released slot goes to a waiting read.
func TestReadPoolBound(t *testing.T) {
	t.Parallel()
	p := newReadPool(1, 1)
	require.NoError(t, p.acquire(context.Background()))
	require.Equal(t, 1, p.running())

	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- p.acquire(ctx) }()
	require.Eventually(t, func() bool { return p.waiting() == 1 }, 10*time.Second, time.Millisecond)

	require.ErrorIs(t, p.acquire(context.Background()), errReadQueueFull, "the queue is full")
	cancel()
	require.ErrorIs(t, <-waited, context.Canceled)
	require.Equal(t, 0, p.waiting())

	got := make(chan error, 1)
	go func() { got <- p.acquire(context.Background()) }()
	require.Eventually(t, func() bool { return p.waiting() == 1 }, 10*time.Second, time.Millisecond)
	p.release()
	require.NoError(t, <-got, "the released slot goes to the waiting read")
	require.Equal(t, 1, p.running())
	p.release()
	require.Equal(t, 0, p.running())
}

// TestPooledReadDeadline: a pooled read runs with a deadline ReadTimeout
// after the (injected) clock's now; with every slot taken and no room to
// wait it answers 429 reads_busy with Retry-After, and so does one whose
// deadline passes while it waits.
func TestPooledReadDeadline(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	s := &Server{cfg: Config{ReadTimeout: 700 * time.Millisecond}, reads: newReadPool(1, 0), clock: fixedClock{now}}
	var deadline time.Time
	h := s.pooled(func(ctx *fasthttp.RequestCtx) {
		rctx, cancel := s.readContext(ctx)
		defer cancel()
		deadline, _ = rctx.Deadline()
		ctx.SetStatusCode(200)
	})
	var ctx fasthttp.RequestCtx
	h(&ctx)
	require.Equal(t, 200, ctx.Response.StatusCode())
	require.Equal(t, now.Add(700*time.Millisecond), deadline)
	require.Equal(t, 0, s.reads.running(), "released")

	require.NoError(t, s.reads.acquire(context.Background())) // the only slot
	var busy fasthttp.RequestCtx
	h(&busy)
	require.Equal(t, 429, busy.Response.StatusCode())
	require.Equal(t, "1", string(busy.Response.Header.Peek("Retry-After")))
	var e struct{ Code string }
	require.NoError(t, json.Unmarshal(busy.Response.Body(), &e))
	require.Equal(t, "reads_busy", e.Code)

	// Room to wait, but the deadline (the clock is an hour behind) has
	// passed: refused without waiting.
	s.reads = newReadPool(1, 1)
	s.clock = fixedClock{time.Now().Add(-time.Hour)}
	require.NoError(t, s.reads.acquire(context.Background()))
	var late fasthttp.RequestCtx
	h(&late)
	require.Equal(t, 429, late.Response.StatusCode())
}

// searchOnly is a mirror whose searches answer page or err.
type searchOnly struct {
	Mirror
	page *mirror.Page
	err  error
}

func (m searchOnly) Search(context.Context, mirror.Filter) (*mirror.Page, error) {
	return m.page, m.err
}

// TestSearchLocalDeadline: a page the deadline cut stays partial; a
// search that found nothing names the criteria without an index (400
// filter_needs_index), or, when every criterion has one, is a 429 to retry
// — never a 503.
func TestSearchLocalDeadline(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{ReadTimeout: time.Second}}
	s.cfg.Mirror = searchOnly{page: &mirror.Page{Jobs: []mirror.Row{{ID: "job_0_A"}}, SortValues: []int64{5}, Partial: true, HasMore: true, Total: 1}}
	res, aerr := s.searchLocal(context.Background(), mirror.Filter{})
	require.Nil(t, aerr)
	require.True(t, res.partial)
	require.True(t, res.hasMore)

	s.cfg.Mirror = searchOnly{err: &mirror.DeadlineError{Unindexed: []string{"payload_jq"}, Err: context.DeadlineExceeded}}
	_, aerr = s.searchLocal(context.Background(), mirror.Filter{})
	require.NotNil(t, aerr)
	require.Equal(t, 400, aerr.status)
	require.Equal(t, "filter_needs_index", aerr.code)
	require.Contains(t, aerr.msg, "payload_jq")

	s.cfg.Mirror = searchOnly{err: &mirror.DeadlineError{Err: context.DeadlineExceeded}}
	_, aerr = s.searchLocal(context.Background(), mirror.Filter{})
	require.Equal(t, 429, aerr.status)
	require.Equal(t, "reads_busy", aerr.code)

	s.cfg.Mirror = searchOnly{err: errors.New("disk I/O error")}
	_, aerr = s.searchLocal(context.Background(), mirror.Filter{})
	require.Equal(t, 500, aerr.status, "other failures stay internal errors")
}

// TestMergePartialParts: a partial part's matches stop at its last hit;
// the merged page drops the other parts' hits beyond it, so its cursor
// skips no match of the partial part.
func TestMergePartialParts(t *testing.T) {
	t.Parallel()
	hit := func(v int64, id string) searchHit { return searchHit{v: v, id: id} }
	full := &searchResult{hits: []searchHit{hit(9, "a"), hit(7, "b"), hit(3, "c"), hit(1, "d")}, total: 4}
	cut := &searchResult{hits: []searchHit{hit(8, "x"), hit(5, "y")}, total: 2, hasMore: true, partial: true}
	got := mergeParts(true, 50, full, cut)
	var ids []string
	for _, h := range got.hits {
		ids = append(ids, h.id)
	}
	require.Equal(t, []string{"a", "x", "b", "y"}, ids, "nothing after the partial part's last hit (5)")
	require.True(t, got.partial)
	require.True(t, got.hasMore)
	require.Equal(t, mirror.CursorAfter(5, "y"), got.cursor)

	whole := mergeParts(true, 50, full, &searchResult{hits: []searchHit{hit(8, "x")}, total: 1})
	require.False(t, whole.partial)
	require.False(t, whole.hasMore)
	require.Len(t, whole.hits, 5)
}
