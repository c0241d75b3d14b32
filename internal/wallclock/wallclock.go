// Package wallclock is a node's wall clock: the machine's time, read so
// that it never steps.
//
// Every time a node stamps (a log entry, a counter's window, a lease) is
// compared with its own later readings and merged with other nodes'.
// Go's time.Now().UnixMilli() reads the wall clock, which an NTP step, an
// operator, or a VM resumed from a snapshot moves by seconds at once: a
// step forward makes every key the node owns look idle (a limit more,
// once), a step back puts its entries in its future. The monotonic clock
// never steps; NTP only adjusts its rate. So a node reads the wall clock
// once, at the start, and advances it by the monotonic clock, and when
// the two part (the wall clock was stepped) it slews towards the wall
// clock at most MaxSlew: a step becomes, for the node, a clock running a
// little fast or slow for a while, whose cost is bounded (docs/design.md).
package wallclock

import (
	"sync/atomic"
	"time"
)

// Machine is a machine's two clocks, as Go's time.Now reads them.
type Machine interface {
	// Now returns the wall time (without a monotonic reading) and the
	// monotonic time since an origin of the Machine's choosing. Safe for
	// concurrent use.
	Now() (wall time.Time, mono time.Duration)
}

// System is this machine's clocks.
func System() Machine { return system{time.Now()} }

type system struct{ start time.Time }

func (s system) Now() (time.Time, time.Duration) {
	t := time.Now()
	return t.Round(0), t.Sub(s.start) // Sub of two readings uses their monotonic clocks
}

// DefaultMaxSlew is how fast a node's clock catches up with a stepped wall
// clock: 1 %, 10 ms a second (5 s in about 8 minutes). Faster slews admit
// more while they last (a clock 1 % fast admits up to 1 % more per
// window); slower ones leave the node skewed from the others longer.
const DefaultMaxSlew = 0.01

// slewEvery is how often the correction is recomputed: often enough that
// the clock moves smoothly, rarely enough to cost nothing per reading.
const slewEvery = 10 * time.Millisecond

// Steady returns a clock that reads m's wall time now and then advances by
// m's monotonic clock, slewing towards m's wall time at most maxSlew (0.01:
// 10 ms a second) when the two part. It never steps and, for maxSlew < 1,
// never goes back. Safe for concurrent use.
func Steady(m Machine, maxSlew float64) func() time.Time {
	wall, mono := m.Now()
	s := &steady{m: m, maxSlew: maxSlew, anchor: wall.Add(-mono)}
	s.last.Store(int64(mono))
	return s.now
}

type steady struct {
	m       Machine
	maxSlew float64
	anchor  time.Time    // the wall time at monotonic zero
	corr    atomic.Int64 // ns added to anchor + mono: the slew so far
	last    atomic.Int64 // the monotonic ns of the last slew
}

func (s *steady) now() time.Time {
	wall, mono := s.m.Now()
	base := s.anchor.Add(mono)
	if l := s.last.Load(); int64(mono)-l >= int64(slewEvery) && s.last.CompareAndSwap(l, int64(mono)) {
		s.slew(wall.Sub(base), mono-time.Duration(l))
	}
	return base.Add(time.Duration(s.corr.Load()))
}

// slew moves the correction towards target (how far the wall clock is
// from the monotonic one), by at most maxSlew × dt. Only the goroutine
// that won the CompareAndSwap on last calls it.
func (s *steady) slew(target, dt time.Duration) {
	c := time.Duration(s.corr.Load())
	most := time.Duration(float64(dt) * s.maxSlew)
	switch diff := target - c; {
	case diff > most:
		c += most
	case diff < -most:
		c -= most
	default:
		c = target
	}
	s.corr.Store(int64(c))
}
