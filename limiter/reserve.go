package limiter

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/partition"
)

// Reservations. A reservation is a check whose hits are counted now and
// settled later at the real cost: Reserve admits or denies like Check
// and, when it admits, returns a token; Settle refunds the reserved hits
// the work did not use, from where they were counted, and charges any
// cost above them at the settlement, as debt. Under the partition's lock
// both are exact under any concurrency.
//
// The token says everything needed to settle without the store's record:
// the reserved hits, when they were counted (on the clock of the owner
// that counted them, which is the clock the key's state is stamped
// with), the expiry, and a hash binding it to its key, window and
// algorithm. So a reservation whose owner failed or handed its keys over
// settles on the new owner from the token, against the state the
// replicas or the handoff carried. The record the store keeps is for
// what a token cannot do: make a retried settle count once, release a
// hold at its expiry, and show what is open.

// Token layout, before base64url: version, id, at, hits, expires, flags,
// key hash.
const (
	tokenVersion = 1
	tokenLen     = 1 + 8 + 8 + 8 + 8 + 1 + 4
	tokenHold    = 1 << 0
)

// token is a reservation as its holder carries it.
type token struct {
	id      uint64
	at      int64 // ms when its hits were counted, on the counting owner's clock
	hits    int64
	expires int64 // ms, on the same clock
	hold    bool
	binding uint32 // bindingOf its key, window and algorithm
}

// bindingOf ties a token to one limit of one key, so that a token passed
// with another key is refused instead of refunding hits it never took.
// A calendar limit binds its unit and zone's name, not its handle (a
// token is settled on whichever member owns the key then).
func bindingOf(r *Request) uint32 {
	window := uint64(r.Window.Milliseconds()) * 0x9E3779B97F4A7C15
	if r.Calendar != 0 {
		window = r.Calendar.binding()
	}
	h := partition.Hash(r.Key) ^ window ^ uint64(r.Algorithm)<<59
	return uint32(h ^ h>>32)
}

func (t token) encode() string {
	var b [tokenLen]byte
	b[0] = tokenVersion
	binary.BigEndian.PutUint64(b[1:], t.id)
	binary.BigEndian.PutUint64(b[9:], uint64(t.at))
	binary.BigEndian.PutUint64(b[17:], uint64(t.hits))
	binary.BigEndian.PutUint64(b[25:], uint64(t.expires))
	if t.hold {
		b[33] = tokenHold
	}
	binary.BigEndian.PutUint32(b[34:], t.binding)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeToken reads a token, refusing anything a reservation could not
// have produced, as an *ArgumentError naming the reservation field.
func decodeToken(s string) (token, error) {
	bad := func(why string) (token, error) { return token{}, &ArgumentError{"reservation", why} }
	if len(s) != base64.RawURLEncoding.EncodedLen(tokenLen) {
		return bad(fmt.Sprintf("is %d characters, not a reservation token (%d)", len(s), base64.RawURLEncoding.EncodedLen(tokenLen)))
	}
	var b [tokenLen]byte
	if _, err := base64.RawURLEncoding.Decode(b[:], []byte(s)); err != nil {
		return bad("is not a reservation token: " + err.Error())
	}
	t := token{
		id: binary.BigEndian.Uint64(b[1:]), at: int64(binary.BigEndian.Uint64(b[9:])),
		hits: int64(binary.BigEndian.Uint64(b[17:])), expires: int64(binary.BigEndian.Uint64(b[25:])),
		hold: b[33]&tokenHold != 0, binding: binary.BigEndian.Uint32(b[34:]),
	}
	switch {
	case b[0] != tokenVersion:
		return bad(fmt.Sprintf("has version %d; this node reads version %d", b[0], tokenVersion))
	case b[33]&^tokenHold != 0:
		return bad("has unknown flags")
	case t.at < 0 || t.hits < 1 || t.expires < t.at:
		return bad("is not a reservation token: its numbers are inconsistent")
	}
	return t, nil
}

// reservation is the store's record of one: open until settled or
// expired; a settled one is kept, with its answer, until its expiry so
// that a retried settle repeats the answer instead of applying twice.
type reservation struct {
	key      stateKey
	alg      Algorithm
	hold     bool
	settled  bool
	hits     int64
	at       int64 // ms
	expires  int64 // ms
	refunded int64 // a settled one's answer
	over     int64
}

// book is one partition's reservations, under its shard's lock.
type book struct {
	byID map[uint64]reservation
	next int64 // no record expires before this (ms): ExpireReservations skips the book until then
	peak int   // the most records it held
}

// reservationCounts are the store's reservation totals since start.
type reservationCounts struct {
	reserved, denied, settled, released, expired, unknown, retried atomic.Uint64
}

// Reserve decides r (OpReserve or OpHold) as a check of r.Hits and, if it
// admits them, opens a reservation: the decision's Adjust carries its
// token and the time it has left (r.TTL, or Config.ReservationTTL). A
// denied reservation opens nothing. It returns an error wrapping
// ErrCapacity when the store already remembers Config.MaxReservations.
func (s *Store) Reserve(now time.Time, r Request) (Decision, error) {
	if err := s.cfg.validateOp(&r); err != nil {
		return Decision{}, err
	}
	if !r.Op.reserves() {
		return Decision{}, &ArgumentError{"op", "Reserve takes RESERVE or HOLD, not " + r.Op.String()}
	}
	if err := s.takeReservationSlot(); err != nil {
		return Decision{}, err
	}
	ttl := r.TTL
	if ttl == 0 {
		ttl = s.cfg.ReservationTTL
	}
	ms := max(now.UnixMilli(), 0)
	k := stateKey{r.Key, r.stateWindow()}
	sh, h := s.shardHash(r.Key)
	sh.mu.Lock()
	d, at, err := s.checkStamped(sh, k, ms, r)
	if err == nil && d.Allowed {
		t := token{id: rand.Uint64(), at: at, hits: r.Hits, expires: at + ttl.Milliseconds(), hold: r.Op == OpHold,
			binding: bindingOf(&r)}
		sh.remember(t, reservation{key: stateKey{strings.Clone(r.Key), k.window}, alg: r.Algorithm, hold: t.hold,
			hits: t.hits, at: t.at, expires: t.expires})
		d.Adjust = &Adjustment{Reservation: t.encode(), ExpiresIn: time.Duration(t.expires-ms) * time.Millisecond}
	}
	if sh.hot != nil && err == nil {
		sh.hot.observe(ms, h, r.Key, d.Allowed)
	}
	sh.mu.Unlock()
	if err != nil || !d.Allowed {
		s.reservations.Add(-1)
	}
	if err == nil && d.Allowed {
		s.resv.reserved.Add(1)
	} else if err == nil {
		s.resv.denied.Add(1)
	}
	return d, err
}

// takeReservationSlot counts one more remembered reservation, or refuses
// it at Config.MaxReservations.
func (s *Store) takeReservationSlot() error {
	if s.reservations.Add(1) <= int64(s.cfg.MaxReservations) {
		return nil
	}
	s.reservations.Add(-1)
	if s.cfg.MaxReservations == 0 {
		return fmt.Errorf("reservation refused: reservations are off on this node (--max-reservations 0): %w", ErrCapacity)
	}
	return fmt.Errorf("reservation refused: this node remembers %d reservations, open or settled until their expiry, its maximum (--max-reservations): %w",
		s.cfg.MaxReservations, ErrCapacity)
}

// checkStamped checks r at now (ms) and returns, beside the decision,
// the time its hits were counted at: now, or later when the key's state
// was stamped later (a clock that stepped back is clamped, as Check
// clamps it). Requires sh.mu held.
func (s *Store) checkStamped(sh *shard, k stateKey, ms int64, r Request) (Decision, int64, error) {
	r.Op = OpCheck
	if r.Algorithm == SlidingWindowLog {
		d, err := s.checkLog(sh, k, ms, r)
		if err != nil || !d.Allowed {
			return d, 0, err
		}
		return d, sh.logs[k].newest(), nil
	}
	d, err := s.checkCounter(sh, k, ms, r)
	if err != nil || !d.Allowed {
		return d, 0, err
	}
	return d, placedAt(k, sh.counters[k], ms), nil
}

// remember records reservation t in sh's book. Requires sh.mu held.
func (sh *shard) remember(t token, rec reservation) {
	if sh.book == nil {
		sh.book = &book{byID: make(map[uint64]reservation), next: rec.expires}
	}
	sh.book.byID[t.id] = rec
	sh.book.next = min(sh.book.next, rec.expires)
	sh.book.peak = max(sh.book.peak, len(sh.book.byID))
}
