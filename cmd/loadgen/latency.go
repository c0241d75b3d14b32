package main

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/internal/latency"
)

// Bounds of the latency samples kept: a worker keeps every sample up to
// its cap, then a uniform sample of all its calls (a reservoir), so memory
// is bounded however long the run.
const (
	maxSamplesPerWorker = 2_000_000
	maxSamplesTotal     = 16_000_000 // 128 MB of time.Duration at most
	minSamplesPerWorker = 4_096
)

// sampleCap is the most samples one of workers keeps.
func sampleCap(workers int) int {
	return min(maxSamplesPerWorker, max(minSamplesPerWorker, maxSamplesTotal/workers))
}

// reservoir holds one worker's latency samples. Not safe for concurrent
// use: each worker owns one and the run merges them after the workers stop.
type reservoir struct {
	lat  []time.Duration
	size int   // the most samples kept
	seen int64 // samples offered
	r    *rand.Rand
}

// newReservoir returns a reservoir of at most maxLen samples with room for
// expect of them allocated up front.
func newReservoir(maxLen, expect int, seed uint64) *reservoir {
	return &reservoir{
		lat:  make([]time.Duration, 0, min(maxLen, max(expect, 16))),
		size: maxLen,
		r:    rand.New(rand.NewPCG(seed, 0x6c6174)),
	}
}

// add offers one sample. Once full, the reservoir keeps each of the seen
// samples with the same probability size/seen (Vitter's algorithm R).
func (s *reservoir) add(d time.Duration) {
	s.seen++
	if len(s.lat) < s.size {
		s.lat = append(s.lat, d)
		return
	}
	if j := s.r.Int64N(s.seen); j < int64(s.size) {
		s.lat[j] = d
	}
}

// quantiles are the reported percentiles, in per-mille (rank arithmetic
// stays in integers: 0.999 is not exact in floating point).
var quantiles = [4]int{500, 900, 990, 999}

// mergePercentiles computes the reported percentiles over the workers'
// samples. When no reservoir overflowed, every call has one sample and the
// percentile is the nearest rank; otherwise each sample stands for
// seen/len calls of its worker and the percentiles are weighted so.
func mergePercentiles(rs []*reservoir) Percentiles {
	exact := true
	n := 0
	for _, r := range rs {
		n += len(r.lat)
		if r.seen != int64(len(r.lat)) {
			exact = false
		}
	}
	var q [4]time.Duration
	if exact {
		all := make([]time.Duration, 0, n)
		for _, r := range rs {
			all = append(all, r.lat...)
		}
		// The same nearest ranks as nearestRank at quantiles' per-milles.
		s := latency.Summarize(all)
		q = [4]time.Duration{s.P50, s.P90, s.P99, s.P999}
	} else {
		all := make([]weighted, 0, n)
		for _, r := range rs {
			if len(r.lat) == 0 {
				continue
			}
			w := float64(r.seen) / float64(len(r.lat))
			for _, d := range r.lat {
				all = append(all, weighted{d, w})
			}
		}
		slices.SortFunc(all, func(a, b weighted) int { return cmp.Compare(a.d, b.d) })
		for i, pm := range quantiles {
			q[i] = weightedRank(all, pm)
		}
	}
	return Percentiles{P50: micros(q[0]), P90: micros(q[1]), P99: micros(q[2]), P999: micros(q[3])}
}

func micros(d time.Duration) float64 { return float64(d) / 1e3 }

// nearestRank is the permille/1000 quantile of sorted by the nearest-rank
// method: the smallest sample with at least that share of samples at or
// below it. Zero for no samples.
func nearestRank(sorted []time.Duration, permille int) time.Duration {
	return latency.Percentile(sorted, float64(permille)/10)
}

// weighted is a sample standing for w calls.
type weighted struct {
	d time.Duration
	w float64
}

// weightedRank is nearestRank with weights: the smallest sample at which
// the cumulative weight reaches permille/1000 of the total. With every
// weight 1 it equals nearestRank.
func weightedRank(sorted []weighted, permille int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	var total float64
	for _, s := range sorted {
		total += s.w
	}
	target := total * float64(permille) / 1000
	var cum float64
	for _, s := range sorted {
		cum += s.w
		// The tolerance absorbs rounding in the sums: the sample whose
		// cumulative weight equals the target is the one asked for.
		if cum >= target*(1-1e-12) {
			return s.d
		}
	}
	return sorted[len(sorted)-1].d
}

// histogram is a log-linear latency histogram shared by every worker
// through atomic counters; it gives the live "p99 so far" of the progress
// line without stopping anyone. Its buckets are within 1/16 (6%) of the
// values they hold; the final report uses the exact samples instead.
type histogram struct {
	b [histBuckets]atomic.Uint64
}

// Values below 32 ns have a bucket each; above, each power of two is split
// into 16 buckets by the 4 bits after the leading one. The last bucket ends
// at the largest Duration (bits.Len64 = 63).
const histBuckets = (63-5)*16 + 32

func histBucket(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 32 {
		return int(v)
	}
	e := bits.Len64(v)         // 6..63
	top := v >> (e - 5)        // the leading 5 bits: 16..31
	return (e-5)*16 + int(top) // 32 for v = 32, continuous upwards
}

// histUpper is the largest value of bucket b.
func histUpper(b int) time.Duration {
	if b < 32 {
		return time.Duration(b)
	}
	e := b/16 + 4
	top := uint64(b%16 + 16)
	return time.Duration((top+1)<<(e-5) - 1)
}

func (h *histogram) add(d time.Duration) { h.b[histBucket(d)].Add(1) }

// quantile is the upper bound of the bucket holding the permille/1000
// quantile, by nearest rank; zero when empty.
func (h *histogram) quantile(permille int) time.Duration {
	var counts [histBuckets]uint64
	var n uint64
	for i := range h.b {
		counts[i] = h.b[i].Load()
		n += counts[i]
	}
	if n == 0 {
		return 0
	}
	rank := (n*uint64(permille) + 999) / 1000
	var cum uint64
	for i, c := range counts {
		if cum += c; cum >= max(rank, 1) {
			return histUpper(i)
		}
	}
	return histUpper(histBuckets - 1)
}
