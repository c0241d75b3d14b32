// Package latency summarises latency samples, for the benchmarks and the
// load generator.
package latency

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the nearest-rank q-th percentile (0 < q ≤ 100, to a
// tenth) of samples, which must be sorted ascending; 0 for no samples.
// Nearest rank means the smallest sample with at least q % of the samples
// at or below it: always one of the samples, never an interpolation.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// ceil(n·q/100) in integers (q in permille), so that p50 of 2 samples
	// is exactly the first, with no float rounding at the boundary.
	permille := int(math.Round(q * 10))
	rank := (n*permille + 999) / 1000
	return sorted[min(max(rank, 1), n)-1]
}

// Summary holds the usual percentiles of a set of samples.
type Summary struct {
	P50, P90, P99, P999 time.Duration
}

// Summarize sorts samples in place and returns their percentiles.
func Summarize(samples []time.Duration) Summary {
	slices.Sort(samples)
	return Summary{
		P50:  Percentile(samples, 50),
		P90:  Percentile(samples, 90),
		P99:  Percentile(samples, 99),
		P999: Percentile(samples, 99.9),
	}
}
