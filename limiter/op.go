package limiter

import (
	"fmt"
	"time"
)

// Op is what a request does to its key's state. The zero value is OpCheck,
// so a Request built before ops existed means what it always meant.
// docs/limiter.md, "Reservations, refunds and debt", states every rule.
type Op uint8

const (
	// OpCheck admits Hits if they fit, and counts them only then.
	OpCheck Op = iota
	// OpRefund gives back up to Hits (> 0) hits: never below what the
	// window holds, never creating credit (Store.Refund).
	OpRefund
	// OpCharge counts Hits (> 0) even past the limit: debt (Store.Charge).
	OpCharge
	// OpReserve admits Hits (≥ 1) as a check does and, when admitted,
	// opens a reservation: a token to settle with the real cost. A
	// reservation never settled counts as used when it expires.
	OpReserve
	// OpHold is OpReserve whose expiry releases the hits instead: what an
	// all-or-nothing check holds on each limit while it asks the others,
	// so that a coordinator that dies in between leaves nothing counted
	// past the hold's TTL.
	OpHold
	// OpSettle closes the reservation Request.Reservation names at the
	// real cost, Hits (≥ 0, may exceed the limit): the difference from
	// the reserved hits is refunded or charged.
	OpSettle
	// OpRelease closes the reservation refunding everything: OpSettle at a
	// cost of 0. Hits must be 0.
	OpRelease
	// OpAcquire takes one slot of a Concurrency limit (Hits 1): OpHold
	// whose TTL is the limit's Window. Its token frees the slot with
	// OpRelease; a slot not released frees itself at the TTL.
	OpAcquire
)

var opNames = [...]string{"CHECK", "REFUND", "CHARGE", "RESERVE", "HOLD", "SETTLE", "RELEASE", "ACQUIRE"}

// String returns the op's name as the public API spells it.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ParseOp maps an API name to an Op; "" is OpCheck.
func ParseOp(s string) (Op, error) {
	if s == "" {
		return OpCheck, nil
	}
	for i, n := range opNames {
		if n == s {
			return Op(i), nil
		}
	}
	return 0, &ArgumentError{Field: "op", Reason: fmt.Sprintf("unknown value %q; want one of CHECK, REFUND, CHARGE, RESERVE, HOLD, SETTLE, RELEASE, ACQUIRE", Echo(s))}
}

// SetOp sets r's op, reservation and TTL (in ms, clamped as windows are)
// as an API request gives them, and the op's hits when the request gave
// none (hitsGiven false; NewRequest made them 1): 0 to RELEASE, while
// SETTLE has no default, its cost must be given. The rest is checked
// where the request is decided.
func (r *Request) SetOp(op Op, reservation string, ttlMS int64, hitsGiven bool) error {
	r.Op, r.Reservation, r.TTL = op, reservation, WindowFromMS(ttlMS)
	switch {
	case hitsGiven:
	case op == OpRelease:
		r.Hits = 0
	case op == OpSettle:
		return &ArgumentError{"hits", "is required to SETTLE: the real cost, 0 or more"}
	}
	return nil
}

// Admits reports whether o admits or denies hits against the limit (a
// check or a reservation), as opposed to adjusting what was counted.
func (o Op) Admits() bool { return o == OpCheck || o.reserves() }

// reserves reports whether o opens a reservation.
func (o Op) reserves() bool { return o == OpReserve || o == OpHold || o == OpAcquire }

// closes reports whether o closes a reservation.
func (o Op) closes() bool { return o == OpSettle || o == OpRelease }

// Adjustment is what an op other than a check reports beside its
// Decision. Checks carry none (Decision.Adjust is nil), so the hot path
// copies one pointer more, not five fields.
type Adjustment struct {
	// Reservation is the token of the reservation an admitted OpReserve or
	// OpHold opened, to be passed back to settle or release it.
	Reservation string
	// ExpiresIn is the time the reservation has left: a duration, never an
	// absolute time, since it travels to a caller on another clock.
	ExpiresIn time.Duration
	// Refunded is how many hits a refund, a settle below the reserved
	// hits or a release gave back.
	Refunded int64
	// Over is how far past the limit a charge, or a settle above the
	// reserved hits, took the key: 0 when the hits fitted.
	Over int64
	// Settled is what a settle or release found: SettledNow, SettledBefore
	// (a retry: nothing applied again, the first answer repeated),
	// SettledUnknown (no record here: the owner changed; applied from the
	// token) or SettledExpired (the reservation had expired as used: only
	// a cost above it is charged).
	Settled SettleOutcome
}

// SettleOutcome says what closing a reservation found.
type SettleOutcome uint8

const (
	SettledNone SettleOutcome = iota // not a settle
	SettledNow
	SettledBefore
	SettledUnknown
	SettledExpired
)

var settleNames = [...]string{"", "SETTLED_NOW", "SETTLED_BEFORE", "SETTLED_UNKNOWN", "SETTLED_EXPIRED"}

// String returns the outcome's API spelling ("" for SettledNone).
func (o SettleOutcome) String() string {
	if int(o) < len(settleNames) {
		return settleNames[o]
	}
	return fmt.Sprintf("SettleOutcome(%d)", uint8(o))
}

// validateOp checks r for its op: what a check needs, and the op's own
// rules for hits, the reservation token and the TTL. Field names are the
// public API's.
func (c *Config) validateOp(r *Request) error {
	if r.TTL != 0 && !r.Op.reserves() && !r.Op.closes() {
		// Not ignored: a TTL a check carried would travel on into what a
		// caller builds from it (an all-or-nothing batch's commit).
		return &ArgumentError{"ttl_ms", "is only for RESERVE and HOLD, not " + r.Op.String()}
	}
	if err := validateConcurrencyOp(r); err != nil {
		return err
	}
	switch r.Op {
	case OpCheck:
		if err := c.validate(r); err != nil {
			return err
		}
	case OpAcquire:
		if err := c.validate(r); err != nil {
			return err
		}
		if r.Hits != 1 {
			return &ArgumentError{"hits", fmt.Sprintf("must be 1 (or absent) to ACQUIRE: a request takes one slot, got %d", r.Hits)}
		}
		if r.TTL != 0 {
			return &ArgumentError{"ttl_ms", "must be absent to ACQUIRE: a slot frees itself window_ms after it was taken"}
		}
	case OpRefund, OpCharge:
		if err := c.validateAdjust(r); err != nil {
			return err
		}
	case OpReserve, OpHold:
		if err := c.validate(r); err != nil {
			return err
		}
		if r.Hits < 1 {
			return &ArgumentError{"hits", fmt.Sprintf("must be at least 1 for a reservation, got %d", r.Hits)}
		}
		if r.TTL < 0 || r.TTL > c.MaxReservationTTL || r.TTL%time.Millisecond != 0 {
			return &ArgumentError{"ttl_ms", fmt.Sprintf("must be a whole number of ms from 0 (the default, %d) to %d, got %s",
				c.ReservationTTL.Milliseconds(), c.MaxReservationTTL.Milliseconds(), ttlText(r.TTL))}
		}
	case OpSettle, OpRelease:
		return c.validateClose(r)
	default:
		return &ArgumentError{"op", fmt.Sprintf("unknown value %d", r.Op)}
	}
	if r.Reservation != "" {
		return &ArgumentError{"reservation", "is only for SETTLE and RELEASE, not " + r.Op.String()}
	}
	return nil
}

// validateConcurrencyOp checks that r's op and algorithm go together: a
// Concurrency limit takes OpAcquire, OpRelease and a peek (OpCheck of 0
// hits) only, and OpAcquire takes nothing else.
func validateConcurrencyOp(r *Request) error {
	switch {
	case r.Op == OpAcquire && r.Algorithm != Concurrency:
		return &ArgumentError{"op", fmt.Sprintf("ACQUIRE is for CONCURRENCY limits, not %s", r.Algorithm)}
	case r.Algorithm != Concurrency:
		return nil
	case r.Op == OpAcquire, r.Op == OpRelease:
		return nil
	case r.Op == OpCheck && r.Hits == 0:
		return nil
	case r.Op == OpCheck:
		return &ArgumentError{"op", "a CONCURRENCY limit takes ACQUIRE to take a slot, RELEASE to free it, or CHECK of 0 hits to peek; not CHECK of hits"}
	}
	return &ArgumentError{"op", "a CONCURRENCY limit takes ACQUIRE, RELEASE or a peek (CHECK of 0 hits), not " + r.Op.String()}
}

// validateClose checks a settle or a release: the limit's fields as a
// check's, a reservation token, and hits ≥ 0 for a settle (a cost may
// exceed the limit) or 0 for a release.
func (c *Config) validateClose(r *Request) error {
	probe := *r
	probe.Hits = 0
	if err := c.validate(&probe); err != nil {
		return err
	}
	switch {
	case r.Reservation == "":
		return &ArgumentError{"reservation", "is required to " + r.Op.String()}
	case r.Hits < 0:
		return &ArgumentError{"hits", fmt.Sprintf("must not be negative, got %d", r.Hits)}
	case r.Op == OpRelease && r.Hits != 0:
		return &ArgumentError{"hits", fmt.Sprintf("must be 0 to RELEASE (it refunds everything), got %d; SETTLE with the real cost instead", r.Hits)}
	case r.TTL != 0:
		return &ArgumentError{"ttl_ms", "is only for RESERVE and HOLD"}
	}
	return nil
}

// Apply carries out r.Op on the state of r's key at now: Check, Refund,
// Charge, Reserve or Settle. Every path that decides a request on its
// owner calls it, so a forwarded, relayed or rescued request does what it
// says wherever it is decided.
func (s *Store) Apply(now time.Time, r Request) (Decision, error) {
	if (r.TTL != 0 && !r.Op.reserves()) || (r.Reservation != "" && !r.Op.closes()) {
		return Decision{}, s.cfg.validateOp(&r) // names the field this op does not take
	}
	switch r.Op {
	case OpCheck:
		return s.Check(now, r)
	case OpRefund:
		d, n, err := s.Refund(now, r)
		if err == nil {
			d.Adjust = &Adjustment{Refunded: n}
			s.reservations.refundedHits.Add(uint64(n))
		}
		return d, err
	case OpCharge:
		d, over, err := s.Charge(now, r)
		if err == nil {
			d.Adjust = &Adjustment{Over: over}
			s.reservations.chargedHits.Add(uint64(r.Hits))
		}
		return d, err
	case OpReserve, OpHold, OpAcquire:
		return s.reservations.Reserve(now, r)
	case OpSettle, OpRelease:
		return s.reservations.Settle(now, r)
	}
	return Decision{}, s.cfg.validateOp(&r) // names the unknown op
}

// ttlText says a TTL as an error repeats it: in ms as the client sent it
// (msText), or as a duration when it holds a fraction of a ms (an API
// sends whole ms; only an embedded caller can).
func ttlText(d time.Duration) string {
	if d%time.Millisecond != 0 {
		return d.String()
	}
	return msText(d)
}
