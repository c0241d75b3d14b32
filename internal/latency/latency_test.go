package latency

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentileIsNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	assert.Zero(t, Percentile(nil, 50))
	s := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	assert.Equal(t, 5*time.Millisecond, Percentile(s, 50))
	assert.Equal(t, 9*time.Millisecond, Percentile(s, 90))
	assert.Equal(t, 10*time.Millisecond, Percentile(s, 99))
	assert.Equal(t, 1*time.Millisecond, Percentile(s, 0.1))
	assert.Equal(t, 1*time.Millisecond, Percentile(ms(1, 2), 50), "ceil(2×0.5) = rank 1")

	big := make([]time.Duration, 1000)
	for i := range big {
		big[i] = time.Duration(1000-i) * time.Microsecond // unsorted: Summarize sorts
	}
	sum := Summarize(big)
	assert.Equal(t, Summary{P50: 500 * time.Microsecond, P90: 900 * time.Microsecond, P99: 990 * time.Microsecond, P999: 999 * time.Microsecond}, sum)
}
