//go:build race

package sim_test

// defaultSeeds under the race detector, which makes a seed about ten
// times dearer: a few, so that make test's race run sees the node's code
// under faults; make test runs a hundred more without it.
const defaultSeeds = 3
