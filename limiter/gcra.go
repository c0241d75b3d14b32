package limiter

import (
	"math"
	"strings"
	"time"
)

// GCRA, the generic cell rate algorithm: a bucket of Burst hits that
// drains at Limit per Window, kept as one number per key, its theoretical
// arrival time (TAT): the time at which the bucket is empty again. With
// T = Window / Limit (the emission interval, rounded up to a whole ns)
// and B = Burst, the bucket's level at now is max(0, TAT − now), in ns,
// and it admits n hits iff max(TAT, now) + n·T − now ≤ B·T. docs/limiter.md,
// "GCRA", states every rule; this file holds the arithmetic and the
// store's paths for it, which mirror the counter's.
//
// Unlike the windows, GCRA counts in nanoseconds: an emission interval may
// be a microsecond, and a millisecond's rounding would then be a thousand
// hits.

// gcraState is the GCRA bucket of one key. 16 bytes.
type gcraState struct {
	tat int64 // Unix ns: when the bucket is empty again
	// mark and slot place the state's record in its shard's journal, as
	// counterState's do.
	mark, slot uint32
}

// level is the bucket's content at now (ns): what it still has to drain.
// Both times are ≥ 0, so the difference cannot overflow.
func (s gcraState) level(now int64) int64 { return max(s.tat-now, 0) }

// maxGCRANanos is the latest time GCRA decides at (2116): a later clock
// is taken as it, so that a time plus a bucket's capacity never
// overflows (a time.Time past 2262 has no int64 of nanoseconds at all).
const maxGCRANanos = 1 << 62

// nanos is now in Unix ns as GCRA reads it: a time before the epoch is the
// epoch, one past maxGCRANanos is maxGCRANanos.
func nanos(now time.Time) int64 {
	if now.Unix() >= maxGCRANanos/int64(time.Second) {
		return maxGCRANanos
	}
	return max(now.UnixNano(), 0)
}

// gcraBucket is a request's bucket: its emission interval T and its
// burst B.
type gcraBucket struct {
	t     int64 // ns per hit, ≥ 1
	burst int64 // B hits; B·T ≤ Config.MaxWindow (validateGCRA)
}

// bucketOf returns r's bucket. It requires a GCRA request the store accepts.
func bucketOf(r *Request) gcraBucket {
	return gcraBucket{t: int64(emissionInterval(r.Window, r.Limit)), burst: r.BurstOrLimit()}
}

// capacity is B·T, the most level a bucket admits up to (tau).
func (b gcraBucket) capacity() int64 { return satMul(b.burst, b.t) }

// gcraResult is what a GCRA decision reports, in ns.
type gcraResult struct {
	allowed     bool
	count       int64 // the level before, in hits: ceil(level / T)
	remaining   int64
	retryAfter  int64
	resetAfter  int64
	refillAfter int64
}

// decide decides hits (0 ≤ hits ≤ B) at now (ns) and, when they are
// admitted, adds them to s.
func (b gcraBucket) decide(s *gcraState, now, hits int64) gcraResult {
	level := s.level(now)
	inc := hits * b.t // ≤ B·T: validated
	room := b.capacity() - inc
	r := gcraResult{count: ceilDiv(level, b.t), allowed: level <= room}
	after := level
	switch {
	case !r.allowed:
		r.retryAfter = level - room // > 0; room ≥ 0, so no overflow
	case hits > 0:
		after = level + inc        // ≤ B·T
		s.tat = satAdd(now, after) // B·T ≤ MaxWindow, which a node may set past the 146 years left to int64's ns
	}
	b.report(&r, after)
	return r
}

// report fills r's remaining, reset and refill from the level after the
// request: Remaining = floor((B·T − after) / T), ResetAfter = after, and
// RefillAfter the time until Remaining grows by one, (Remaining+1)·T −
// (B·T − after), in (0, T] within the burst and 0 when the bucket is
// empty (Remaining = B).
func (b gcraBucket) report(r *gcraResult, after int64) {
	r.resetAfter = after
	if after == 0 {
		r.remaining = b.burst
		return
	}
	room := b.capacity() - after // > −MaxInt64: after ≤ MaxInt64, capacity ≥ 1
	if room < 0 {
		r.refillAfter = satAdd(b.t, -room)
		return
	}
	r.remaining = room / b.t
	r.refillAfter = (r.remaining+1)*b.t - room
}

// charge adds hits (> 0, any number) to s at now (ns) whatever the burst
// says, saturating, and returns what decide would have answered for them
// (count before, allowed ⇔ they fit), except that a denial's retryAfter
// is that of a 1-hit request after the charge, and how many hits past the
// burst the bucket now holds: ceil(level/T) + hits − B when positive
// (0 ⇔ allowed, as level + hits·T ≤ B·T ⇔ ceil(level/T) ≤ B − hits).
func (b gcraBucket) charge(s *gcraState, now, hits int64) (r gcraResult, over int64) {
	level := s.level(now)
	r.count = ceilDiv(level, b.t)
	over = max(satAdd(r.count, hits)-b.burst, 0)
	r.allowed = over == 0
	s.tat = satAdd(now, satAdd(level, satMul(hits, b.t)))
	after := s.tat - now
	if !r.allowed {
		r.retryAfter = satAdd(after-b.capacity(), b.t) // after > B·T
	}
	b.report(&r, after)
	return r, over
}

// refund gives back up to hits (> 0) of s's level at now (ns): the TAT
// moves back by hits·T, never before now, so a refund never makes credit.
// It returns how many hits it gave back: hits, or the level in hits
// (rounded up) when that is less.
func (b gcraBucket) refund(s *gcraState, now, hits int64) int64 {
	level := s.level(now)
	if level == 0 {
		return 0
	}
	s.tat = max(now, s.tat-satMul(hits, b.t))
	return min(hits, ceilDiv(level, b.t))
}

// undrained is how many of n hits a bucket of emission interval t
// counted at at (Unix ms) still holds at now (ns), at the least: they
// drain from at on, after whatever level the bucket held before them,
// so at + n·t − now of them is left at the least (in whole hits, rounded
// down). A reservation's refund takes back no more: the rest of its hits
// has drained, and the bucket's level is then other hits', which a
// refund of them would give away (over-admission past the burst).
func undrained(at, now, t, n int64) int64 {
	left := satAdd(satMul(max(at, 0), int64(time.Millisecond)), satMul(n, t)) - now
	if left <= 0 {
		return 0
	}
	return min(n, left/t)
}

// decision is r as a Decision of limit.
func (r gcraResult) decision(limit int64) Decision {
	return Decision{
		Allowed:      r.allowed,
		Limit:        limit,
		Remaining:    r.remaining,
		CurrentCount: r.count,
		RetryAfter:   time.Duration(r.retryAfter),
		ResetAfter:   time.Duration(r.resetAfter),
		RefillAfter:  time.Duration(r.refillAfter),
	}
}

// ceilDiv is ceil(a / b) for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// satMul multiplies two non-negative numbers, saturating instead of
// wrapping: a charge may carry any number of hits.
func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// gcraExpiry is the time (Unix ms) from which a TAT (ns) holds nothing:
// the millisecond it falls in, rounded up, so that a state is never taken
// as empty before it is.
func gcraExpiry(tat int64) int64 { return ceilDiv(max(tat, 0), int64(time.Millisecond)) }

// checkGCRA decides r against the bucket of k at now (ns). Requires sh.mu
// held.
func (s *Store) checkGCRA(sh *shard, k stateKey, now int64, r Request) (Decision, error) {
	st, ok := sh.gcras[k]
	res := bucketOf(&r).decide(&st, now, r.Hits)
	if !res.allowed || r.Hits == 0 {
		return res.decision(r.Limit), nil // nothing changed
	}
	if !ok {
		if err := s.room.makeRoom(sh, now/int64(time.Millisecond)); err != nil {
			return Decision{}, err
		}
		sh.journalGCRA(k, &st)
		sh.putGCRA(k, st)
	} else {
		sh.journalGCRA(k, &st)
		sh.gcras[k] = st
	}
	return res.decision(r.Limit), nil
}

// refundGCRA refunds r.Hits from the bucket of k at now (ns) and returns
// the peek after it and how many it gave back. Requires sh.mu held.
func (s *Store) refundGCRA(sh *shard, k stateKey, now int64, r Request) (Decision, int64) {
	st, ok := sh.gcras[k]
	b := bucketOf(&r)
	var n int64
	if ok {
		if n = b.refund(&st, now, r.Hits); n > 0 {
			sh.journalGCRA(k, &st)
			sh.gcras[k] = st
		}
	}
	return b.decide(&st, now, 0).decision(r.Limit), n
}

// chargeGCRA charges r.Hits to the bucket of k at now (ns). Requires
// sh.mu held.
func (s *Store) chargeGCRA(sh *shard, k stateKey, now int64, r Request) (Decision, int64, error) {
	st, ok := sh.gcras[k]
	if !ok {
		if err := s.room.makeRoom(sh, now/int64(time.Millisecond)); err != nil {
			return Decision{}, 0, err
		}
	}
	res, over := bucketOf(&r).charge(&st, now, r.Hits)
	sh.journalGCRA(k, &st)
	if ok {
		sh.gcras[k] = st
	} else {
		sh.putGCRA(k, st)
	}
	return res.decision(r.Limit), over, nil
}

// refundGCRAAt gives back up to n hits of k's bucket, whatever limit: a
// reservation's or a hold's, by its hits alone. The bucket's emission
// interval is r's. Requires sh.mu held.
func (sh *shard) refundGCRAAt(k stateKey, t, now, n int64) int64 {
	st, ok := sh.gcras[k]
	if !ok {
		return 0
	}
	got := gcraBucket{t: t}.refund(&st, now, n)
	if got > 0 {
		sh.journalGCRA(k, &st)
		sh.gcras[k] = st
	}
	return got
}

// putGCRA stores a new key's bucket. Requires sh.mu held.
func (sh *shard) putGCRA(k stateKey, st gcraState) {
	k.key = strings.Clone(k.key) // don't pin the caller's buffer
	sh.gcras[k] = st
	sh.keyBytes += len(k.key)
	sh.peak = max(sh.peak, sh.len())
}

// deleteGCRA drops k's bucket (expired, evicted): a record of it this
// epoch becomes its tombstone, as deleteCounter's becomes a lookup.
// Requires sh.mu held.
func (sh *shard) deleteGCRA(k stateKey, st gcraState) {
	if j := sh.journal; j != nil && j.owns(st.mark, st.slot, k, gcraChange) {
		j.changes[st.slot].tat = 0
	}
	delete(sh.gcras, k)
	sh.keyBytes -= len(k.key)
}

// removeGCRA drops k's bucket and journals its tombstone whether or not
// it was journaled this epoch: a reset, or a forget that emptied it, whose
// backup copy must go too. Requires sh.mu held.
func (sh *shard) removeGCRA(k stateKey, st gcraState) {
	st.tat = 0
	sh.journalGCRA(k, &st) // in place if journaled this epoch, else appended
	sh.deleteGCRA(k, st)
}

// journalGCRA records that the bucket of k changed to *st, and marks st
// with its record: call it before st is stored. A TAT of 0 is the
// bucket's tombstone. Requires sh.mu held.
func (sh *shard) journalGCRA(k stateKey, st *gcraState) {
	j := sh.journal
	if j == nil {
		return
	}
	if j.owns(st.mark, st.slot, k, gcraChange) {
		j.changes[st.slot].tat = st.tat
		return
	}
	st.mark, st.slot = j.epoch, uint32(len(j.changes))
	j.changes = append(j.changes, change{key: strings.Clone(k.key), window: k.window, kind: gcraChange, tat: st.tat})
}

// sampleGCRAs looks at up to evictionSample buckets of sh (map iteration
// starts at a random position), frees the empty ones and returns how
// many, and the live one that empties soonest, if before soonest (ms;
// else ok is false). Requires sh.mu held.
func (sh *shard) sampleGCRAs(now, soonest int64) (victim stateKey, st gcraState, ok bool, dropped int) {
	n := 0
	for k, g := range sh.gcras {
		if n++; n > evictionSample {
			break
		}
		if exp := gcraExpiry(g.tat); exp <= now {
			sh.deleteGCRA(k, g)
			dropped++
		} else if exp < soonest {
			victim, st, ok, soonest = k, g, true, exp
		}
	}
	return victim, st, ok, dropped
}

// sweepGCRAs frees every bucket of sh empty at now (ns) and returns how
// many. Requires sh.mu held.
func (sh *shard) sweepGCRAs(now int64) int {
	freed := 0
	for k, st := range sh.gcras {
		if st.tat <= now {
			sh.deleteGCRA(k, st)
			freed++
		}
	}
	return freed
}

// snapshotGCRAs appends the buckets of sh that hold something at now (ns).
// Requires sh.mu held.
func (t *Transfer) snapshotGCRAs(sh *shard, out []KeyState, now int64) []KeyState {
	for k, st := range sh.gcras {
		if st.tat > now {
			out = append(out, KeyState{Key: k.key, Window: ms(k.window), Algorithm: GCRA, TAT: st.tat})
		}
	}
	return out
}

// The transfer of buckets. A bucket's level is what its member admitted
// and has not yet drained, so levels add across members as counter
// counts do: a merge adds the sent level to the local one, a forget takes
// the sent level, as of now, back out. A KeyState's TAT is on its
// sender's clock; its level as of the receiver's now is TAT − now.

// mergeGCRA adds the level of ks at now (ns) to the bucket of k:
// TAT = max(TAT, now) + max(0, ks.TAT − now). It returns what it added, a
// state whose TAT is now + that level, the zero KeyState if nothing (the
// sent bucket had drained). Requires sh.mu held.
func (t *Transfer) mergeGCRA(sh *shard, k stateKey, now int64, ks KeyState) (KeyState, error) {
	sent := gcraState{tat: ks.TAT}.level(now)
	if sent == 0 {
		return KeyState{}, nil
	}
	st, ok := sh.gcras[k]
	if !ok {
		if err := t.room.makeRoom(sh, now/int64(time.Millisecond)); err != nil {
			return KeyState{}, err
		}
	}
	st.tat = satAdd(max(st.tat, now), sent)
	sh.journalGCRA(k, &st)
	if ok {
		sh.gcras[k] = st
	} else {
		sh.putGCRA(k, st)
	}
	added := ks
	added.WindowID, added.Prev, added.Curr, added.Log, added.TAT = 0, 0, 0, nil, now+sent
	return added, nil
}

// forgetGCRA takes the level of sent at now (ns) back out of the bucket
// of k: TAT = max(now, TAT − max(0, sent.TAT − now)). A bucket left empty
// is deleted. Requires sh.mu held.
func (t *Transfer) forgetGCRA(sh *shard, k stateKey, now int64, sent KeyState) {
	st, ok := sh.gcras[k]
	if !ok {
		return
	}
	lvl := gcraState{tat: sent.TAT}.level(now)
	st.tat = max(now, st.tat-lvl)
	if st.tat <= now {
		sh.removeGCRA(k, st)
		return
	}
	sh.journalGCRA(k, &st)
	sh.gcras[k] = st
}

// rebaseGCRA moves the TAT by d ms (Rebase), unless it or the move is out
// of range; a TAT moved before the epoch is 0, an empty bucket either way.
func (s *KeyState) rebaseGCRA(d int64) {
	const maxMove = math.MaxInt64 / 4 / int64(time.Millisecond) // ~73 years
	if s.TAT <= 0 || d <= -maxMove || d >= maxMove {
		return
	}
	if dn := d * int64(time.Millisecond); dn > 0 {
		s.TAT = satAdd(s.TAT, dn)
	} else {
		s.TAT = max(s.TAT+dn, 0) // TAT ≥ 0 > −MaxInt64/4: no overflow
	}
}

// inspectGCRA views st at now (ns). With a limit (> 0; MaxInt64 when none
// was given) its count and NextAllow are in hits of that limit, whose
// burst Inspect takes to be the limit; without one, Count is 0: a level in
// hits needs the emission interval, which is the limit's. ok is false
// when the bucket is empty.
func inspectGCRA(st gcraState, now, w, limit, hits int64) (KeyView, bool) {
	level := st.level(now)
	if level == 0 {
		return KeyView{}, false
	}
	v := KeyView{Algorithm: GCRA, Window: ms(w), ResetAfter: time.Duration(level), TAT: time.Unix(0, st.tat)}
	if limit == math.MaxInt64 {
		return v, true
	}
	r := Request{Window: ms(w), Limit: limit}
	b := bucketOf(&r)
	v.Count = ceilDiv(level, b.t)
	if over := level - (b.capacity() - satMul(hits, b.t)); over > 0 {
		v.NextAllow = time.Duration(over)
	}
	return v, true
}

// holdInterval is what a reservation of r keeps to give its hits back
// at its expiry without a request: a GCRA bucket's emission interval (ns),
// 0 for the other algorithms.
func holdInterval(r *Request) int64 {
	if r.Algorithm != GCRA {
		return 0
	}
	return bucketOf(r).t
}
