package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/corvohq/corvo/statemachine"
)

// Result caching (issue 20): "cache" on enqueue. The gateway turns it into
// the job's cache key (statemachine.JobOptions.CacheKey): a hash of the
// payload, canonical (RFC 8785: key order and number spelling do not
// matter), or of the named payload members; the state machine keeps the
// entries (statemachine/cache.go).

type cacheRequest struct {
	Enabled        *bool    `json:"enabled"`
	TTL            *string  `json:"ttl"`
	Match          *string  `json:"match"`
	CacheKeyFields []string `json:"cache_key_fields"`
}

const (
	maxCacheTTLMs     = 30 * 24 * 3600 * 1000
	maxCacheKeyFields = 32
)

// cacheKeyOf validates a cache request and sets the job's cache key and
// TTL (nothing when it is absent or not enabled).
func (r *cacheRequest) apply(j *statemachine.Job) *apiError {
	if r == nil {
		return nil
	}
	if r.Enabled == nil {
		return invalid("field \"cache.enabled\" is required")
	}
	if r.TTL == nil {
		return invalid("field \"cache.ttl\" is required (e.g. \"24h\")")
	}
	ttl, aerr := parseDuration("cache.ttl", *r.TTL, false)
	if aerr != nil {
		return aerr
	}
	if ttl > maxCacheTTLMs {
		return invalid("field \"cache.ttl\" must be at most 720h")
	}
	match := "exact"
	if r.Match != nil {
		match = *r.Match
	}
	var sum [32]byte
	switch match {
	case "exact":
		if len(r.CacheKeyFields) > 0 {
			return invalid("field \"cache.cache_key_fields\" needs \"match\": \"key\"")
		}
		v := jsontext.Value(slices.Clone(j.Payload))
		if err := v.Canonicalize(); err != nil {
			return invalid("the payload cannot be hashed: %v", err)
		}
		sum = sha256.Sum256(append([]byte("exact\x00"), v...))
	case "key":
		if len(r.CacheKeyFields) == 0 || len(r.CacheKeyFields) > maxCacheKeyFields {
			return invalid("field \"cache.cache_key_fields\" must name 1–%d payload members with \"match\": \"key\"", maxCacheKeyFields)
		}
		var obj map[string]jsontext.Value
		if err := json.Unmarshal(j.Payload, &obj); err != nil || obj == nil {
			return invalid("\"match\": \"key\" needs a payload that is a JSON object")
		}
		fields := slices.Sorted(slices.Values(r.CacheKeyFields))
		fields = slices.Compact(fields)
		b := []byte("key\x00")
		for _, f := range fields {
			v := slices.Clone(obj[f])
			if len(v) == 0 {
				v = jsontext.Value("null")
			}
			if err := v.Canonicalize(); err != nil {
				return invalid("payload member %q cannot be hashed: %v", f, err)
			}
			b = append(appendString(b, f), 0)
			b = append(append(b, v...), 0)
		}
		sum = sha256.Sum256(b)
	default:
		return invalid("field \"cache.match\": unknown value %q (use exact or key)", match)
	}
	if !*r.Enabled {
		return nil
	}
	j.CacheKey, j.CacheTTLms = hex.EncodeToString(sum[:]), ttl
	return nil
}
