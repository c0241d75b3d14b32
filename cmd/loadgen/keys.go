package main

import (
	"math/rand/v2"
	"strconv"
)

// keyNames formats the key space once, so that workers spend their share
// of the CPU on calls, not on formatting: key i is prefix + i.
func keyNames(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// keyGen draws key indexes in [0, n) for one worker. It is deterministic:
// the same seed, stream and settings give the same sequence. Each worker
// has its own stream, so workers draw independently and without locks.
type keyGen struct {
	r    *rand.Rand
	zipf *rand.Zipf // nil: uniform
	n    uint64
}

// newKeyGen returns the generator of stream (a worker's index) under seed.
// dist is "uniform" or "zipf"; with zipf, index 0 is the most frequent key,
// and P(i) ∝ 1/(1+i)^s (math/rand/v2's Zipf with v = 1), s > 1.
func newKeyGen(dist string, n int, s float64, seed, stream uint64) *keyGen {
	g := &keyGen{r: rand.New(rand.NewPCG(seed, stream)), n: uint64(n)}
	if dist == distZipf {
		g.zipf = rand.NewZipf(g.r, s, 1, uint64(n-1))
	}
	return g
}

// next returns the next key index.
func (g *keyGen) next() int {
	if g.zipf != nil {
		return int(g.zipf.Uint64())
	}
	return int(g.r.Uint64N(g.n))
}
