//go:build !unix

package main

import "time"

// processCPU is not measured here: Result.CPUSeconds stays 0.
func processCPU() (time.Duration, bool) { return 0, false }
