package limiter

import (
	"fmt"
	"time"
)

// Refund and Charge adjust a key's state by a cost known only after the
// work: a refund gives back hits a check took but the work did not use
// (an LLM call that used fewer tokens than reserved), a charge counts hits
// the work used, whether or not they fit (Envoy's apply_on_stream_done
// reports them after the response). Both act on the state Check decides
// against, identified as Check identifies it (key, window, algorithm), and
// keep what a check keeps: the partition's lock, the key cap, the log
// budget, the replication journal and the expiry. docs/limiter.md,
// "Refunds and debt", states the rules.
//
// Each returns the Decision and one number beside it rather than a new
// Decision field: Decision stays the type of Check, whose hot path copies
// it, and the number means something for one operation only.

// Refund gives back up to r.Hits (> 0) hits of the state Check(now, r)
// would decide against, never below what the window holds and never
// creating credit:
//   - counter: from the current window's count first, then from the
//     previous window's, each bounded at 0. A hit taken from the previous
//     window lowers the estimate by its weight there, less than 1.
//   - log: up to r.Hits of its newest entries still in the window.
//   - GCRA: the bucket's TAT moves back by r.Hits emission intervals,
//     never before now; refunded is the level in hits (rounded up) when
//     it held fewer.
//
// A key with no state gets none. It returns the decision a peek
// (Check with Hits 0) would return after the refund, and how many hits it
// refunded, from 0 to r.Hits. r.Hits may exceed r.Limit (a charge may
// have counted more); validation is otherwise Check's, an *ArgumentError
// naming the field. A refund never needs room, so it never returns
// ErrCapacity.
func (s *Store) Refund(now time.Time, r Request) (d Decision, refunded int64, err error) {
	if err := s.cfg.validateAdjust(&r); err != nil {
		return Decision{}, 0, err
	}
	ms := max(now.UnixMilli(), 0)
	k := stateKey{r.Key, r.stateWindow()}
	sh := s.shards.of(r.Key)
	sh.mu.Lock()
	switch r.Algorithm {
	case SlidingWindowLog, Concurrency:
		d, refunded = s.refundLog(sh, k, ms, r)
	case GCRA:
		d, refunded = s.refundGCRA(sh, k, nanos(now), r)
	default:
		d, refunded = s.refundCounter(sh, k, ms, r)
	}
	sh.mu.Unlock()
	return d, refunded, nil
}

// Charge counts r.Hits (> 0) in the state Check(now, r) would decide
// against, even past the limit: the work was done and must be paid, so
// the key stays denied until the window has absorbed the debt.
//   - counter: the current window's count grows by r.Hits, saturating at
//     the largest int64 instead of wrapping.
//   - log: r.Hits entries at now, of which the log keeps its newest
//     logDebtBound(limit) = min(2 × limit, MaxLogLimit) (see
//     docs/limiter.md for why every decision under the limit stays exact).
//   - GCRA: the bucket's TAT moves on by r.Hits emission intervals, from
//     now if it was empty, past the burst if need be; over is in hits past
//     the burst.
//
// The decision is Check's for the same request, except that the hits
// were counted whatever it says: Allowed reports whether they fit under
// the limit, CurrentCount is the count before, Remaining what is left
// after them. When they did not fit, RetryAfter is the time until a
// request of 1 hit would be allowed again if no other traffic came: how
// long the debt blocks the key. over is how far past the limit the
// charge went, count before + r.Hits − limit when positive, else 0
// (0 ⇔ Allowed).
//
// r.Hits may exceed r.Limit: a cost known after the work is what it was.
// Validation is otherwise Check's. A charge that creates a key meets the
// key cap, and a log charge the log budget, as a check does: under
// OverflowReject it may return an error wrapping ErrCapacity, and then
// counts nothing. The hot-key summaries count a charge as a check, denied
// when over > 0; a refund they do not count (its request was counted).
func (s *Store) Charge(now time.Time, r Request) (d Decision, over int64, err error) {
	if err := s.cfg.validateAdjust(&r); err != nil {
		return Decision{}, 0, err
	}
	ms := max(now.UnixMilli(), 0)
	k := stateKey{r.Key, r.stateWindow()}
	sh, h := s.shards.hashed(r.Key)
	sh.mu.Lock()
	switch r.Algorithm {
	case SlidingWindowLog, Concurrency:
		d, over, err = s.chargeLog(sh, k, ms, r)
	case GCRA:
		d, over, err = s.chargeGCRA(sh, k, nanos(now), r)
	default:
		d, over, err = s.chargeCounter(sh, k, ms, r)
	}
	if sh.hot != nil && err == nil {
		sh.hot.observe(ms, h, r.Key, over == 0)
	}
	sh.mu.Unlock()
	return d, over, err
}

// validateAdjust is validate for a refund or a charge: hits must be
// positive and may exceed the limit (a GCRA's burst too).
func (c *Config) validateAdjust(r *Request) error {
	if err := validateConcurrencyOp(r); err != nil {
		return err
	}
	probe := *r
	probe.Hits = max(min(r.Hits, r.Limit, r.BurstOrLimit()), 0) // the hits rules are checked below
	if err := c.validate(&probe); err != nil {
		return err
	}
	if r.Hits <= 0 {
		return &ArgumentError{"hits", fmt.Sprintf("must be positive for a refund or a charge, got %d", r.Hits)}
	}
	return nil
}

// logDebtBound is the most entries a charge leaves in a log of the given
// limit: twice the limit, so that a limit raised up to twice still sees
// the debt exactly, but never more than MaxLogLimit, so that a log in
// debt still fits in its partition's share of the log budget like any
// full log (Config.Validate).
func (rm *room) logDebtBound(limit int64) int64 {
	return min(2*limit, rm.maxLogLimit)
}

// refundCounter refunds r.Hits from the counter of k at now (ms).
// Requires sh.mu held.
func (s *Store) refundCounter(sh *shard, k stateKey, now int64, r Request) (Decision, int64) {
	if k.window < 0 {
		c, _ := r.Calendar.cal() // validated
		return s.refundCalendar(sh, k, c, now, r)
	}
	st, ok := sh.counters[k]
	var n int64
	if ok {
		n = st.refund(now, k.window, r.Hits)
	}
	res := decideCounter(&st, now, k.window, r.Limit, 0) // the peek after: consumes nothing
	if ok {
		if n > 0 {
			sh.journalCounter(k, &st)
		}
		sh.counters[k] = st // like a peek at a held key, which stores the roll
	}
	return decision(r.Limit, 0, res.allowed, res.count, res.retryAfter, res.resetAfter, st.refillAfter(now, k.window)), n
}

// refundLog refunds r.Hits from the log of k at now (ms). Requires sh.mu
// held.
func (s *Store) refundLog(sh *shard, k stateKey, now int64, r Request) (Decision, int64) {
	st, ok := sh.logs[k]
	if !ok {
		return decision(r.Limit, 0, true, 0, 0, 0, 0), 0
	}
	n0, c0 := st.n, len(st.ring)
	n := st.refund(now, k.span(), r.Hits)
	res := decideLog(st, now, k.span(), r.Limit, 0, 0) // the peek after: no room needed
	sh.account(st, n0, c0)
	if n > 0 {
		sh.journalLog(k, st)
	}
	return decision(r.Limit, 0, res.allowed, res.count, res.retryAfter, res.resetAfter, st.refillAfter(now, k.span())), n
}

// chargeCounter charges r.Hits to the counter of k at now (ms). Requires
// sh.mu held.
func (s *Store) chargeCounter(sh *shard, k stateKey, now int64, r Request) (Decision, int64, error) {
	if k.window < 0 {
		c, _ := r.Calendar.cal() // validated
		return s.chargeCalendar(sh, k, c, now, r)
	}
	st, ok := sh.counters[k]
	if !ok {
		if err := s.room.makeRoom(sh, now); err != nil {
			return Decision{}, 0, err
		}
	}
	res := st.charge(now, k.window, r.Limit, r.Hits)
	sh.journalCounter(k, &st)
	if ok {
		sh.counters[k] = st
	} else {
		sh.putCounter(k, st)
	}
	d, over := chargeDecision(r.Limit, r.Hits, res.count, res.retryAfter, res.resetAfter, st.refillAfter(now, k.window))
	return d, over, nil
}

// chargeLog charges r.Hits to the log of k at now (ms), within the log
// budget of sh, as checkLog decides within it. Requires sh.mu held.
func (s *Store) chargeLog(sh *shard, k stateKey, now int64, r Request) (Decision, int64, error) {
	st, ok := sh.logs[k]
	if !ok {
		if err := s.room.makeRoom(sh, now); err != nil {
			return Decision{}, 0, err
		}
		st = new(logState)
	}
	bound := s.room.logDebtBound(r.Limit)
	n0, c0 := st.n, len(st.ring)
	res, fits := st.charge(now, k.span(), r.Limit, r.Hits, bound, s.room.logShare-sh.slots+c0)
	var err error
	if !fits {
		need := int(min(int64(st.n)+min(r.Hits, bound), bound)) // st is pruned
		err = s.room.makeLogRoom(sh, now, k, c0, need)
		if err == nil {
			res, fits = st.charge(now, k.span(), r.Limit, r.Hits, bound, s.room.logShare-sh.slots+c0)
		}
		if err == nil && !fits { // cannot happen: room was made
			err = s.room.logFull(sh)
		}
	}
	// As in checkLog: a refused charge's prune stands, and a refused new
	// key changed nothing.
	sh.account(st, n0, c0)
	if err != nil {
		return Decision{}, 0, err
	}
	if !ok {
		sh.putLog(k, st)
	}
	sh.journalLog(k, st)
	d, over := chargeDecision(r.Limit, r.Hits, res.count, res.retryAfter, res.resetAfter, st.refillAfter(now, k.span()))
	return d, over, nil
}

// chargeDecision is the decision of a charge of hits onto a count of
// count, and how far over the limit it went.
func chargeDecision(limit, hits, count, retryMS, resetMS, refillMS int64) (Decision, int64) {
	after := satAdd(count, hits)
	over := max(after-limit, 0)
	return Decision{
		Allowed:      over == 0,
		Limit:        limit,
		Remaining:    max(limit-after, 0),
		CurrentCount: count,
		RetryAfter:   ms(retryMS),
		ResetAfter:   ms(resetMS),
		RefillAfter:  ms(refillMS),
	}, over
}

// refund takes back up to hits of s's counts at now (ms) for window w:
// from the current window's count first, then from the previous one's,
// each bounded at 0. It returns how many it took. now is clamped as
// decideCounter clamps a clock that stepped back.
func (s *counterState) refund(now, w, hits int64) int64 {
	s.rollTo(now, w)
	fromCurr := min(hits, s.curr)
	fromPrev := min(hits-fromCurr, s.prev)
	s.curr -= fromCurr
	s.prev -= fromPrev
	return fromCurr + fromPrev
}

// charge adds hits to s at now (ms) for window w whatever limit says,
// saturating, and returns what decideCounter would have answered for
// them (count before, allowed ⇔ they fit), except that a denial's
// retryAfter is that of a 1-hit request after the charge: when the key
// admits again. Requires hits > 0.
func (s *counterState) charge(now, w, limit, hits int64) counterResult {
	id, now := s.rollTo(now, w)
	elapsed := now - id*w
	est := satAdd(weighted(s.prev, w-elapsed, w), s.curr)
	s.curr = satAdd(s.curr, hits)
	r := counterResult{count: est, allowed: est <= limit-hits}
	if !r.allowed {
		// The estimate is now est + hits > limit (or saturated), so a 1-hit
		// request is denied at elapsed and the solver finds a later time.
		r.retryAfter = counterRetryAfter(s, elapsed, w, limit, 1)
	}
	r.resetAfter = max(counterExpiry(s, w)-now, 0)
	return r
}

// refund removes up to hits of s's newest entries in window w at now
// (ms), clamped to the newest entry as decideLog clamps it, and returns
// how many it removed.
func (s *logState) refund(now, w, hits int64) int64 {
	if s.n == 0 {
		return 0
	}
	now = max(now, s.newest())
	s.prune(now - w)
	m := int32(min(hits, int64(s.n)))
	s.n -= m
	// Nothing more leaves; prune resets an empty ring and gives memory
	// back as it does once a burst has drained.
	s.prune(now - w)
	return int64(m)
}

// charge adds hits entries at now (ms) to s for window w whatever limit
// says, then keeps only the newest bound of them (bound ≥ limit), and
// returns what decideLog would have answered for them (count before,
// allowed ⇔ they fit), except that a denial's retryAfter is that of a
// 1-hit request after the charge. ok is false, and only the prune
// changed s, when the ring would have to grow past maxCap.
//
// The bound loses no decision under any limit up to bound: while an
// entry it dropped would still be in the window, the bound newer ones
// are too, so the count is at least bound either way.
func (s *logState) charge(now, w, limit, hits, bound int64, maxCap int) (r logResult, ok bool) {
	if s.n > 0 {
		now = max(now, s.newest())
	}
	s.prune(now - w)
	r.count = int64(s.n)
	r.allowed = r.count <= limit-hits
	m := min(hits, bound)
	drop := max(r.count+m-bound, 0) // the oldest entries the bound leaves out
	need := int(r.count - drop + m)
	if need > len(s.ring) && need > maxCap {
		return r, false
	}
	if drop > 0 {
		s.head = int32((int64(s.head) + drop) % int64(len(s.ring)))
		s.n -= int32(drop)
	}
	if need > len(s.ring) {
		s.grow(m, bound, maxCap) // cannot fail: need ≤ maxCap
	}
	s.push(now, m)
	if !r.allowed {
		// n ≥ limit (n = min(count + m, bound) and both exceed or reach
		// the limit), so the (n + 1 − limit)-th oldest entry exists.
		r.retryAfter = s.at(s.n-int32(limit)) + w - now
	}
	r.resetAfter = s.newest() + w - now
	return r, true
}
