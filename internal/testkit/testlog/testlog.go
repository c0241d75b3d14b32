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

// Capture is a slog.Handler that keeps every record, with its attributes
// (those added by With included) as strings, for tests that assert on what
// a component logged. Safe for concurrent use.
type Capture struct {
	root  *captureState
	attrs []slog.Attr
}

type captureState struct {
	mu      sync.Mutex
	records []Record
}

// Record is one captured log record.
type Record struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// NewCapture returns an empty capture.
func NewCapture() *Capture { return &Capture{root: &captureState{}} }

// Enabled implements slog.Handler: every level is kept.
func (c *Capture) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (c *Capture) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.Attrs[a.Key] = a.Value.String(); return true })
	c.root.mu.Lock()
	defer c.root.mu.Unlock()
	c.root.records = append(c.root.records, rec)
	return nil
}

// WithAttrs implements slog.Handler.
func (c *Capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &Capture{root: c.root, attrs: append(append([]slog.Attr(nil), c.attrs...), as...)}
}

// WithGroup implements slog.Handler; groups are flattened.
func (c *Capture) WithGroup(string) slog.Handler { return c }

// Find returns the records whose message contains msg.
func (c *Capture) Find(msg string) []Record {
	c.root.mu.Lock()
	defer c.root.mu.Unlock()
	var out []Record
	for _, r := range c.root.records {
		if strings.Contains(r.Msg, msg) {
			out = append(out, r)
		}
	}
	return out
}
