// Package logging holds what the node's log lines share: a gate that lets
// a warning through at most once a second, so that a fault hitting every
// request costs one line a second rather than one per request, and Clip,
// which keeps text a caller sent from bloating a line.
package logging

import (
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Gate lets a log line through at most once per second. The zero value is
// ready to use; it is safe for concurrent use, and lock-free: it is asked
// on paths every request takes while a fault lasts.
type Gate struct {
	last atomic.Int64 // unix ns of the last line let through
}

// Allow reports whether a line may be logged now, and if so counts it as
// logged.
func (g *Gate) Allow() bool { return g.AllowAt(time.Now()) }

// AllowAt is Allow at now, for callers with a clock of their own.
func (g *Gate) AllowAt(now time.Time) bool {
	ns := now.UnixNano()
	last := g.last.Load()
	return ns-last >= int64(time.Second) && g.last.CompareAndSwap(last, ns)
}

// Clip shortens text a caller sent (an origin, a key) to at most 64 bytes
// for a log line or a message, so a huge one costs nothing downstream.
func Clip(s string) string { return ClipTo(s, 64) }

// ClipWithin is ClipTo with the mark counted: the result is at most n
// bytes, for a bound stated as the answer's size (an error message's).
func ClipWithin(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return ClipTo(s, n-len("…"))
}

// ClipTo returns s cut to n bytes, at a rune boundary, and marked "…"
// when it is longer.
func ClipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
