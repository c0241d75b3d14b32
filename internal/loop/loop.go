// Package loop runs a component's background work on goroutines it
// owns, and stops them: the periodic tasks of a node (sweeping, handing
// off, replicating, settling leases, sampling), each started once and
// all waited for by Stop.
package loop

import (
	"sync"
	"time"
)

// Group is a set of loops that stop together. The zero value is not
// usable; New makes one. Every, Go and Stop are safe for concurrent use;
// a loop started after Stop returns at once.
type Group struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// New returns a Group with no loop running.
func New() *Group { return &Group{stop: make(chan struct{})} }

// Every runs f every interval, on a goroutine of the group's, until Stop.
// A run that takes longer than interval delays the next; runs never
// overlap.
func (g *Group) Every(interval time.Duration, f func()) {
	g.Go(func(stop <-chan struct{}) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				f()
			}
		}
	})
}

// Go runs f on a goroutine of the group's. f must return once stop is
// closed.
func (g *Group) Go(f func(stop <-chan struct{})) {
	g.wg.Go(func() { f(g.stop) })
}

// Stop closes every loop's stop and waits for them to return. Safe to
// call more than once.
func (g *Group) Stop() {
	g.once.Do(func() { close(g.stop) })
	g.wg.Wait()
}
