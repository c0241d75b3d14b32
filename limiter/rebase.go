package limiter

import (
	"math/bits"
	"slices"
	"time"
)

// Rebasing. A KeyState's times are absolute, on the clock of the node
// that holds it. When it travels (a handoff, a replication), its sender
// stamps the call with its clock's now, sent, after taking the states;
// the receiver, whose clock reads now when the call arrives, moves every
// time by δ = now − sent before anything else sees them. A hit at real
// time x was stamped x + e_s (e_s: the sender's clock's error); moved, it
// is at x + e_s + δ = x + e_r + transit: its time on the receiver's clock
// plus the call's transit (and the stamp's lag behind the snapshot).
// Whatever the two clocks' skew, it cancels; what is left errs towards
// later, so a hit counts up to a transit longer (over-denial), never
// shorter.

// maxRebaseMS bounds the times Rebase moves (Unix ms, either sign: about
// 142,000 years), so that no sum overflows: a state or a stamp beyond it
// came from no clock, and is left as it is (Merge validates it).
const maxRebaseMS = 1 << 52

// Rebase moves states, which their sender took on its own clock and sent
// in a call it stamped sent, onto this node's clock, which read now when
// the call arrived (KeyState.Rebased says how), in place: each log is
// shifted in its own array, so states must be the caller's alone (a
// decoded message, or a copy).
func Rebase(states []KeyState, sent, now time.Time) {
	s, d, ok := offset(sent, now)
	if !ok {
		return
	}
	for i := range states {
		states[i].rebase(s, d)
	}
}

// offset returns sent and δ = now − sent in ms, and whether there is
// anything to move: δ ≠ 0, both in range.
func offset(sent, now time.Time) (s, d int64, ok bool) {
	s, n := sent.UnixMilli(), now.UnixMilli()
	if !inRebaseRange(s) || !inRebaseRange(n) {
		return 0, 0, false
	}
	return s, n - s, n != s
}

// Rebased returns s moved from the clock of the node that sent it, which
// read sent when it made the call, onto this node's clock, which read now
// when the call arrived: by δ = now − sent, in ms. The rules:
//
//   - A log: every entry moves by δ. An entry past now after that comes
//     only from a sender whose clock stepped back after stamping it;
//     Merge takes it as now, as before.
//   - A sliding window counter (window k, counts Prev and Curr, window
//     W): the sender's Prev is spread over its window [(k−1)W, kW), and
//     its Curr over [kW, min((k+1)W, sent)) (no hit is later than sent;
//     at least 1 ms). Both spans move by δ and each count is shared out
//     over this node's fixed windows in proportion to the overlap: the
//     counter's own model, hits uniform within their bucket. A span is at
//     most W long, so it meets at most two windows; the later one's share
//     is rounded to the nearest hit (a half up: later errs towards
//     over-denial) and the earlier one gets the rest, so no hit is made
//     or lost by rounding. The latest window a span reaches becomes the
//     window id, its count Curr and the window before's Prev; what fell
//     in older windows has left every sliding window at now, and is
//     dropped.
//   - A concurrency limit's slots: as a log's entries; their tags do
//     not change (a release finds its slot by its tag).
//   - A GCRA bucket: its TAT moves by δ, as a log's entries do (a TAT
//     moved before the epoch is 0: the bucket is empty here either way).
//   - A calendar quota: unchanged. Its window id is a civil period's
//     start in a zone, not a multiple of a duration; a skew S moves its
//     boundary by at most S (Merge).
//   - An empty state (a tombstone), a counter with negative counts or no
//     window, and times beyond ±2⁵² ms: unchanged; Merge refuses what is
//     invalid.
//
// Error bound. With δ a multiple of W (0 among them) only the window id
// moves. Otherwise a bucket whose span is n ms moves round(count·r/n)
// hits across the boundary its moved span straddles (r: the part of the
// span past it). Within the counter's model the result is exact but for
// that rounding: at most half a hit per bucket, so at most one in a
// window's count, which two buckets may share. A transit of a millisecond
// or two moves no hit at all unless a bucket holds over n/(2|δ|) of them
// (2,500 for a 10 s window and 2 ms), or its span is that short (Curr
// sent in the first milliseconds of its window, when moving it back a
// window changes no estimate).
func (s KeyState) Rebased(sent, now time.Time) KeyState {
	if ms, d, ok := offset(sent, now); ok {
		s.Log = slices.Clone(s.Log)
		s.rebase(ms, d)
	}
	return s
}

func inRebaseRange(ms int64) bool { return ms > -maxRebaseMS && ms < maxRebaseMS }

// rebase moves s by d ms; the sender's clock read sent (Unix ms).
func (s *KeyState) rebase(sent, d int64) {
	switch {
	case s.Calendar != 0:
	case s.Algorithm.Logged():
		s.rebaseLog(d)
	case s.Algorithm == SlidingWindowCounter:
		s.rebaseCounter(sent, d)
	case s.Algorithm == GCRA:
		s.rebaseGCRA(d)
	}
}

// rebaseLog moves every entry by d, unless one is out of range.
func (s *KeyState) rebaseLog(d int64) {
	for _, t := range s.Log {
		if !inRebaseRange(t) {
			return
		}
	}
	for j := range s.Log {
		s.Log[j] += d
	}
}

// rebaseCounter shares Prev and Curr out over the windows their spans,
// moved by d, meet (Rebased states the rule).
func (s *KeyState) rebaseCounter(sent, d int64) {
	w, k := s.Window.Milliseconds(), s.WindowID
	if w <= 0 || w >= maxRebaseMS || s.Prev < 0 || s.Curr < 0 || (s.Prev == 0 && s.Curr == 0) || k <= -maxRebaseMS/w || k >= maxRebaseMS/w {
		return
	}
	q := floorDiv(d, w)
	r := d - q*w // in [0, w): how far past window k+q's start each span's start lands
	if r == 0 {
		s.WindowID = k + q
		return
	}
	start := k * w
	n := min(max(sent, start+1), start+w) - start // Curr's span, in [1, w]
	// Prev's span [start−w, start) moved: w−r ms in window k+q−1, r in k+q.
	prevLater := share(s.Prev, r, w)
	// Curr's span [start, start+n) moved: up to w−r ms in window k+q, the
	// rest in k+q+1.
	if over := n - (w - r); over > 0 {
		currLater := share(s.Curr, over, n)
		s.WindowID, s.Prev, s.Curr = k+q+1, satAdd(prevLater, s.Curr-currLater), currLater
		return // Prev's share in k+q−1 has left every sliding window
	}
	s.WindowID, s.Prev, s.Curr = k+q, s.Prev-prevLater, satAdd(prevLater, s.Curr)
}

// share returns c·o/n rounded to the nearest integer, a half up: the
// share of c hits spread evenly over n ms that falls in o of them
// (c ≥ 0, 0 ≤ o ≤ n, 0 < n ≤ maxRebaseMS), computed in 128 bits. It is
// at most c.
func share(c, o, n int64) int64 {
	hi, lo := bits.Mul64(uint64(c), uint64(2*o))
	lo, carry := bits.Add64(lo, uint64(n), 0)
	q, _ := bits.Div64(hi+carry, lo, uint64(2*n)) // hi+carry ≤ n < 2n: no overflow
	return int64(q)
}
