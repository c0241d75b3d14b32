// Package latency summarises latency samples, for the benchmarks and the
// load generator.
package latency

import (
	"slices"
	"time"
)

// Percentile returns the nearest-rank q-th percentile (0 < q ≤ 100) of
// samples, which must be sorted ascending; 0 for no samples. Nearest rank
// means the result is always one of the samples, never an interpolation.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// ceil(n·q/100) as a rank from 1, computed in integers where possible
	// so that p50 of 2 samples is the first, not a float artefact.
	rank := int(float64(len(sorted))*q/100 + 0.999999999)
	return sorted[min(max(rank, 1), len(sorted))-1]
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
