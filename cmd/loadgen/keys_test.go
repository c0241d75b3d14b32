package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func draw(g *keyGen, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = g.next()
	}
	return out
}

func TestKeyNames(t *testing.T) {
	assert.Equal(t, []string{"p:0", "p:1", "p:2"}, keyNames("p:", 3))
}

func TestKeyGenIsDeterministic(t *testing.T) {
	for _, dist := range []string{distUniform, distZipf} {
		a := draw(newKeyGen(dist, 1000, 1.1, 1, 0), 500)
		b := draw(newKeyGen(dist, 1000, 1.1, 1, 0), 500)
		assert.Equal(t, a, b, "%s: same seed and stream, same keys", dist)
		assert.NotEqual(t, a, draw(newKeyGen(dist, 1000, 1.1, 2, 0), 500), "%s: another seed", dist)
		assert.NotEqual(t, a, draw(newKeyGen(dist, 1000, 1.1, 1, 1), 500), "%s: another worker's stream", dist)
	}
}

func TestUniformKeysCoverTheSpaceEvenly(t *testing.T) {
	const keys, n = 10, 100_000
	counts := make([]int, keys)
	for _, k := range draw(newKeyGen(distUniform, keys, 0, 7, 3), n) {
		if k < 0 || k >= keys {
			require.Failf(t, "key out of range", "%d not in [0, %d)", k, keys)
		}
		counts[k]++
	}
	for k, c := range counts {
		assert.InDelta(t, n/keys, c, 0.05*n/keys, "key %d", k)
	}
}

func TestZipfKeysAreSkewed(t *testing.T) {
	const keys, n = 1000, 100_000
	counts := make([]int, keys)
	for _, k := range draw(newKeyGen(distZipf, keys, 1.1, 7, 3), n) {
		if k < 0 || k >= keys {
			require.Failf(t, "key out of range", "%d not in [0, %d)", k, keys)
		}
		counts[k]++
	}
	// P(k) ∝ (1+k)^-1.1: key 0 is the hottest, about 2^1.1 ≈ 2.14 times
	// key 1, and the first 10 keys take far more than 1% of the draws.
	for k := 1; k < keys; k++ {
		if counts[k] > counts[0] {
			assert.Failf(t, "key hotter than key 0", "key %d: %d draws, key 0: %d", k, counts[k], counts[0])
		}
	}
	assert.InDelta(t, 2.14, float64(counts[0])/float64(counts[1]), 0.2)
	top10 := 0
	for _, c := range counts[:10] {
		top10 += c
	}
	assert.Greater(t, top10, n/3)
}

func TestOneKey(t *testing.T) {
	for _, dist := range []string{distUniform, distZipf} {
		assert.Equal(t, []int{0, 0, 0}, draw(newKeyGen(dist, 1, 1.5, 1, 0), 3), dist)
	}
}
