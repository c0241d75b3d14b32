package limiter

import (
	"math"
	"time"
)

// The calendar counter: a counterState whose window is the Unix ms start
// of its period, curr the period's hits and prev always 0, stored under
// its Calendar's stateWindow (negative, so that it never meets a sliding
// window's state). Its size is the counter's: 24 bytes of state beside
// its key.

// noState is the window of a calendar counter not yet stored: before any
// period, also before those that start before the epoch (a zone east of
// UTC begins 1970 in 1969).
const noState = math.MinInt64

// rollCalendar rolls s, a counter of c, to the period of now (ms) and
// returns that period and now, clamped: a now before s's period (a clock
// that stepped back, or a state merged from a clock ahead) is taken as the
// start of s's period, so that state never moves backwards, as rollTo
// clamps a sliding counter.
func (s *counterState) rollCalendar(c cal, now int64) (period, int64) {
	now = min(now, maxCalendarMS)
	p := c.periodAt(now)
	switch {
	case p.start < s.window:
		return period{s.window, c.endOf(s.window)}, s.window
	case p.start > s.window:
		s.window, s.prev, s.curr = p.start, 0, 0
	}
	return p, now
}

// decideCalendar decides a request of hits at now (ms) against s, a
// counter of c, and updates s. It requires 0 ≤ hits ≤ limit. It returns
// the result and the time (ms) until the period ends: the count starts
// again from 0 there, so a denied request's retry, the reset and the
// refill are all that time.
func decideCalendar(s *counterState, c cal, now, limit, hits int64) (r counterResult, left int64) {
	p, now := s.rollCalendar(c, now)
	left = p.end - now
	r = counterResult{count: s.curr, allowed: s.curr <= limit-hits}
	if r.allowed {
		s.curr += hits // cannot overflow: curr ≤ limit-hits
	} else {
		r.retryAfter = left
	}
	if s.curr > 0 {
		r.resetAfter = left
	}
	return r, left
}

// expiry is the time (ms) from which s, a counter of c, holds nothing:
// the end of its period.
func (c cal) expiry(s *counterState) int64 {
	if s.curr <= 0 {
		return math.MinInt64
	}
	return c.endOf(s.window)
}

// counterExpiryOf is counterExpiry for a counter of either kind, stored
// under k.
func counterExpiryOf(k stateKey, s *counterState) int64 {
	if k.window >= 0 {
		return counterExpiry(s, k.window)
	}
	c, ok := calendarOfWindow(k.window).cal()
	if !ok {
		return math.MinInt64 // cannot be: the store takes only calendars it knows
	}
	return c.expiry(s)
}

// placedAt is the time (ms) at which a counter stored under k, s once
// decided at now (ms), counted its hits: now, or the start of its window
// when it was already past now (rollTo's and rollCalendar's clamp).
func placedAt(k stateKey, s counterState, now int64) int64 {
	if k.window < 0 {
		return max(min(now, maxCalendarMS), s.window)
	}
	return max(now, s.window*k.window)
}

// calendarState returns the calendar counter of k, or a new one (window
// noState) and false. Requires sh.mu held.
func (sh *shard) calendarState(k stateKey) (counterState, bool) {
	st, ok := sh.counters[k]
	if !ok {
		st.window = noState
	}
	return st, ok
}

// checkCalendar decides r against the calendar counter of k at now (ms),
// as checkCounter decides a sliding one. Requires sh.mu held.
func (s *Store) checkCalendar(sh *shard, k stateKey, c cal, now int64, r Request) (Decision, error) {
	st, ok := sh.calendarState(k)
	res, left := decideCalendar(&st, c, now, r.Limit, r.Hits)
	changed := res.allowed && r.Hits > 0
	switch {
	case ok:
		if changed {
			sh.journalCounter(k, &st)
		}
		sh.counters[k] = st
	case changed:
		if err := s.room.makeRoom(sh, now); err != nil {
			return Decision{}, err
		}
		sh.journalCounter(k, &st)
		sh.putCounter(k, st)
	}
	return decision(r.Limit, r.Hits, res.allowed, res.count, res.retryAfter, res.resetAfter, left), nil
}

// refundCalendar refunds up to r.Hits of the calendar counter of k at now
// (ms): from the period's count, never below 0 (a calendar counter has no
// previous count to take from). It returns the peek after, and how many
// it refunded. Requires sh.mu held.
func (s *Store) refundCalendar(sh *shard, k stateKey, c cal, now int64, r Request) (Decision, int64) {
	st, ok := sh.calendarState(k)
	var n int64
	if ok {
		st.rollCalendar(c, now)
		n = min(r.Hits, st.curr)
		st.curr -= n
	}
	res, left := decideCalendar(&st, c, now, r.Limit, 0)
	if ok {
		if n > 0 {
			sh.journalCounter(k, &st)
		}
		sh.counters[k] = st
	}
	return decision(r.Limit, 0, res.allowed, res.count, res.retryAfter, res.resetAfter, left), n
}

// chargeCalendar counts r.Hits on the calendar counter of k at now (ms)
// whatever the limit, saturating, as chargeCounter does on a sliding one;
// a debt lasts until the period ends, which is when a 1-hit request fits
// again. Requires sh.mu held.
func (s *Store) chargeCalendar(sh *shard, k stateKey, c cal, now int64, r Request) (Decision, int64, error) {
	st, ok := sh.calendarState(k)
	if !ok {
		if err := s.room.makeRoom(sh, now); err != nil {
			return Decision{}, 0, err
		}
	}
	p, at := st.rollCalendar(c, now)
	count := st.curr
	st.curr = satAdd(st.curr, r.Hits)
	left := p.end - at
	var retry int64
	if count > r.Limit-r.Hits {
		retry = left
	}
	sh.journalCounter(k, &st)
	if ok {
		sh.counters[k] = st
	} else {
		sh.putCounter(k, st)
	}
	d, over := chargeDecision(r.Limit, r.Hits, count, retry, left, left)
	return d, over, nil
}

// refundCalendarAt takes up to n of s's count, a counter of c, if at (ms)
// falls in its period as of now: a reservation's hits are given back to
// the period they were counted in, never to a later one. Last month's
// unused hits are gone with last month.
func (s *counterState) refundCalendarAt(c cal, now, at, n int64) int64 {
	s.rollCalendar(c, now)
	if c.periodAt(at).start != s.window {
		return 0
	}
	got := min(n, s.curr)
	s.curr -= got
	return got
}

// mergeCalendar adds ks, a calendar counter's state from another member,
// to the counter of k at now (ms), and returns what it added (ks as
// placed here), the zero KeyState if nothing. Requires sh.mu held.
//
// A full shard never refuses it (room.keepCalendar). The counts of one period are summed; otherwise the later period's
// count is kept and the earlier one's dropped, since its period is over.
// A state whose period ended by this node's clock adds nothing. ks's
// window id is on its sender's clock: a sender ahead by a skew S that has
// crossed a boundary this node has not moves the key into the next
// period S early (this node's checks are then decided at that period's
// start, as for a clock that stepped back); one behind sends, for up to S
// after the boundary, a period that has ended here. Either way a boundary
// moves by at most the skew.
func (t *Transfer) mergeCalendar(sh *shard, k stateKey, c cal, now int64, ks KeyState) KeyState {
	cur, ok := sh.calendarState(k)
	in := counterState{window: ks.WindowID, curr: ks.Curr}
	current := c.periodAt(min(now, maxCalendarMS)).start
	if in.curr == 0 || in.window < max(current, cur.window) {
		return KeyState{} // nothing, or a period over here
	}
	switch {
	case !ok:
		t.room.keepCalendar(sh, now) // never refused: a spent quota has nowhere else to go
		sh.putCounter(k, in)
	case in.window == cur.window:
		cur.curr = satAdd(cur.curr, in.curr)
		sh.counters[k] = cur
	default: // a later period than this node's
		cur.window, cur.prev, cur.curr = in.window, 0, in.curr
		sh.counters[k] = cur
	}
	added := ks
	added.Prev, added.Log = 0, nil
	return added
}

// forgetCalendar subtracts ks's count from the calendar counter of k, if
// both are of one period; a count of another period is not there to
// take. Requires sh.mu held.
func (t *Transfer) forgetCalendar(sh *shard, k stateKey, ks KeyState) {
	st, ok := sh.counters[k]
	if !ok || st.window != ks.WindowID {
		return
	}
	if st.curr = max(st.curr-ks.Curr, 0); st.curr == 0 {
		sh.deleteCounter(k, st)
	} else {
		sh.counters[k] = st
	}
}

// inspectCalendar is inspectCounter for a calendar counter stored under
// window w.
func inspectCalendar(st counterState, now, w, limit, hits int64) (KeyView, bool) {
	c, ok := calendarOfWindow(w).cal()
	if !ok {
		return KeyView{}, false
	}
	res, left := decideCalendar(&st, c, now, limit, hits) // st is a copy
	if res.allowed {
		st.curr -= hits
	}
	if st.curr == 0 {
		return KeyView{}, false
	}
	v := KeyView{Algorithm: SlidingWindowCounter, Calendar: calendarOfWindow(w), Count: res.count, ResetAfter: ms(left),
		WindowStart: time.UnixMilli(st.window), Current: st.curr}
	if !res.allowed {
		v.NextAllow = ms(res.retryAfter)
	}
	return v, true
}

// keyStateOf returns the KeyState of k, of algorithm a, without its
// counts: its Window, or its Calendar.
func keyStateOf(k stateKey, a Algorithm) KeyState {
	switch {
	case k.concurrency():
		return KeyState{Key: k.key, Window: ms(k.span()), Algorithm: Concurrency}
	case k.window < 0:
		return KeyState{Key: k.key, Calendar: calendarOfWindow(k.window), Algorithm: a}
	}
	return KeyState{Key: k.key, Window: ms(k.window), Algorithm: a}
}
