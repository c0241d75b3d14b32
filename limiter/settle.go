package limiter

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Settle closes the reservation r.Reservation names (OpSettle at the real
// cost r.Hits, or OpRelease, a cost of 0) and returns a peek at the key
// after it, or the charge's decision when the cost exceeded the
// reservation; either way CurrentCount is the count after the settle
// (what the key holds now: the settle counts no hits of its own). Adjust
// says what it refunded, how far over it went, and
// what it found:
//   - open here: the reserved hits the cost did not use are refunded from
//     where they were counted (the log's entries at the reservation's
//     time; the counter's count of that time's window, while it is the
//     current or the previous one), and a cost above them is charged now
//     (Charge: debt). SettledNow.
//   - settled here before: nothing is applied again; the first answer's
//     numbers come back. SettledBefore. A settle at another cost than the
//     first is no retry: it is refused, a *ConflictError naming hits. A
//     release after a settle is answered SettledBefore, so that a
//     deferred release after the work's settle is harmless.
//   - unknown here, not expired: the owner changed (failover, handoff);
//     the token says what to refund and charge, and it is remembered as
//     settled (apart from the reservations: Config.MaxUnknownSettles).
//     SettledUnknown. Only an authenticated token (Config.TokenKeys made
//     of cluster secrets) refunds so, or frees a concurrency slot:
//     without a secret anyone can make a token, so one with no record
//     refunds nothing and frees nothing; a cost above its hits is still
//     charged, as a CHECK of that cost would be.
//   - expired: a reservation counts as used at its expiry, so only a cost
//     above its hits is charged; a hold was released at its expiry, so
//     the whole cost is. SettledExpired.
//
// A token is refused, an *ArgumentError naming reservation, unless its
// MAC is r's limit's under Config.TokenKeys, and, where this store holds
// the reservation's record, unless it says what the record says: the
// record is what a settle goes by.
func (rv *Reservations) Settle(now time.Time, r Request) (Decision, error) {
	if err := rv.store.cfg.validateOp(&r); err != nil {
		return Decision{}, err
	}
	if !r.Op.closes() {
		return Decision{}, &ArgumentError{"op", "Settle takes SETTLE or RELEASE, not " + r.Op.String()}
	}
	t, err := decodeToken(r.Reservation)
	if err != nil {
		return Decision{}, err
	}
	k := stateKey{r.Key, r.stateWindow()}
	if t.binding != bindingOf(&r) {
		return Decision{}, &ArgumentError{"reservation", "belongs to another key, window_ms, calendar or algorithm than this request's"}
	}
	if t.version == tokenVersion && !rv.keys.verify(&t, &r) {
		return Decision{}, &ArgumentError{"reservation", "is not authentic: its MAC does not match its contents " +
			"(rewritten or made up; or issued by a member whose cluster secrets differ from this one's)"}
	}
	ms := max(now.UnixMilli(), 0)
	sh := rv.store.shards.of(r.Key)
	sh.mu.Lock()
	d, adj, err := rv.settleLocked(sh, k, ms, nanos(now), r, t)
	sh.mu.Unlock()
	if err != nil {
		return Decision{}, err
	}
	rv.countSettle(r.Op, adj)
	d.Adjust = &adj
	return d, nil
}

// settleLocked is Settle under sh.mu, at ms (ns: the same time, for GCRA).
func (rv *Reservations) settleLocked(sh *shard, k stateKey, ms, ns int64, r Request, t token) (Decision, Adjustment, error) {
	rec, found := sh.lookup(t.id)
	switch {
	case found && !rec.matches(k, r.Algorithm, &t):
		return Decision{}, Adjustment{}, &ArgumentError{"reservation", "disagrees with this node's record of the reservation it names " +
			"(its hits, time, expiry, kind or limit were rewritten)"}
	case !found && t.version == tokenV1:
		return Decision{}, Adjustment{}, &ArgumentError{"reservation", "is a version 1 token, which carries no MAC: it settles only on the node " +
			"that issued it, while that node remembers it, and this one does not; the reservation counts as used at its expiry"}
	}
	if found && !rec.settled && rec.expires <= ms {
		rv.expireOne(sh, t.id, rec, ms) // due, and the sweep has not come yet
		found = false
	}
	switch {
	case found && rec.settled:
		if r.Op == OpSettle && r.Hits != rec.cost {
			return Decision{}, Adjustment{}, &ConflictError{"hits", fmt.Sprintf("this reservation was settled before at a cost of %d (refunded %d, over %d), "+
				"and a retry must repeat it; got %d. Nothing was applied", rec.cost, rec.refunded, rec.over, r.Hits)}
		}
		d := rv.peekLocked(sh, k, ms, ns, r)
		return d, Adjustment{Refunded: rec.refunded, Over: rec.over, Settled: SettledBefore}, nil
	case !found && t.expires <= ms:
		cost := max(r.Hits-t.hits, 0)
		if t.hold {
			cost = r.Hits
		}
		d, _, over, err := rv.adjustLocked(sh, k, ms, ns, r, t.at, 0, cost)
		return d, Adjustment{Over: over, Settled: SettledExpired}, err
	}
	// Without a record, the token's word is all there is: worth a refund
	// only if no caller could have made it up.
	trusted := found || rv.keys.authenticates()
	refund := max(t.hits-r.Hits, 0)
	switch {
	case !trusted:
		refund = 0
	case r.Algorithm == GCRA:
		refund = min(refund, undrained(t.at, ns, bucketOf(&r).t, t.hits))
	}
	var d Decision
	var refunded, over int64
	var err error
	switch {
	case k.concurrency() && !trusted:
		d = rv.peekLocked(sh, k, ms, ns, r)
	case k.concurrency(): // a RELEASE: its slot, by its tag
		d, refunded = rv.releaseSlot(sh, k, ms, r, slotTag(t.id))
	default:
		d, refunded, over, err = rv.adjustLocked(sh, k, ms, ns, r, t.at, refund, max(r.Hits-t.hits, 0))
	}
	if err != nil {
		return Decision{}, Adjustment{}, err
	}
	adj := Adjustment{Refunded: refunded, Over: over, Settled: SettledNow}
	if found {
		rec.settled, rec.cost, rec.refunded, rec.over = true, r.Hits, refunded, over
		sh.remember(t.id, rec)
		return d, adj, nil
	}
	adj.Settled = SettledUnknown
	if rv.unknownShare == 0 {
		return d, adj, nil // applied; a retry cannot be recognised
	}
	// Remembered until the token's expiry, but never longer than a
	// reservation may last.
	rec = reservation{key: stateKey{strings.Clone(k.key), k.window}, alg: r.Algorithm, hold: t.hold, hits: t.hits, at: t.at,
		expires: min(t.expires, ms+rv.store.cfg.MaxReservationTTL.Milliseconds()), tokenExpires: t.expires,
		settled: true, cost: r.Hits, refunded: refunded, over: over}
	b := sh.theBook(rec.expires)
	rv.unknowns.Add(int64(b.unknown.add(t.id, rec, rv.unknownShare)))
	return d, adj, nil
}

// releaseSlot frees the slot tagged tag of the concurrency limit k at ms,
// if it is there, and returns the peek after it and how many it freed (0
// or 1). Requires sh.mu held.
func (rv *Reservations) releaseSlot(sh *shard, k stateKey, ms int64, r Request, tag uint32) (Decision, int64) {
	var freed int64
	if st, ok := sh.logs[k]; ok {
		n0, c0 := st.n, len(st.ring)
		if st.removeTag(ms, k.span(), tag) {
			freed = 1
			sh.journalLog(k, st)
		}
		sh.account(st, n0, c0)
	}
	return rv.peekLocked(sh, k, ms, 0, r), freed
}

// adjustLocked settles a reservation's difference on k: it charges
// charge hits at ms (ns for GCRA) if charge > 0, else refunds up to
// refund hits counted at at (ms) (a settle does one or the other), and
// returns the decision after, what it refunded and how far over the limit
// the charge went. Requires sh.mu held.
func (rv *Reservations) adjustLocked(sh *shard, k stateKey, ms, ns int64, r Request, at, refund, charge int64) (d Decision, refunded, over int64, err error) {
	if charge == 0 {
		d, refunded = rv.refundAtThenPeek(sh, k, ms, ns, r, at, refund)
		rv.refundedHits.Add(uint64(refunded))
		return d, refunded, 0, nil
	}
	c := r
	c.Op, c.Hits = OpCharge, charge
	switch r.Algorithm {
	case SlidingWindowLog, Concurrency:
		d, over, err = rv.store.chargeLog(sh, k, ms, c)
	case GCRA:
		d, over, err = rv.store.chargeGCRA(sh, k, ns, c)
	default:
		d, over, err = rv.store.chargeCounter(sh, k, ms, c)
	}
	if err != nil {
		return Decision{}, refunded, 0, err
	}
	rv.chargedHits.Add(uint64(charge))
	// A charge's CurrentCount is the count before it, a check's; a settle
	// answers with the count after it, whichever way it went.
	d.CurrentCount = rv.peekLocked(sh, k, ms, ns, r).CurrentCount
	return d, refunded, over, nil
}

// refundAtThenPeek is refundAt followed by a peek, with one lookup of
// k's state: a settle at or below its reservation, the common one. A GCRA
// bucket's refund is a refund's (Store.Refund) of n, which its caller
// bounds by what has not drained (undrained). Requires sh.mu held.
func (rv *Reservations) refundAtThenPeek(sh *shard, k stateKey, ms, ns int64, r Request, at, n int64) (Decision, int64) {
	var got int64
	if r.Algorithm == GCRA {
		if n == 0 {
			return rv.peekLocked(sh, k, ms, ns, r), 0
		}
		c := r
		c.Hits = n
		return rv.store.refundGCRA(sh, k, ns, c)
	}
	if r.Algorithm.Logged() {
		st, ok := sh.logs[k]
		if !ok {
			return decision(r.Limit, 0, true, 0, 0, 0, 0), 0
		}
		n0, c0 := st.n, len(st.ring)
		if n > 0 {
			got = st.removeAt(ms, k.span(), at, n)
		}
		res := decideLog(st, ms, k.span(), r.Limit, 0, 0) // a peek needs no room
		sh.account(st, n0, c0)
		if got > 0 {
			sh.journalLog(k, st)
		}
		return decision(r.Limit, 0, res.allowed, res.count, res.retryAfter, res.resetAfter, st.refillAfter(ms, k.span())), got
	}
	if k.window < 0 {
		got = rv.refundAt(sh, k, r.Algorithm, ms, at, n)
		return rv.peekLocked(sh, k, ms, ns, r), got
	}
	st, ok := sh.counters[k]
	if ok && n > 0 {
		got = st.refundAt(ms, k.window, at, n)
	}
	res := decideCounter(&st, ms, k.window, r.Limit, 0)
	if ok {
		if got > 0 {
			sh.journalCounter(k, &st)
		}
		sh.counters[k] = st
	}
	return decision(r.Limit, 0, res.allowed, res.count, res.retryAfter, res.resetAfter, st.refillAfter(ms, k.window)), got
}

// peekLocked is a check of 0 hits of k's limit at ms (ns for GCRA).
// Requires sh.mu held.
func (rv *Reservations) peekLocked(sh *shard, k stateKey, ms, ns int64, r Request) Decision {
	r.Op, r.Hits = OpCheck, 0
	var d Decision
	switch r.Algorithm {
	case SlidingWindowLog, Concurrency:
		d, _ = rv.store.checkLog(sh, k, ms, r) // a peek neither creates a key nor grows a log: no error
	case GCRA:
		d, _ = rv.store.checkGCRA(sh, k, ns, r)
	default:
		d, _ = rv.store.checkCounter(sh, k, ms, r)
	}
	return d
}

// refundAt takes back up to n hits of k counted at at (ms), as seen at
// now: the log's entries stamped at, still in the window; the counter's
// count of at's window while it is the current or the previous one. A
// GCRA bucket's refund needs its emission interval, which alg does not
// give: its callers refund it themselves (refundGCRAAt), and it takes
// nothing here. Requires sh.mu held.
func (rv *Reservations) refundAt(sh *shard, k stateKey, alg Algorithm, now, at, n int64) int64 {
	if alg == GCRA {
		return 0
	}
	if alg.Logged() {
		st, ok := sh.logs[k]
		if !ok {
			return 0
		}
		n0, c0 := st.n, len(st.ring)
		got := st.removeAt(now, k.span(), at, n)
		sh.account(st, n0, c0)
		if got > 0 {
			sh.journalLog(k, st)
		}
		return got
	}
	st, ok := sh.counters[k]
	if !ok {
		return 0
	}
	var got int64
	if c, isCal := calendarOfWindow(k.window).cal(); k.window < 0 && isCal {
		got = st.refundCalendarAt(c, now, at, n)
	} else {
		got = st.refundAt(now, k.window, at, n)
	}
	if got > 0 {
		sh.journalCounter(k, &st)
	}
	sh.counters[k] = st
	return got
}

// refundAt takes up to n from the count of at's window (ms) after
// rolling s to now: the current count or the previous one; a window
// older than that counts nothing any more.
func (s *counterState) refundAt(now, w, at, n int64) int64 {
	s.rollTo(now, w)
	var c *int64
	switch floorDiv(at, w) {
	case s.window:
		c = &s.curr
	case s.window - 1:
		c = &s.prev
	default:
		return 0
	}
	got := min(n, *c)
	*c -= got
	return got
}

// removeAt removes up to n entries stamped exactly at (ms) that are still
// in window w at now, and returns how many. Entries are sorted, so those
// stamped at are one run; the newer ones move back over the gap.
func (s *logState) removeAt(now, w, at, n int64) int64 {
	if s.n == 0 {
		return 0
	}
	now = max(now, s.newest())
	s.prune(now - w)
	count := int(s.n)
	lo := sort.Search(count, func(i int) bool { return s.at(int32(i)) >= at })
	hi := sort.Search(count, func(i int) bool { return s.at(int32(i)) > at })
	m := int32(min(int64(hi-lo), n))
	if m == 0 {
		return 0
	}
	c := int32(len(s.ring))
	for j := int32(hi); j < s.n; j++ {
		s.ring[(s.head+j-m)%c] = s.ring[(s.head+j)%c]
		if s.tags != nil {
			s.tags.ring[(s.head+j-m)%c] = s.tags.ring[(s.head+j)%c]
		}
	}
	s.n -= m
	s.prune(now - w) // resets an empty ring, gives memory back
	return int64(m)
}
