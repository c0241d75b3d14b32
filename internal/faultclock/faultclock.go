// Package faultclock is a wall clock that is wrong on purpose: offset from
// the machine's, running fast or slow, stepped once mid-run. It is fault
// injection only (jepsen-lite's clock scenarios give each node process one),
// off by default, and never meant for a node serving real traffic.
//
// It is the machine a node reads its wall clock from (wallclock.Steady,
// node.Config.Now): the times it stamps on windows, log entries and
// leases. Durations the node measures with Go's runtime (timeouts, gossip,
// the wait of a forwarded batch) keep the real machine's clock: offsets
// and steps never reach them on a real machine either, and a 1 % drift
// there changes nothing measurable.
package faultclock

import (
	"math"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/wallclock"
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

// MaxShift bounds Offset and Step. Real clocks go wrong by seconds to
// minutes (a VM resumed after a day, the worst case, steps by a day); a
// wrong clock further out tests nothing more, and one before 1970 clamps
// and freezes the node's time (-1000000h did: a denied key stayed
// denied). Fault injection of longer spans belongs to a fake clock.
const MaxShift = 24 * time.Hour

// Validate returns an error naming the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Offset < -MaxShift || c.Offset > MaxShift:
		return field.Errorf("Offset", "must be within ±%s, got %s", MaxShift, c.Offset)
	case math.IsNaN(c.Drift) || c.Drift < -0.5 || c.Drift > 0.5:
		return field.Errorf("Drift", "must be within ±0.5, got %v", c.Drift)
	case c.Step < -MaxShift || c.Step > MaxShift:
		return field.Errorf("Step", "must be within ±%s, got %s", MaxShift, c.Step)
	case c.StepAfter < 0:
		return field.Errorf("StepAfter", "must not be negative, got %s", c.StepAfter)
	case c.Step != 0 && c.StepAfter == 0:
		return field.Errorf("StepAfter", "must be set with {Step}: when, after start, the clock steps")
	case c.StepAfter != 0 && c.Step == 0:
		return field.Errorf("StepAfter", "is set without {Step}: the clock would never step")
	}
	return nil
}

// Kinds names the faults c injects, for the node to show
// (peerlimit_fault_injection_active{kind}, /v1/members): clock_offset,
// clock_drift, clock_step. Empty for the zero Config.
func (c Config) Kinds() []string {
	var out []string
	if c.Offset != 0 {
		out = append(out, "clock_offset")
	}
	if c.Drift != 0 {
		out = append(out, "clock_drift")
	}
	if c.Step != 0 {
		out = append(out, "clock_step")
	}
	return out
}

// New returns a machine whose clocks are base's made wrong by c: its
// wall clock offset, drifting and stepped, its monotonic clock drifting
// with it (both run on one oscillator; a step moves the wall clock
// alone). A node reads it through wallclock.Steady, as it reads the real
// machine's. Safe for concurrent use.
func New(c Config, base wallclock.Machine) wallclock.Machine {
	if !c.Enabled() {
		return base
	}
	_, start := base.Now()
	return &machine{c: c, base: base, start: start}
}

type machine struct {
	c     Config
	base  wallclock.Machine
	start time.Duration // base's monotonic time at New
}

func (m *machine) Now() (time.Time, time.Duration) {
	wall, mono := m.base.Now()
	elapsed := mono - m.start
	drift := time.Duration(float64(elapsed) * m.c.Drift)
	wall = wall.Add(m.c.Offset + drift)
	if m.c.Step != 0 && elapsed >= m.c.StepAfter {
		wall = wall.Add(m.c.Step)
	}
	return wall, mono + drift
}
