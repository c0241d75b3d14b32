// Package faultclock is a wall clock that is wrong on purpose: offset from
// the machine's, running fast or slow, stepped once mid-run. It is fault
// injection only (jepsen-lite's clock scenarios give each node process one),
// off by default, and never meant for a node serving real traffic.
//
// It replaces only the node's wall clock (node.Config.Now): the times it
// stamps on windows, log entries and leases, which is what a machine whose
// clock is wrong gets wrong. Durations a node measures (timeouts, gossip,
// the wait of a forwarded batch) keep Go's monotonic clock, as they do on
// a real machine whose wall clock an NTP step moves.
package faultclock

import (
	"math"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config says how wrong the clock is. The zero Config is the machine's
// clock.
type Config struct {
	// Offset is added to the machine's time from the start.
	Offset time.Duration
	// Drift is how much faster the clock runs: 0.01 gains 10 ms a second,
	// -0.01 loses them. Within ±0.5.
	Drift float64
	// Step is added to the clock once StepAfter has passed since New:
	// an NTP step or a VM resumed. Zero: never.
	Step      time.Duration
	StepAfter time.Duration
}

// Enabled reports whether c makes the clock wrong at all.
func (c Config) Enabled() bool { return c != Config{} }

// Validate returns an error naming the first field out of range.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.Drift) || c.Drift < -0.5 || c.Drift > 0.5:
		return field.Errorf("Drift", "must be within ±0.5, got %v", c.Drift)
	case c.StepAfter < 0:
		return field.Errorf("StepAfter", "must not be negative, got %s", c.StepAfter)
	case c.Step != 0 && c.StepAfter == 0:
		return field.Errorf("StepAfter", "must be set with {Step}: when, after start, the clock steps")
	}
	return nil
}

// New returns c's clock over base (time.Now, or a test's clock), started
// now. The times it returns carry no monotonic reading, as a wall clock
// read after a step would not either. Safe for concurrent use.
func New(c Config, base func() time.Time) func() time.Time {
	if !c.Enabled() {
		return base
	}
	start := base()
	return func() time.Time {
		now := base()
		elapsed := now.Sub(start)
		t := now.Add(c.Offset + time.Duration(float64(elapsed)*c.Drift))
		if c.Step != 0 && elapsed >= c.StepAfter {
			t = t.Add(c.Step)
		}
		return t.Round(0)
	}
}
