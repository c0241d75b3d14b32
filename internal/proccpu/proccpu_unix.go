//go:build unix

// Package proccpu reads the CPU time this process has used, for the load
// generator and the benchmarks that report CPU per operation.
package proccpu

import (
	"syscall"
	"time"
)

// Self returns the CPU time this process has used so far, user and
// system, over all its threads, and whether the system reported it.
func Self() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
