package limiter

import (
	"math"
	"slices"
	"time"
)

// lookup returns the record of reservation id: of a reservation made
// here, or of an unknown one settled here. Requires sh.mu held.
func (sh *shard) lookup(id uint64) (reservation, bool) {
	if sh.book == nil {
		return reservation{}, false
	}
	if rec, ok := sh.book.byID[id]; ok {
		return rec, true
	}
	return sh.book.unknown.lookup(id)
}

// expireOne forgets reservation id, due at ms: an open hold gives its
// hits back, an open reservation counts as used, a settled one was only
// remembered for retries. Requires sh.mu held.
func (rv *Reservations) expireOne(sh *shard, id uint64, rec reservation, ms int64) {
	delete(sh.book.byID, id)
	rv.remembered.Add(-1)
	if rec.settled {
		return
	}
	rv.counts.expired.Add(1)
	switch {
	case rec.alg == Concurrency:
		// A slot's hold lasts its window: its entry has left the log as
		// the hold expires, and there is nothing to give back.
	case rec.hold && rec.alg == GCRA: // as a refund at ms of what of its hits has not drained
		ns := min(satMul(ms, int64(time.Millisecond)), maxGCRANanos)
		rv.refundedHits.Add(uint64(sh.refundGCRAAt(rec.key, rec.interval, ns, undrained(rec.at, ns, rec.interval, rec.hits))))
	case rec.hold:
		rv.refundedHits.Add(uint64(rv.refundAt(sh, rec.key, rec.alg, ms, rec.at, rec.hits)))
	}
}

// Expire forgets every reservation due at now (see
// expireOne) and returns how many open ones expired. A partition whose
// soonest expiry is later is skipped without a look; the others are
// scanned under their lock, one at a time. The node calls it every
// second, so that a hold whose coordinator died gives its hits back
// about then; a settle that meets a due reservation expires it first, so
// correctness never waits for it.
func (rv *Reservations) Expire(now time.Time) int {
	if rv.remembered.Load() == 0 && rv.unknowns.Load() == 0 {
		return 0
	}
	ms := max(now.UnixMilli(), 0)
	expired := 0
	for i := range rv.store.shards {
		sh := &rv.store.shards[i]
		sh.mu.Lock()
		if b := sh.book; b != nil && b.next <= ms {
			next := int64(math.MaxInt64)
			for id, rec := range b.byID {
				if rec.expires > ms {
					next = min(next, rec.expires)
					continue
				}
				if !rec.settled {
					expired++
				}
				rv.expireOne(sh, id, rec, ms)
			}
			gone, next := b.unknown.expire(ms, next)
			rv.unknowns.Add(-int64(gone))
			b.next = next
			if len(b.byID) == 0 && b.peak > 4096 && len(b.unknown.byID) == 0 {
				sh.book = nil // give a large map back (Go maps never shrink); a small one is kept for the next
			}
		}
		sh.mu.Unlock()
	}
	return expired
}

// OpenReservation describes a reservation not yet settled.
type OpenReservation struct {
	Window    time.Duration // 0 for a calendar limit
	Calendar  Calendar
	Algorithm Algorithm
	Hits      int64
	Hold      bool
	// Age is how long ago its hits were counted; ExpiresIn how long it
	// has left. Durations, for a caller on another clock.
	Age, ExpiresIn time.Duration
}

// Open lists the reservations open on key at now, soonest
// expiry first, at most max of them.
func (rv *Reservations) Open(key string, now time.Time, max int) []OpenReservation {
	ms := now.UnixMilli()
	sh := rv.store.shards.of(key)
	sh.mu.Lock()
	var out []OpenReservation
	if sh.book != nil {
		for _, rec := range sh.book.byID {
			if rec.key.key != key || rec.settled || rec.expires <= ms {
				continue
			}
			ks := keyStateOf(rec.key, rec.alg)
			out = append(out, OpenReservation{Window: ks.Window, Calendar: ks.Calendar, Algorithm: rec.alg,
				Hits: rec.hits, Hold: rec.hold, Age: msDuration(ms - rec.at), ExpiresIn: msDuration(rec.expires - ms)})
		}
	}
	sh.mu.Unlock()
	slices.SortFunc(out, func(a, b OpenReservation) int { return int(a.ExpiresIn - b.ExpiresIn) })
	if len(out) > max {
		out = out[:max]
	}
	return out
}

func msDuration(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// ReservationStats are the store's reservation totals since start, and
// how many it remembers now.
type ReservationStats struct {
	// Remembered is the open reservations and the settled ones kept for
	// retries: what Config.MaxReservations bounds. RememberedUnknown is
	// the settles of reservations unknown here kept for retries: what
	// Config.MaxUnknownSettles bounds.
	Remembered, RememberedUnknown int64
	// Reserved and Denied count OpReserve and OpHold answers; Settled
	// and Released the reservations closed (a retry counts in Retried
	// only); Unknown the settles applied from a token this store had no
	// record of (the owner changed); Expired the open reservations that
	// reached their expiry.
	Reserved, Denied, Settled, Released, Retried, Unknown, Expired uint64
	// RefundedHits and ChargedHits are the hits refunds, settles,
	// releases and expired holds gave back, and charges and settles above
	// a reservation counted.
	RefundedHits, ChargedHits uint64
}

// Stats reads the totals; it takes no lock.
func (rv *Reservations) Stats() ReservationStats {
	return ReservationStats{
		Remembered: rv.remembered.Load(), RememberedUnknown: rv.unknowns.Load(),
		Reserved: rv.counts.reserved.Load(), Denied: rv.counts.denied.Load(),
		Settled: rv.counts.settled.Load(), Released: rv.counts.released.Load(), Retried: rv.counts.retried.Load(),
		Unknown: rv.counts.unknown.Load(), Expired: rv.counts.expired.Load(),
		RefundedHits: rv.refundedHits.Load(), ChargedHits: rv.chargedHits.Load(),
	}
}

// countSettle counts a closed reservation by what it found.
func (rv *Reservations) countSettle(op Op, adj Adjustment) {
	switch adj.Settled {
	case SettledBefore:
		rv.counts.retried.Add(1)
		return
	case SettledUnknown:
		rv.counts.unknown.Add(1)
	}
	if op == OpRelease {
		rv.counts.released.Add(1)
	} else {
		rv.counts.settled.Add(1)
	}
}
