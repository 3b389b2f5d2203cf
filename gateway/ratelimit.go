package gateway

import (
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Per-key request rates (spec 001: 2000 reads and 1000 writes a second per
// client by default). Each node keeps a token bucket per key and class
// (GET reads; POST, PUT, PATCH, DELETE writes), holding one second's worth:
// a key may burst to its rate, then gets 429 rate_limited with the seconds
// until its next token in Retry-After. A key's own rates (rate_read,
// rate_write) replace the server's; -1 lifts the limit. Anonymous callers
// of an open server and other nodes are not limited; a single sign-on user
// (oidc.go) has buckets of its own, by subject, at the server's rates. The
// buckets are this node's: behind a load balancer over N nodes a key may
// reach N times its rate.

// Defaults of Config.RateRead and Config.RateWrite.
const (
	RateReadDefault  = 2000
	RateWriteDefault = 1000
)

// bucket is one key's token bucket for one class.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   int64 // Unix ns of the last refill
}

// take takes a token at now from a bucket that refills rate tokens a second
// up to burst; it returns 0, or how long until a token is there.
func (b *bucket) take(now int64, rate, burst float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == 0 {
		b.tokens, b.last = burst, now
	}
	b.tokens = min(burst, b.tokens+float64(now-b.last)/1e9*rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / rate * 1e9)
}

// rateLimits holds the buckets by key ID (or "sso:<subject>").
type rateLimits struct {
	read, write sync.Map // key ID or "sso:<subject>" → *bucket
}

// limiter is whose buckets a request takes from: a key, or a single
// sign-on user (by subject, at the server's rates).
type limiter struct {
	id, name    string
	read, write int // the key's own rates (0: the server's)
}

// limit takes a token of the caller's class for this request; it answers
// 429 itself (false) when the caller is over its rate.
func (s *Server) limit(ctx *fasthttp.RequestCtx, k limiter, now int64) bool {
	write := !ctx.IsGet() && !ctx.IsHead()
	rate, m := s.cfg.RateRead, &s.limits.read
	if k.read != 0 {
		rate = k.read
	}
	if write {
		rate, m = s.cfg.RateWrite, &s.limits.write
		if k.write != 0 {
			rate = k.write
		}
	}
	if rate < 0 {
		return true
	}
	v, ok := m.Load(k.id)
	if !ok {
		v, _ = m.LoadOrStore(k.id, &bucket{})
	}
	wait := v.(*bucket).take(now, float64(rate), float64(rate))
	if wait == 0 {
		return true
	}
	secs := int64(wait/time.Second) + 1
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
	class := "reads"
	if write {
		class = "writes"
	}
	writeError(ctx, codeRateLimited.errf("%q is over its rate of %d %s a second on this node; retry after %d s", k.name, rate, class, secs))
	return false
}
