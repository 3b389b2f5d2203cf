package gateway

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// appendTimeUTC writes what time's own formatter writes for TimeFormat,
// for every instant an int64 of nanoseconds can hold.
func TestAppendTimeMatchesTimeFormat(t *testing.T) {
	t.Parallel()
	check := func(ns int64) {
		t.Helper()
		want := `"` + time.Unix(0, ns).UTC().Format(TimeFormat) + `"`
		if got := string(appendTime(nil, ns)); got != want {
			t.Fatalf("%d: %s, want %s", ns, got, want)
		}
	}
	for _, ns := range []int64{1, -1, 999_999, 1_000_000, 1_771_000_000_123_456_789, math.MaxInt64, math.MinInt64 + 1, 951_782_400_000_000_000 /* 2000-02-29 */} {
		check(ns)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		check(r.Int64() - r.Int64()/2*2) // both signs
	}
	if got := string(appendTime(nil, 0)); got != "null" {
		t.Fatalf("0: %s", got)
	}
}

func FuzzAppendTime(f *testing.F) {
	f.Add(int64(1_771_000_000_123_456_789))
	f.Fuzz(func(t *testing.T, ns int64) {
		if ns == 0 {
			return
		}
		want := `"` + time.Unix(0, ns).UTC().Format(TimeFormat) + `"`
		if got := string(appendTime(nil, ns)); got != want {
			t.Fatalf("%d: %s, want %s", ns, got, want)
		}
	})
}
