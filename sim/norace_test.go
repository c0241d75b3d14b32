//go:build !race

package sim_test

// defaultSeeds without the race detector: make test's budget.
const defaultSeeds = 100
