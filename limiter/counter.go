package limiter

import "math/bits"

// counterState is the sliding window counter of one key: two fixed-window
// counts and the id of the current window. 24 bytes, whatever the limit.
type counterState struct {
	window int64 // id of the current fixed window, floor(t / W)
	prev   int64 // hits allowed in window-1
	curr   int64 // hits allowed in window
	// mark and slot place the state's record in its shard's journal
	// (Config.TrackChanges): the epoch it was last journaled in, and where.
	mark, slot uint32
}

// counterResult is what a counter decision needs to report, in milliseconds.
type counterResult struct {
	allowed    bool
	count      int64 // floored estimate before the request
	retryAfter int64
	resetAfter int64
}

// rollTo rolls s to the window of now (ms) for window w and returns that
// window's id and now, clamped: a now before s's window (a clock that
// stepped back, or a late stamp) is taken as the start of s's window, so
// state never moves backwards. Small enough to be inlined into Check.
func (s *counterState) rollTo(now, w int64) (id, clamped int64) {
	id = floorDiv(now, w)
	if id < s.window {
		id, now = s.window, s.window*w
	}
	s.roll(id)
	return id, now
}

// decideCounter decides a request of hits at time now (ms) for window w (ms)
// and updates s. It requires 0 ≤ hits ≤ limit and w > 0.
//
// If now falls in a window older than s's (the clock stepped back, or a
// stamped request arrived late), the request is decided at the start of s's
// window: state never moves backwards, so a key cannot regain allowance by
// time travel.
func decideCounter(s *counterState, now, w, limit, hits int64) counterResult {
	id, now := s.rollTo(now, w)
	elapsed := now - id*w

	est := satAdd(weighted(s.prev, w-elapsed, w), s.curr)
	r := counterResult{count: est}
	// floor(estimate) + hits ≤ limit, written so that it cannot overflow.
	r.allowed = est <= limit-hits
	if r.allowed {
		s.curr += hits // cannot overflow: curr ≤ est ≤ limit-hits
	} else {
		r.retryAfter = counterRetryAfter(s, elapsed, w, limit, hits)
	}
	r.resetAfter = counterExpiry(s, w) - now
	if r.resetAfter < 0 {
		r.resetAfter = 0
	}
	return r
}

// refillAfter is the time (ms) from now until s's current window ends, from
// which on the hits counted in it weigh less and less: in (0, w] once
// decideCounter has rolled s to now's window. now is clamped to the window's
// start as decideCounter clamps a clock that stepped back. It is derived from
// s, not carried in counterResult, which the hot path keeps small.
func (s *counterState) refillAfter(now, w int64) int64 {
	return (s.window+1)*w - max(now, s.window*w)
}

// roll moves s forward to window id (id ≥ s.window).
func (s *counterState) roll(id int64) {
	switch id - s.window {
	case 0:
		return
	case 1:
		s.prev, s.curr = s.curr, 0
	default:
		// Two or more windows passed: both counts are out of reach. (Seed 002
		// says "previous = current" on any rollover, which would wrongly keep a
		// count from long ago; seed 004's counter[window-1] is what we do.)
		s.prev, s.curr = 0, 0
	}
	s.window = id
}

// within returns s placed no later than window at: s itself if it is
// not later, else everything s still counts (prev and curr) as at's
// current count. A state from a clock ahead of ours thus loses no hit and
// never drags a key into a window our clock has not reached; its hits
// count a little longer than their sender would count them.
func (s counterState) within(at int64) counterState {
	if s.window <= at {
		return s
	}
	return counterState{window: at, curr: satAdd(s.prev, s.curr)}
}

// counterExpiry is the time (ms) from which s holds nothing: the current
// count weighs nothing once the window after next begins, the previous count
// nothing once the next window begins.
func counterExpiry(s *counterState, w int64) int64 {
	switch {
	case s.curr > 0:
		return (s.window + 2) * w
	case s.prev > 0:
		return (s.window + 1) * w
	default:
		return s.window * w
	}
}

// counterRetryAfter solves, for a denied request, the earliest time after
// which it would be allowed if nothing else arrived. The estimate only falls
// as time passes, so it is the first instant the inequality holds: in the
// current window (prev decaying), else in the next one (curr becomes prev),
// else at the start of the window after (all counts gone).
func counterRetryAfter(s *counterState, elapsed, w, limit, hits int64) int64 {
	if room := limit - s.curr - hits; room >= 0 {
		if at, ok := firstFit(s.prev, room, w, elapsed); ok {
			return at - elapsed
		}
	}
	if at, ok := firstFit(s.curr, limit-hits, w, 0); ok {
		return w - elapsed + at
	}
	return 2*w - elapsed
}

// firstFit returns the smallest elapsed time x in [from, w) at which
// floor(p × (w−x)/w) ≤ room, i.e. p × (w−x) < (room+1) × w.
// Requires room ≥ 0, p ≥ 0, 0 ≤ from.
func firstFit(p, room, w, from int64) (int64, bool) {
	if p == 0 {
		return from, from < w
	}
	// w − x ≤ floor(((room+1)·w − 1) / p), computed in 128 bits.
	hi, lo := bits.Mul64(uint64(room)+1, uint64(w))
	lo, borrow := bits.Sub64(lo, 1, 0)
	hi -= borrow
	span := uint64(w)
	if hi < uint64(p) { // otherwise the quotient is ≥ 2^64 > w
		if q, _ := bits.Div64(hi, lo, uint64(p)); q < span {
			span = q
		}
	}
	x := max(w-int64(span), from)
	return x, x < w
}

// weighted returns floor(p × num / den) for 0 ≤ num ≤ den, without overflow.
func weighted(p, num, den int64) int64 {
	hi, lo := bits.Mul64(uint64(p), uint64(num))
	q, _ := bits.Div64(hi, lo, uint64(den)) // q ≤ p, so hi < den
	return int64(q)
}

// floorDiv is floor(a / b) for b > 0, also for negative a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// satAdd adds two non-negative counts, saturating instead of wrapping:
// merged state from several nodes may in theory exceed any limit.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}
