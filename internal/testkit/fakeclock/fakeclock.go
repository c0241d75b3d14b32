// Package fakeclock is the clock tests give the code they drive: it stands
// still until the test moves it, so a sequence never crosses a window's
// edge by accident and nothing sleeps.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Clock is a wall clock moved by hand. Safe for concurrent use, and
// lock-free: benchmarks read it on every check.
type Clock struct {
	ns atomic.Int64 // Unix ns
}

// At returns a Clock reading t.
func At(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// AtMilli returns a Clock reading ms, in Unix milliseconds.
func AtMilli(ms int64) *Clock { return At(time.UnixMilli(ms)) }

// Now returns the clock's time. It has the signature of time.Now, for
// the code under test.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock by d (back, for a negative d).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }
