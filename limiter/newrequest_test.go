package limiter_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

func ptr[T any](v T) *T { return &v }

func TestNewRequest(t *testing.T) {
	r := limiter.NewRequest("k", 5, 1500, limiter.SlidingWindowLog, nil)
	assert.Equal(t, limiter.Request{Key: "k", Limit: 5, Window: 1500 * time.Millisecond, Algorithm: limiter.SlidingWindowLog, Hits: 1}, r, "hits nil is 1")

	r = limiter.NewRequest("k", 5, 1500, limiter.SlidingWindowCounter, ptr(int64(0)))
	assert.Equal(t, int64(0), r.Hits, "hits 0 is a peek, not the default")

	r = limiter.NewRequest("k", 5, 1500, limiter.SlidingWindowCounter, ptr(int64(-3)))
	assert.Equal(t, int64(-3), r.Hits)

	// The largest window a Duration holds converts exactly.
	maxMS := int64(math.MaxInt64 / int64(time.Millisecond))
	r = limiter.NewRequest("k", 5, maxMS, limiter.SlidingWindowCounter, nil)
	assert.Equal(t, time.Duration(maxMS)*time.Millisecond, r.Window)
	assert.Positive(t, r.Window)

	// Beyond that the window is clamped, never wrapped, and the store
	// refuses it, naming the field.
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	for _, ms := range []int64{maxMS + 1, math.MaxInt64} {
		r = limiter.NewRequest("k", 5, ms, limiter.SlidingWindowCounter, nil)
		assert.Positive(t, r.Window, "window_ms %d must not wrap", ms)
		err = store.Validate(r)
		var ae *limiter.ArgumentError
		require.ErrorAs(t, err, &ae, "window_ms %d", ms)
		assert.Equal(t, "window_ms", ae.Field)
		assert.Contains(t, ae.Reason, "maximum")
	}

	// Negative windows that still fit in a Duration stay negative, so the
	// store rejects them.
	r = limiter.NewRequest("k", 5, -maxMS, limiter.SlidingWindowCounter, nil)
	assert.Negative(t, r.Window)
}

// window_ms × 10^6 overflows int64 for window_ms < MinInt64/10^6 too, and
// 1000 − 2^58 wraps to exactly 1 s, which the store accepts.
func TestNewRequestNegativeWindowOverflow(t *testing.T) {
	const ms = 1000 - 1<<58
	r := limiter.NewRequest("k", 5, ms, limiter.SlidingWindowCounter, nil)
	assert.Negative(t, r.Window, "clamped, not wrapped into a positive window")
}
