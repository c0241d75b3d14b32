package limiter

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// Reservations. A reservation is a check whose hits are counted now and
// settled later at the real cost: Reserve admits or denies like Check
// and, when it admits, returns a token; Settle refunds the reserved hits
// the work did not use, from where they were counted, and charges any
// cost above them at the settlement, as debt. Under the partition's lock
// both are exact under any concurrency.
//
// The token (token.go) says everything needed to settle without the
// store's record: the reserved hits, when they were counted (on the clock
// of the owner that counted them, which is the clock the key's state is
// stamped with), the expiry, and a MAC binding all that to its key,
// window and algorithm. So a reservation whose owner failed or handed its
// keys over settles on the new owner from the token, against the state
// the replicas or the handoff carried. The record the store keeps is for
// what a token cannot do: make a retried settle count once, release a
// hold at its expiry, and show what is open; where there is one, it is
// what a settle goes by, and a token that disagrees with it is refused.

// reservation is the store's record of one: open until settled or
// expired; a settled one is kept, with its cost and answer, until its
// expiry so that a retried settle repeats the answer instead of applying
// twice, and a "retry" at another cost is refused.
type reservation struct {
	key          stateKey
	alg          Algorithm
	hold         bool
	settled      bool
	hits         int64
	at           int64 // ms
	interval     int64 // GCRA: its limit's emission interval (ns), to give a hold's hits back at its expiry
	expires      int64 // ms: when the record is forgotten
	tokenExpires int64 // ms: what its token says (an unknown settle's record may be forgotten sooner)
	cost         int64 // a settled one's cost (0: released)
	refunded     int64 // a settled one's answer
	over         int64
}

// matches reports whether t, passed with a request for k and alg, is the
// token of rec.
func (rec *reservation) matches(k stateKey, alg Algorithm, t *token) bool {
	return rec.key == k && rec.alg == alg && t.sameAs(rec)
}

// book is one partition's reservations, under its shard's lock.
type book struct {
	byID map[uint64]reservation
	// unknown holds the settles of tokens this store had no record of,
	// apart from byID: Config.MaxReservations does not count them, so
	// that no number of them can refuse a reservation.
	unknown unknownSettles
	next    int64 // no record expires before this (ms): Reservations.Expire skips the book until then
	peak    int   // the most records it held
}

// Reservations is a Store's reservations: Reserve and Settle, which
// Store.Apply calls for their ops, and the book they keep, a book per
// partition under the partition's lock. Get it with Store.Reservations.
// It is safe for concurrent use, with itself and with every other call
// on the Store; its totals are atomic, read without a lock (Stats).
type Reservations struct {
	store *Store // whose partitions hold the books and the keys' state
	// remembered is how many reservations the books hold (open or
	// settled: Config.MaxReservations), unknowns how many unknown
	// settles (Config.MaxUnknownSettles; unknownShare of them a
	// partition).
	remembered   atomic.Int64
	unknowns     atomic.Int64
	unknownShare int
	keys         *TokenKeys
	counts       reservationCounts
	// Hits given back and counted by adjustments (Store.Apply's refunds
	// and charges too): Stats reports them.
	refundedHits atomic.Uint64
	chargedHits  atomic.Uint64
}

// reservationCounts are the store's reservation totals since start.
type reservationCounts struct {
	reserved, denied, settled, released, expired, unknown, retried atomic.Uint64
}

// Reserve decides r (OpReserve, OpHold or OpAcquire) as a check of r.Hits and, if it
// admits them, opens a reservation: the decision's Adjust carries its
// token and the time it has left (r.TTL, or Config.ReservationTTL). A
// denied reservation opens nothing. It returns an error wrapping
// ErrCapacity when the store already remembers Config.MaxReservations.
func (rv *Reservations) Reserve(now time.Time, r Request) (Decision, error) {
	if err := rv.store.cfg.validateOp(&r); err != nil {
		return Decision{}, err
	}
	if !r.Op.reserves() {
		return Decision{}, &ArgumentError{"op", "Reserve takes RESERVE, HOLD or ACQUIRE, not " + r.Op.String()}
	}
	if err := rv.takeReservationSlot(); err != nil {
		return Decision{}, err
	}
	ttl := r.TTL
	switch {
	case r.Op == OpAcquire:
		ttl = r.Window // a slot lasts as long as its entry counts
	case ttl == 0:
		ttl = rv.store.cfg.ReservationTTL
	}
	ms := max(now.UnixMilli(), 0)
	k := stateKey{r.Key, r.stateWindow()}
	sh, h := rv.store.shards.hashed(r.Key)
	sh.mu.Lock()
	d, at, err := rv.checkStamped(sh, k, ms, nanos(now), r)
	var t token
	if err == nil && d.Allowed {
		t = token{version: tokenVersion, id: rand.Uint64(), at: at, hits: r.Hits, expires: at + ttl.Milliseconds(), hold: r.Op != OpReserve,
			binding: bindingOf(&r)}
		if k.concurrency() {
			sh.logs[k].setNewestTag(slotTag(t.id)) // the slot this acquire just took
		}
		sh.remember(t.id, reservation{key: stateKey{strings.Clone(r.Key), k.window}, alg: r.Algorithm, hold: t.hold,
			hits: t.hits, at: t.at, expires: t.expires, tokenExpires: t.expires, interval: holdInterval(&r)})
	}
	if sh.hot != nil && err == nil {
		sh.hot.observe(ms, h, r.Key, d.Allowed)
	}
	sh.mu.Unlock()
	if err == nil && d.Allowed {
		rv.keys.sign(&t, &r) // outside the lock: a MAC is two SHA-256 blocks and more
		d.Adjust = &Adjustment{Reservation: t.encode(), ExpiresIn: time.Duration(t.expires-ms) * time.Millisecond}
	}
	if err != nil || !d.Allowed {
		rv.remembered.Add(-1)
	}
	if err == nil && d.Allowed {
		rv.counts.reserved.Add(1)
	} else if err == nil {
		rv.counts.denied.Add(1)
	}
	return d, err
}

// takeReservationSlot counts one more remembered reservation, or refuses
// it at Config.MaxReservations.
func (rv *Reservations) takeReservationSlot() error {
	if rv.remembered.Add(1) <= int64(rv.store.cfg.MaxReservations) {
		return nil
	}
	rv.remembered.Add(-1)
	if rv.store.cfg.MaxReservations == 0 {
		return fmt.Errorf("reservation refused: reservations are off on this node (--max-reservations 0): %w", ErrCapacity)
	}
	return fmt.Errorf("reservation refused: this node remembers %d reservations, open or settled until their expiry, its maximum (--max-reservations): %w",
		rv.store.cfg.MaxReservations, ErrCapacity)
}

// checkStamped checks r at now (ms; ns for GCRA) and returns, beside the
// decision, the time (ms) its hits were counted at: now, or later when the
// key's state was stamped later (a clock that stepped back is clamped, as
// Check clamps it). A GCRA bucket counts at now: its refunds take hits
// back whenever they were counted. Requires sh.mu held.
func (rv *Reservations) checkStamped(sh *shard, k stateKey, ms, ns int64, r Request) (Decision, int64, error) {
	r.Op = OpCheck
	if r.Algorithm == GCRA {
		d, err := rv.store.checkGCRA(sh, k, ns, r)
		return d, ms, err
	}
	if r.Algorithm.Logged() {
		d, err := rv.store.checkLog(sh, k, ms, r)
		if err != nil || !d.Allowed {
			return d, 0, err
		}
		return d, sh.logs[k].newest(), nil
	}
	d, err := rv.store.checkCounter(sh, k, ms, r)
	if err != nil || !d.Allowed {
		return d, 0, err
	}
	return d, placedAt(k, sh.counters[k], ms), nil
}

// theBook returns sh's book, made on first use. Requires sh.mu held.
func (sh *shard) theBook(expires int64) *book {
	if sh.book == nil {
		sh.book = &book{byID: make(map[uint64]reservation), next: expires}
	}
	sh.book.next = min(sh.book.next, expires)
	return sh.book
}

// remember records reservation id in sh's book. Requires sh.mu held.
func (sh *shard) remember(id uint64, rec reservation) {
	b := sh.theBook(rec.expires)
	b.byID[id] = rec
	b.peak = max(b.peak, len(b.byID))
}
