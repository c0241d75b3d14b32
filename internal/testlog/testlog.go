// Package testlog routes a component's logs to its test.
package testlog

import (
	"context"
	"fmt"
	"log/slog"
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

// WarnCounter is a slog.Handler that writes nothing and counts the records
// at Warn or above, keeping the first: a benchmark stays quiet but can
// still say that something went wrong during its timed run.
type WarnCounter struct {
	state *warnState
	attrs string
}

type warnState struct {
	mu    sync.Mutex
	n     int
	first string
}

// NewWarnCounter returns an empty counter.
func NewWarnCounter() *WarnCounter { return &WarnCounter{state: &warnState{}} }

// Reset forgets what was counted.
func (c *WarnCounter) Reset() {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	c.state.n, c.state.first = 0, ""
}

// Count returns how many records were counted and the first of them.
func (c *WarnCounter) Count() (int, string) {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	return c.state.n, c.state.first
}

// Enabled implements slog.Handler.
func (c *WarnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle implements slog.Handler.
func (c *WarnCounter) Handle(_ context.Context, r slog.Record) error {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	if c.state.n++; c.state.n == 1 {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s %s%s", r.Level, r.Message, c.attrs)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&sb, " %s", a); return true })
		c.state.first = sb.String()
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (c *WarnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	s := c.attrs
	for _, a := range as {
		s += " " + a.String()
	}
	return &WarnCounter{state: c.state, attrs: s}
}

// WithGroup implements slog.Handler.
func (c *WarnCounter) WithGroup(string) slog.Handler { return c }
