package envoyrls

import (
	"bytes"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/limiter"
)

// gcraConfig is a GCRA rule with a burst (our extension: algorithm beside
// rate_limit, burst in it), one without, and upstream's rule untouched.
const gcraConfig = `domain: edge
descriptors:
  - key: upload
    algorithm: GCRA
    rate_limit: {unit: second, requests_per_unit: 10, burst: 50}
  - key: steady
    algorithm: GCRA
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: small
    algorithm: GCRA
    rate_limit: {unit: second, requests_per_unit: 10, burst: 3}
`

func TestParseGCRA(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(gcraConfig), storeCheck(t))
	require.NoError(t, err)
	rules := cfg.Rules()
	require.Len(t, rules, 4)
	assert.Equal(t, limiter.GCRA, rules[0].Algorithm)
	assert.EqualValues(t, 50, rules[0].Burst)
	assert.Equal(t, time.Second, rules[0].Window)
	assert.Equal(t, limiter.GCRA, rules[1].Algorithm)
	assert.Zero(t, rules[1].Burst, "absent: requests_per_unit")
	assert.Equal(t, limiter.SlidingWindowCounter, rules[2].Algorithm, "upstream's meaning, unchanged")
	assert.Zero(t, rules[2].Burst)

	v := cfg.View(time.Time{})
	assert.EqualValues(t, 50, v.Rules[0].Burst)
	assert.Equal(t, "GCRA", v.Rules[0].Algorithm)
	var text bytes.Buffer
	require.NoError(t, v.WriteText(&text))
	assert.Contains(t, text.String(), "edge.upload: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, unit_multiplier: 1, algorithm: GCRA, unlimited: false, burst: 50\n")
	assert.Contains(t, text.String(), "edge.plain: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, unit_multiplier: 1, algorithm: SLIDING_WINDOW_COUNTER, unlimited: false\n")
}

func TestParseGCRAAndConcurrencyErrors(t *testing.T) {
	d := func(fields string) string {
		return "domain: a\ndescriptors:\n  - key: k\n" + fields
	}
	for _, c := range []struct {
		name, src string
		want      string
	}{
		{"burst without GCRA", d("    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      burst: 9\n"),
			`f.yaml:7: domain "a", descriptor k: burst is only for algorithm: GCRA (beside rate_limit), not SLIDING_WINDOW_COUNTER`},
		{"burst on a log", d("    algorithm: SLIDING_WINDOW_LOG\n    rate_limit: {unit: second, requests_per_unit: 5, burst: 9}\n"),
			`f.yaml:5: domain "a", descriptor k: burst is only for algorithm: GCRA (beside rate_limit), not SLIDING_WINDOW_LOG`},
		{"zero burst", d("    algorithm: GCRA\n    rate_limit: {unit: second, requests_per_unit: 5, burst: 0}\n"),
			`f.yaml:5: domain "a", descriptor k: burst must be at least 1 (absent: requests_per_unit)`},
		{"negative burst", d("    algorithm: GCRA\n    rate_limit: {unit: second, requests_per_unit: 5, burst: -1}\n"),
			`burst must be between 0 and 4294967295, got -1`},
		{"burst not a number", d("    algorithm: GCRA\n    rate_limit: {unit: second, requests_per_unit: 5, burst: lots}\n"),
			`burst must be a whole number, got "lots"`},
		{"burst with unlimited", d("    rate_limit: {unlimited: true, burst: 5}\n"), `burst has no use with unlimited: true`},
		{"burst refilling past the longest window", d("    algorithm: GCRA\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      burst: 5\n"),
			`f.yaml:8: domain "a", descriptor k: beyond this node's limits: burst 5 takes longer than the longest window`},
		{"GCRA faster than a hit per µs", d("    algorithm: GCRA\n    rate_limit: {unit: second, requests_per_unit: 2000000}\n"),
			`beyond this node's limits: requests_per_unit 2000000 per 1000 ms is over GCRA's fastest rate`},
		{"calendar GCRA", d("    algorithm: GCRA\n    rate_limit: {unit: day, requests_per_unit: 1, calendar: true}\n"),
			`f.yaml:4: domain "a", descriptor k: a calendar rate_limit is counted by SLIDING_WINDOW_COUNTER only, not GCRA`},
		{"lower-case gcra", d("    algorithm: gcra\n    rate_limit: {unit: second, requests_per_unit: 5}\n"),
			`f.yaml:4: domain "a", descriptor k: unknown algorithm "gcra"; want SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG or GCRA`},
		{"concurrency", d("    algorithm: CONCURRENCY\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"),
			`f.yaml:4: domain "a", descriptor k: algorithm CONCURRENCY is not served over Envoy's rate limit service: a slot is freed by RELEASE with its token, and Envoy sends no token back`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(c.src), storeCheck(t))
			require.Error(t, err)
			assert.Nil(t, cfg)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// A refused algorithm is reported once, not again as burst's.
	_, err := Parse("f.yaml", []byte(d("    algorithm: CONCURRENCY\n    rate_limit: {unit: minute, requests_per_unit: 5, burst: 2}\n")), storeCheck(t))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "burst")
}

// A descriptor of a GCRA rule reaches the store as a GCRA request of its
// burst; upstream's rule as it always did. (What the store decides is
// limiter's.)
func TestShouldRateLimitSendsGCRA(t *testing.T) {
	var mu sync.Mutex
	var seen []limiter.Request
	h := newHarnessFor(t, gcraConfig, func(o *serverOpts) {
		validate := o.ServerDeps.Validate
		o.ServerDeps.Validate = func(r limiter.Request) error {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
			return validate(r)
		}
	})
	h.call(t, "edge", desc("upload=u1"), desc("steady=s"), desc("plain=p"))
	// hits_addend up to the burst is checked, even past
	// requests_per_unit; past the burst it can never fit: a peek.
	for _, hits := range []uint64{30, 51} {
		d := desc("upload=u2")
		d.HitsAddend = wrapperspb.UInt64(hits)
		h.call(t, "edge", d)
	}
	d := desc("small=s")
	d.HitsAddend = wrapperspb.UInt64(5)
	resp := h.call(t, "edge", d)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode(), "past a burst under requests_per_unit: never fits")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 6)
	for i, want := range []limiter.Request{
		{Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50, Hits: 1},
		{Limit: 60, Window: time.Minute, Algorithm: limiter.GCRA, Hits: 1},
		{Limit: 10, Window: time.Second, Hits: 1},
		{Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50, Hits: 30},
		{Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50},
		{Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 3},
	} {
		got := seen[i]
		got.Key = ""
		assert.Equal(t, want, got, "descriptor %d", i)
	}
}
