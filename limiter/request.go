package limiter

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/peerlimit/peerlimit/internal/logging"
)

// Algorithm selects how a key's rolling window is counted. The zero value is
// SlidingWindowCounter, the default of the public API.
type Algorithm uint8

const (
	// SlidingWindowCounter approximates the rolling window from two fixed
	// windows, in constant memory.
	SlidingWindowCounter Algorithm = iota
	// SlidingWindowLog counts the rolling window exactly from the timestamps
	// of the allowed hits; memory grows with the limit.
	SlidingWindowLog
	// GCRA is the generic cell rate algorithm: a token bucket of Burst
	// hits refilled at Limit per Window, kept as one theoretical arrival
	// time per key. Exact, constant memory (gcra.go).
	GCRA
	// Concurrency caps the requests in flight at Limit: OpAcquire takes a
	// slot and returns its token, OpRelease frees it, and a slot not
	// released frees itself Window after it was taken. Its state is a log
	// of the slots' times, so it is replicated and handed off as a log is.
	Concurrency
)

var algorithmNames = [...]string{"SLIDING_WINDOW_COUNTER", "SLIDING_WINDOW_LOG", "GCRA", "CONCURRENCY"}

// String returns the algorithm's name as the public API spells it.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm maps an API name to an Algorithm. The empty string is the
// default, SlidingWindowCounter.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return SlidingWindowCounter, nil
	}
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), nil
		}
	}
	return 0, &ArgumentError{Field: "algorithm", Reason: fmt.Sprintf("unknown value %q; want SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, GCRA or CONCURRENCY", Echo(s))}
}

// Logged reports whether a's state is a log of times: the window log's
// admitted hits, or a concurrency limit's slots.
func (a Algorithm) Logged() bool { return a == SlidingWindowLog || a == Concurrency }

// Request asks whether Key may consume Hits more under Limit per Window,
// or per period of Calendar.
//
// A key's state is identified by (Algorithm, Window, Calendar, Key): the
// same key under two windows is two independent limits (e.g. 10/s and
// 1000/h), and so is it under a calendar day in UTC, a calendar day in
// Europe/Paris and a 24 h sliding window; a changed Limit applies at once
// to the state already counted.
type Request struct {
	Key       string
	Limit     int64
	Window    time.Duration // a positive whole number of milliseconds; 0 with a Calendar
	Algorithm Algorithm
	// Op is what the request does; the zero value, OpCheck, is a check.
	Op Op
	// Calendar, when set, makes the limit calendar-aligned: Limit hits
	// per period of its unit in its time zone, the count starting again
	// from 0 at each boundary (calendar.go). Window must then be 0 and
	// Algorithm the counter's.
	Calendar Calendar
	// Hits is how much the request consumes. Zero is a peek: the decision
	// reports the state and consumes nothing, and no state is created.
	// For the other ops, Op's documentation says what it counts.
	Hits int64
	// Reservation is the token of the reservation OpSettle or OpRelease
	// closes; empty for every other op.
	Reservation string
	// TTL is how long a reservation OpReserve or OpHold opens lasts
	// unsettled; 0 is Config.ReservationTTL.
	TTL time.Duration
	// Burst is a GCRA bucket's size, the most hits it admits at once
	// after a quiet spell; 0 means Limit. Only for GCRA.
	Burst int64
}

// BurstOrLimit returns r's bucket size: Burst, or Limit when Burst is 0.
func (r *Request) BurstOrLimit() int64 {
	if r.Burst == 0 {
		return r.Limit
	}
	return r.Burst
}

// Decision is the outcome of a Request.
type Decision struct {
	Allowed bool
	Limit   int64
	// Remaining is what is left under the limit after this request, never
	// negative.
	Remaining int64
	// CurrentCount is the count before this request: the floored estimate
	// for the counter, the exact number of hits in the window for the log,
	// the bucket's level in hits (rounded up) for GCRA. Refund, Settle and
	// Release answer with the count after them instead (a peek at the key:
	// a settle counts no hits of its own), whether they refunded or charged.
	CurrentCount int64
	// RetryAfter is zero when allowed. When denied it is the earliest time
	// after which the same request would be allowed if no other traffic came.
	RetryAfter time.Duration
	// ResetAfter is the time until the key's state would be empty if no
	// other traffic came; zero when the key holds nothing.
	ResetAfter time.Duration
	// RefillAfter is the time until the hits counted now start to leave the
	// window, if no other traffic came: for the log, when its oldest hit in the
	// window leaves it (one hit's room comes back); for the counter, when its
	// current fixed window (epoch-aligned: floor(now / W)) ends, from which on
	// the hits counted in it weigh less and less over the next window. It runs
	// down as time passes and is at most one window. For the log it is zero when
	// the key holds no hit in the window; for the counter it is never zero
	// (W − (now mod W), in (0, W]). For GCRA it is the time until one more
	// hit fits (Remaining grows by one), zero when the bucket is empty.
	// GCRA's durations are exact to the nanosecond; the windows' are whole
	// milliseconds.
	RefillAfter time.Duration
	// Adjust is what an op other than a check reports; nil for a check.
	Adjust *Adjustment
}

// ArgumentError reports a request field that cannot be served. Field is the
// public API's name for it (key, limit, window_ms, algorithm, hits).
type ArgumentError struct {
	Field  string
	Reason string
}

// Error says which field is wrong and why, e.g. "invalid limit: must be positive, got 0".
func (e *ArgumentError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// ConflictError reports a request that is well formed but contradicts
// what the store already did under the same token: a settle "retried" at
// another cost than the first. The API's FAILED_PRECONDITION, as payment
// APIs answer an idempotency key reused with other parameters; Field is
// the public API's name of the field that differs, Reason holds the
// first request's numbers.
type ConflictError struct {
	Field  string
	Reason string
}

// Error names the field and says what it conflicts with.
func (e *ConflictError) Error() string { return "conflicting " + e.Field + ": " + e.Reason }

// ErrCapacity is returned, wrapped, when a key's partition has no room left
// within the Config's bounds: for a new key under OverflowReject, or for a
// log's growth that no eviction could make room for.
var ErrCapacity = errors.New("key capacity reached")

// maxLogWindow bounds the log's window so that an entry fits in a 32-bit
// millisecond offset from its key's base time.
const maxLogWindow = time.Duration(math.MaxUint32) * time.Millisecond

// validate checks r against the store's bounds. Field names are the public
// API's because the error travels to the caller unchanged.
func (c *Config) validate(r *Request) error {
	switch {
	case r.Key == "":
		return &ArgumentError{"key", "must not be empty"}
	case len(r.Key) > c.MaxKeyBytes:
		return &ArgumentError{"key", fmt.Sprintf("is %d bytes; the maximum is %d", len(r.Key), c.MaxKeyBytes)}
	case !utf8.ValidString(r.Key):
		return &ArgumentError{"key", "must be valid UTF-8"}
	case r.Limit <= 0:
		return &ArgumentError{"limit", fmt.Sprintf("must be positive, got %d", r.Limit)}
	case r.Calendar != 0:
		if err := validateCalendar(r); err != nil {
			return err
		}
	case r.Window <= 0:
		return &ArgumentError{"window_ms", "must be positive, got " + msText(r.Window)}
	case r.Window%time.Millisecond != 0:
		return &ArgumentError{"window_ms", "must be a whole number of milliseconds"}
	case r.Window > c.MaxWindow:
		return &ArgumentError{"window_ms", fmt.Sprintf("is %s; the maximum is %d", msText(r.Window), c.MaxWindow.Milliseconds())}
	}
	if r.Burst != 0 && r.Algorithm != GCRA {
		return &ArgumentError{"burst", fmt.Sprintf("is only for GCRA, not %s", r.Algorithm)}
	}
	switch {
	case r.Hits < 0:
		return &ArgumentError{"hits", fmt.Sprintf("must not be negative, got %d", r.Hits)}
	case r.Algorithm == GCRA:
		return c.validateGCRA(r)
	case r.Hits > r.Limit:
		return &ArgumentError{"hits", fmt.Sprintf("%d exceeds the limit %d, so the request could never be allowed", r.Hits, r.Limit)}
	}
	switch r.Algorithm {
	case SlidingWindowCounter:
	case Concurrency:
		return c.validateConcurrency(r)
	case SlidingWindowLog:
		if r.Limit > c.MaxLogLimit {
			return &ArgumentError{"limit", fmt.Sprintf("%d exceeds the SLIDING_WINDOW_LOG maximum of %d: the log stores every admitted hit, so its memory grows with the limit; use SLIDING_WINDOW_COUNTER for high limits", r.Limit, c.MaxLogLimit)}
		}
		if r.Window > maxLogWindow {
			return &ArgumentError{"window_ms", fmt.Sprintf("is %s; SLIDING_WINDOW_LOG supports at most %d (49.7 days)", msText(r.Window), maxLogWindow.Milliseconds())}
		}
	default:
		return &ArgumentError{"algorithm", fmt.Sprintf("unknown value %d", r.Algorithm)}
	}
	return nil
}

// validateGCRA checks what a bucket needs beyond a window's fields: an
// emission interval (Window / Limit) of at least a microsecond, so that
// its rounding up to a whole nanosecond costs under 0.1 % of the rate; a
// positive burst that refills within Config.MaxWindow, so that a
// theoretical arrival time is never further ahead than a window can be;
// and hits no more than the burst, which could never fit.
func (c *Config) validateGCRA(r *Request) error {
	burst := r.BurstOrLimit()
	switch {
	case r.Limit > r.Window.Microseconds():
		return &ArgumentError{"limit", fmt.Sprintf("%d per %s is over GCRA's fastest rate of one hit per µs (at most %d per this window)",
			r.Limit, msText(r.Window)+" ms", r.Window.Microseconds())}
	case burst < 0:
		return &ArgumentError{"burst", fmt.Sprintf("must be positive, got %d", burst)}
	case burst > c.MaxWindow.Microseconds() || satMul(int64(emissionInterval(r.Window, r.Limit)), burst) > int64(c.MaxWindow): // B·T may wrap int64
		return &ArgumentError{"burst", fmt.Sprintf("%d takes longer than the longest window (%d ms) to refill at %d per %s ms",
			burst, c.MaxWindow.Milliseconds(), r.Limit, msText(r.Window))}
	case r.Hits > burst:
		return &ArgumentError{"hits", fmt.Sprintf("%d exceeds the burst %d, so the request could never be allowed", r.Hits, burst)}
	}
	return nil
}

// emissionInterval is a GCRA bucket's time per hit, window/limit rounded
// up to a whole nanosecond: rounding up, a bucket never admits past its
// rate. Requires limit > 0.
func emissionInterval(window time.Duration, limit int64) time.Duration {
	return (window + time.Duration(limit) - 1) / time.Duration(limit)
}

// validateConcurrency checks a concurrency limit: Limit slots, at most
// Config.MaxLogLimit (each slot is a log entry), each freed at the
// latest Window after it was taken, a window no longer than a
// reservation may last (Config.MaxReservationTTL), since a slot is a
// reservation's hold.
func (c *Config) validateConcurrency(r *Request) error {
	switch {
	case r.Op == OpCheck && r.Hits != 0:
		return validateConcurrencyOp(r) // Check, which does not look at ops, must not take a slot without a token
	case r.Limit > c.MaxLogLimit:
		return &ArgumentError{"limit", fmt.Sprintf("%d exceeds the CONCURRENCY maximum of %d slots", r.Limit, c.MaxLogLimit)}
	case r.Window > c.MaxReservationTTL:
		return &ArgumentError{"window_ms", fmt.Sprintf("is %s; a CONCURRENCY slot frees itself window_ms after it was taken, at most %d (--max-reservation-ttl)",
			msText(r.Window), c.MaxReservationTTL.Milliseconds())}
	}
	return nil
}

// validateCalendar checks the fields of a calendar-aligned request that
// a sliding one does not have: a calendar this node knows, no window (the
// period is the window), and the counter (a log would hold every hit of
// a month).
func validateCalendar(r *Request) error {
	if err := r.Calendar.validate(); err != nil {
		return err
	}
	if r.Window != 0 {
		return &ArgumentError{"window_ms", fmt.Sprintf("must be absent with calendar %s, whose period is the window; got %s",
			r.Calendar.Unit(), msText(r.Window))}
	}
	if r.Algorithm != SlidingWindowCounter {
		return &ArgumentError{"algorithm", fmt.Sprintf("is %s; a calendar limit is counted by SLIDING_WINDOW_COUNTER only (the default): a log would hold every hit of the period", r.Algorithm)}
	}
	return nil
}

// stateWindow is the window r's state is stored under: its window in ms,
// or its calendar's (negative) code.
func (r *Request) stateWindow() int64 {
	switch {
	case r.Calendar != 0:
		return r.Calendar.stateWindow()
	case r.Algorithm == Concurrency:
		return concurrencyWindow(r.Window.Milliseconds())
	}
	return r.Window.Milliseconds()
}

// FixedWindow returns the fixed window of r's counter that holds at (Unix
// ms): its id, as KeyState.WindowID carries it, and its end (Unix ms):
// the epoch-aligned window floor(at / Window) of a sliding counter, or
// the Calendar's period. Hits counted at at stay in that id until its
// end. It requires a counter request the store accepts.
func (r Request) FixedWindow(at int64) (id, end int64) {
	if r.Calendar != 0 {
		return r.Calendar.Period(at)
	}
	w := r.Window.Milliseconds()
	if w <= 0 {
		return 0, at
	}
	id = floorDiv(at, w)
	return id, (id + 1) * w
}

// HitsAt returns the state that hits counted at at (Unix ms) under r's
// limit add to its key: what Forget takes back to undo them. For GCRA it
// is a bucket that took the hits at at, TAT = at + hits·T: Forget at now
// takes back what of them has not drained by now, max(0, TAT − now), all
// of them at at. A bucket that held a level before them drains them later
// than that, so an undo after at takes back up to now − at of level too
// little: over-denial, never a hit given twice.
func (r Request) HitsAt(at, hits int64) KeyState {
	ks := KeyState{Key: r.Key, Window: r.Window, Algorithm: r.Algorithm, Calendar: r.Calendar}
	if r.Algorithm == GCRA {
		ks.TAT = satAdd(satMul(max(at, 0), int64(time.Millisecond)), satMul(max(hits, 0), bucketOf(&r).t))
		return ks
	}
	if r.Algorithm.Logged() {
		ks.Log = make([]int64, hits)
		for i := range ks.Log {
			ks.Log[i] = at
		}
		return ks
	}
	ks.WindowID, _ = r.FixedWindow(at)
	ks.Curr = hits
	return ks
}

// NewRequest builds a request from the public API's fields, which every
// API shares; hits nil means 1. It validates nothing: the store checks
// every field, in its order, so the first bad field is named whichever
// API it came through.
func NewRequest(key string, limit, windowMS int64, algo Algorithm, hits *int64) Request {
	r := Request{Key: key, Limit: limit, Window: WindowFromMS(windowMS), Algorithm: algo, Hits: 1}
	if hits != nil {
		r.Hits = *hits
	}
	return r
}

// WindowFromMS converts a window in ms, clamped first: the multiplication
// would wrap, and a negative window could wrap into a valid positive one.
// A clamped window is still out of range, so the store refuses it.
func WindowFromMS(ms int64) time.Duration {
	return time.Duration(min(max(ms, -maxMS), maxMS)) * time.Millisecond
}

// maxMS is the most milliseconds a time.Duration holds.
const maxMS = math.MaxInt64 / int64(time.Millisecond)

// msText says d, made by WindowFromMS, in ms as an error repeats a value
// the client sent: when WindowFromMS clamped it, as beyond the bound, not
// as if the bound were what the client sent ("9223372036854").
func msText(d time.Duration) string {
	switch ms := d.Milliseconds(); {
	case ms >= maxMS:
		return fmt.Sprintf("more than %d (saturated)", maxMS-1)
	case ms <= -maxMS:
		return fmt.Sprintf("less than %d (saturated)", -maxMS+1)
	default:
		return strconv.FormatInt(ms, 10)
	}
}

// maxEcho caps what an error repeats of a text value a client sent.
const maxEcho = 128

// Echo returns s, a value a client sent, as an error may repeat it: cut
// to 128 bytes (at a rune boundary) and marked "…" when longer, so that a
// 900 KB value does not come back in a 900 KB answer, nor a log line.
func Echo(s string) string { return logging.ClipTo(s, maxEcho) }
