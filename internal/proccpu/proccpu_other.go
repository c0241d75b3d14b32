//go:build !unix

// Package proccpu reads the CPU time this process has used, for the load
// generator and the benchmarks that report CPU per operation.
package proccpu

import "time"

// Self reports false: this system's process CPU time is not read.
func Self() (time.Duration, bool) { return 0, false }
