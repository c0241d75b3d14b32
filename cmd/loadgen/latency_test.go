package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func durations(vs ...int) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v)
	}
	return out
}

func TestNearestRank(t *testing.T) {
	one100 := make([]time.Duration, 100) // 1..100
	for i := range one100 {
		one100[i] = time.Duration(i + 1)
	}
	one1000 := make([]time.Duration, 1000)
	for i := range one1000 {
		one1000[i] = time.Duration(i + 1)
	}
	cases := []struct {
		name     string
		sorted   []time.Duration
		permille int
		want     time.Duration
	}{
		{"empty", nil, 500, 0},
		{"one sample is every percentile", durations(7), 999, 7},
		{"p50 of 1..100", one100, 500, 50},
		{"p90 of 1..100", one100, 900, 90},
		{"p99 of 1..100", one100, 990, 99},
		{"p99.9 of 1..100 is the max", one100, 999, 100},
		{"p99.9 of 1..1000", one1000, 999, 999},
		{"p50 of 4 is the 2nd", durations(10, 20, 30, 40), 500, 20},
		{"p90 of 4 is the 4th", durations(10, 20, 30, 40), 900, 40},
		{"p0 is the min", durations(10, 20, 30), 0, 10},
		{"p100 is the max", durations(10, 20, 30), 1000, 30},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, nearestRank(c.sorted, c.permille), c.name)
	}
}

func TestWeightedRankWithUnitWeightsIsNearestRank(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 300; n += 7 {
		vs := make([]time.Duration, n)
		ws := make([]weighted, n)
		for i := range vs {
			vs[i] = time.Duration(r.IntN(1000))
		}
		slices.Sort(vs)
		for i, v := range vs {
			ws[i] = weighted{v, 1}
		}
		for _, pm := range []int{0, 1, 500, 900, 990, 999, 1000} {
			assert.Equal(t, nearestRank(vs, pm), weightedRank(ws, pm), "n=%d permille=%d", n, pm)
		}
	}
	assert.Zero(t, weightedRank(nil, 500))
}

func TestWeightedRankHonoursWeights(t *testing.T) {
	// 10 stands for 9 calls, 1000 for 1: p50 and p90 are 10, p99 is 1000.
	s := []weighted{{10, 9}, {1000, 1}}
	assert.Equal(t, time.Duration(10), weightedRank(s, 500))
	assert.Equal(t, time.Duration(10), weightedRank(s, 900))
	assert.Equal(t, time.Duration(1000), weightedRank(s, 990))
}

func TestMergePercentilesExact(t *testing.T) {
	// Two workers share 1..1000 µs between them, in no order.
	a, b := newReservoir(10_000, 0, 1), newReservoir(10_000, 0, 2)
	for i := 1000; i >= 1; i-- {
		if i%3 == 0 {
			a.add(time.Duration(i) * time.Microsecond)
		} else {
			b.add(time.Duration(i) * time.Microsecond)
		}
	}
	p := mergePercentiles([]*reservoir{a, b, newReservoir(10, 0, 3)})
	assert.Equal(t, Percentiles{P50: 500, P90: 900, P99: 990, P999: 999}, p)
	assert.Equal(t, Percentiles{}, mergePercentiles(nil))
}

func TestReservoirIsBoundedAndUniform(t *testing.T) {
	const capacity, n = 1000, 100_000
	r := newReservoir(capacity, 10, 1)
	for i := range n {
		r.add(time.Duration(i))
	}
	require.Len(t, r.lat, capacity)
	assert.Equal(t, int64(n), r.seen)
	// A uniform sample of 0..n-1: its median is near n/2 and it has
	// samples from the whole range.
	s := slices.Clone(r.lat)
	slices.Sort(s)
	assert.InDelta(t, n/2, float64(nearestRank(s, 500)), n/10)
	assert.Less(t, float64(s[0]), 0.01*n)
	assert.Greater(t, float64(s[len(s)-1]), 0.99*n)
}

func TestMergePercentilesWeighsOverflowedReservoirs(t *testing.T) {
	// A fast worker made 90,000 calls of 100µs and kept 1,000 of them; a
	// slow one made 10,000 calls of 10ms and kept them all. Of the
	// 100,000 calls 90% took 100µs: the p50 is 100µs and the p99 is 10ms,
	// where unweighted samples (1,000 fast, 10,000 slow) would say 10ms
	// for both.
	fast, slow := newReservoir(1000, 0, 1), newReservoir(20_000, 0, 2)
	for range 90_000 {
		fast.add(100 * time.Microsecond)
	}
	for range 10_000 {
		slow.add(10 * time.Millisecond)
	}
	p := mergePercentiles([]*reservoir{fast, slow})
	assert.Equal(t, 100.0, p.P50)
	assert.Equal(t, 100.0, p.P90)
	assert.Equal(t, 10_000.0, p.P99)
}

func TestSampleCap(t *testing.T) {
	assert.Equal(t, maxSamplesPerWorker, sampleCap(1))
	assert.Equal(t, maxSamplesTotal/64, sampleCap(64))
	assert.Equal(t, minSamplesPerWorker, sampleCap(1_000_000))
}

func TestHistogramBuckets(t *testing.T) {
	prev := -1
	for _, v := range []time.Duration{0, 1, 31, 32, 33, 63, 64, 100, 1000, time.Millisecond, time.Second, time.Hour, 1<<63 - 1} {
		b := histBucket(v)
		require.Less(t, b, histBuckets, "bucket of %d", v)
		assert.GreaterOrEqual(t, b, prev, "buckets grow with values")
		prev = b
		up := histUpper(b)
		assert.GreaterOrEqual(t, up, v, "the bucket of %d holds it", v)
		if b > 0 {
			assert.Less(t, histUpper(b-1), v, "the bucket before %d's ends below it", v)
		}
		assert.LessOrEqual(t, float64(up-v), float64(v)/16+1, "within 1/16 of %d", v)
	}
	// Consecutive buckets tile the range.
	for b := 1; b < histBuckets; b++ {
		assert.Equal(t, b, histBucket(histUpper(b-1)+1), "bucket %d starts right after %d", b, b-1)
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h histogram
	assert.Zero(t, h.quantile(990))
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	got := h.quantile(990)
	assert.InEpsilon(t, float64(990*time.Microsecond), float64(got), 1.0/16)
	assert.GreaterOrEqual(t, got, 990*time.Microsecond)
}
