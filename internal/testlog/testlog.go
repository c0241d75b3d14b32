// Package testlog routes a component's logs to its test.
package testlog

import (
	"strings"
	"sync"
	"testing"
)

// Writer sends log lines to t.Log until the test's cleanups run, and drops
// them after: memberlist's probe goroutines outlive its Shutdown by a few
// milliseconds, and t.Log after a test ends panics.
type Writer struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

// New returns a writer for t. It closes itself in t.Cleanup, so create it
// before anything whose cleanup should still log (cleanups run LIFO).
func New(t testing.TB) *Writer {
	w := &Writer{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.closed = true; w.mu.Unlock() })
	return w
}

// Write logs p as one line of the test, or drops it once the test is done.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}
