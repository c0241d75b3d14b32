package limiter

import (
	"errors"
	"testing"
	"time"
)

// FuzzCheck feeds arbitrary field values to one store and checks that every
// answer is either an *ArgumentError or a decision that keeps the contract.
func FuzzCheck(f *testing.F) {
	f.Add("k", int64(5), int64(60_000), uint8(0), int64(1), int64(1745000145000), uint8(0), "")
	f.Add("k", int64(5), int64(60_000), uint8(1), int64(0), int64(0), uint8(0), "")
	f.Add("", int64(-1), int64(0), uint8(9), int64(-3), int64(-1), uint8(0), "")
	f.Add("k", int64(1<<62), int64(31_622_400_000), uint8(0), int64(1<<61), int64(1<<60), uint8(0), "")
	// Calendar limits (unit, zone): valid, in zones with clock changes at
	// midnight, at the end of time, and refused (a window, a log, an
	// unknown zone or unit, "Local").
	f.Add("k", int64(5), int64(0), uint8(0), int64(1), int64(1745000145000), uint8(CalendarMonth), "Europe/Paris")
	f.Add("k", int64(5), int64(0), uint8(0), int64(5), int64(1693713600000), uint8(CalendarDay), "America/Santiago")
	f.Add("k", int64(1<<62), int64(0), uint8(0), int64(1<<61), int64(1<<62), uint8(CalendarYear), "Pacific/Kiritimati")
	f.Add("k", int64(5), int64(0), uint8(0), int64(1), int64(0), uint8(CalendarWeek), "Asia/Tokyo")
	f.Add("k", int64(5), int64(60_000), uint8(0), int64(1), int64(0), uint8(CalendarHour), "")
	f.Add("k", int64(5), int64(0), uint8(1), int64(1), int64(0), uint8(CalendarMinute), "UTC")
	f.Add("k", int64(5), int64(0), uint8(0), int64(1), int64(0), uint8(CalendarDay), "Mars/Olympus_Mons")
	f.Add("k", int64(5), int64(0), uint8(0), int64(1), int64(0), uint8(9), "Local")
	// GCRA (algorithm 2): a bucket, at its fastest rate, past it, past
	// its burst, at the end of time, and refused with a calendar.
	f.Add("k", int64(5), int64(1_000), uint8(2), int64(3), int64(1745000145000), uint8(0), "")
	f.Add("k", int64(1_000), int64(1), uint8(2), int64(1_000), int64(1745000145001), uint8(0), "")
	f.Add("k", int64(1_001), int64(1), uint8(2), int64(1), int64(0), uint8(0), "")
	f.Add("k", int64(5), int64(60_000), uint8(2), int64(6), int64(1745000145000), uint8(0), "")
	f.Add("k", int64(1<<30), int64(31_622_400_000), uint8(2), int64(1<<29), int64(1<<62), uint8(0), "")
	f.Add("k", int64(5), int64(0), uint8(2), int64(1), int64(0), uint8(CalendarDay), "UTC")
	s := newStore(f, 7, func(cfg *Config) { cfg.MaxKeys = 64 })
	f.Fuzz(func(t *testing.T, key string, limit, windowMS int64, algo uint8, hits, nowMS int64, unit uint8, zone string) {
		req := Request{Key: key, Limit: limit, Window: time.Duration(windowMS) * time.Millisecond, Algorithm: Algorithm(algo), Hits: hits}
		if windowMS > int64(1<<63-1)/int64(time.Millisecond) || windowMS < -int64(1<<63-1)/int64(time.Millisecond) {
			req.Window = -1 // the Duration would overflow; still must be rejected cleanly
		}
		if unit != 0 || zone != "" {
			c, err := NewCalendar(CalendarUnit(unit), zone)
			if err != nil {
				var ae *ArgumentError
				if !errors.As(err, &ae) || (ae.Field != "calendar" && ae.Field != "time_zone") {
					t.Fatalf("NewCalendar(%d, %q): %v, want an *ArgumentError naming calendar or time_zone", unit, zone, err)
				}
				return
			}
			req.Calendar = c
		}
		d, err := s.Check(time.UnixMilli(nowMS), req)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) && !errors.Is(err, ErrCapacity) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		checkDecisionContract(t, req, d)
	})
}

func checkDecisionContract(t *testing.T, req Request, d Decision) {
	t.Helper()
	if req.Calendar != 0 {
		checkCalendarContract(t, req, d)
		return
	}
	switch {
	case d.Limit != req.Limit:
		t.Fatalf("limit %d, want %d", d.Limit, req.Limit)
	case d.Remaining < 0 || d.Remaining > req.Limit:
		t.Fatalf("remaining %d outside [0, %d]", d.Remaining, req.Limit)
	case d.CurrentCount < 0:
		t.Fatalf("negative current count %d", d.CurrentCount)
	case d.Allowed && d.RetryAfter != 0:
		t.Fatalf("allowed with retry after %s", d.RetryAfter)
	case !d.Allowed && d.RetryAfter <= 0:
		t.Fatalf("denied with retry after %s", d.RetryAfter)
	case d.RetryAfter > 2*req.Window || d.ResetAfter > 2*req.Window || d.ResetAfter < 0:
		t.Fatalf("retry %s / reset %s beyond two windows of %s", d.RetryAfter, d.ResetAfter, req.Window)
	case d.Allowed && req.Hits > 0 && d.ResetAfter <= 0:
		t.Fatalf("consumed hits but reset after %s", d.ResetAfter)
	case d.RefillAfter < 0 || d.RefillAfter > req.Window:
		t.Fatalf("refill after %s outside [0, %s]", d.RefillAfter, req.Window)
	case req.Algorithm == SlidingWindowCounter && d.RefillAfter == 0:
		t.Fatalf("counter refill after 0: its current window always has time left")
	case req.Algorithm == SlidingWindowLog && d.RefillAfter > d.ResetAfter:
		t.Fatalf("log refill after %s beyond its reset after %s: the oldest hit leaves first", d.RefillAfter, d.ResetAfter)
	}
}

// FuzzTrafficMatchesModel interprets the input as a traffic script (each
// 4-byte op: key, time step, hits, limit change) and replays it against the
// store and the brute-force reference model. The top three bits of the
// fourth byte pick the operation: 6 a charge (hits up to three limits), 7 a
// refund (hits up to two limits), anything else a check.
func FuzzTrafficMatchesModel(f *testing.F) {
	f.Add(uint8(0), uint8(10), []byte{0, 1, 1, 0, 1, 0, 1, 0, 0, 200, 2, 1})
	f.Add(uint8(1), uint8(7), []byte{0, 0, 3, 0, 0, 0, 3, 0, 2, 9, 1, 1})
	f.Add(uint8(0), uint8(9), []byte{0, 1, 9, 0xc0, 0, 3, 1, 1, 0, 2, 4, 0xe1, 0, 20, 1, 1})
	f.Add(uint8(1), uint8(9), []byte{1, 1, 9, 0xc4, 1, 3, 1, 1, 1, 2, 4, 0xe1, 1, 5, 1, 1})
	f.Fuzz(func(t *testing.T, algo uint8, window uint8, script []byte) {
		a := Algorithm(algo % 2)
		w := int64(window%64) + 1
		s := newStore(t, 2, nil)
		refs := [3]*refModel{newRef(a, w), newRef(a, w), newRef(a, w)}
		keys := [3]string{"x", "y", "z"}
		now := int64(1_000_000)
		limit := int64(4)
		for i := 0; i+4 <= len(script) && i < 4*200; i += 4 {
			k := int(script[i]) % 3
			now += int64(script[i+1]) % (3 * w)
			if script[i+3]%4 == 0 { // occasionally change the limit
				limit = int64(script[i+3]%13) + 1
			}
			if op := script[i+3] >> 5; op >= 6 {
				adjustMatchesModel(t, s, refs[k], op == 6, now, Request{Key: keys[k], Limit: limit, Window: time.Duration(w) * time.Millisecond,
					Algorithm: a, Hits: 1 + int64(script[i+2])%((9-int64(op))*limit)})
				continue
			}
			hits := int64(script[i+2]) % (limit + 1)
			req := Request{Key: keys[k], Limit: limit, Window: time.Duration(w) * time.Millisecond, Algorithm: a, Hits: hits}
			d, err := s.Check(time.UnixMilli(now), req)
			if err != nil {
				t.Fatal(err)
			}
			checkDecisionContract(t, req, d)
			allowed, count, retry, reset := refs[k].check(now, limit, hits)
			refill := refs[k].refill(now)
			if d.Allowed != allowed || d.CurrentCount != count || d.RetryAfter.Milliseconds() != retry || d.ResetAfter.Milliseconds() != reset ||
				d.RefillAfter.Milliseconds() != refill {
				t.Fatalf("op %d (%s w=%d limit=%d hits=%d t=%d): store %+v, model allowed=%v count=%d retry=%d reset=%d refill=%d",
					i/4, a, w, limit, hits, now, d, allowed, count, retry, reset, refill)
			}
		}
	})
}

// checkCalendarContract is checkDecisionContract for a calendar limit,
// whose window is its period: at most a year and a clock change long,
// and retry, reset and refill are the time to its end.
func checkCalendarContract(t *testing.T, req Request, d Decision) {
	t.Helper()
	longest := req.Calendar.Unit().Longest()
	switch {
	case d.Limit != req.Limit:
		t.Fatalf("limit %d, want %d", d.Limit, req.Limit)
	case d.Remaining < 0 || d.Remaining > req.Limit:
		t.Fatalf("remaining %d outside [0, %d]", d.Remaining, req.Limit)
	case d.CurrentCount < 0:
		t.Fatalf("negative current count %d", d.CurrentCount)
	case d.Allowed != (d.RetryAfter == 0):
		t.Fatalf("allowed %v with retry after %s", d.Allowed, d.RetryAfter)
	case d.RefillAfter <= 0 || d.RefillAfter > longest:
		t.Fatalf("refill after %s outside (0, %s]", d.RefillAfter, longest)
	case !d.Allowed && d.RetryAfter != d.RefillAfter:
		t.Fatalf("retry after %s, not the period's end (%s)", d.RetryAfter, d.RefillAfter)
	case d.ResetAfter != 0 && d.ResetAfter != d.RefillAfter:
		t.Fatalf("reset after %s, neither 0 nor the period's end (%s)", d.ResetAfter, d.RefillAfter)
	case d.Allowed && req.Hits > 0 && d.ResetAfter == 0:
		t.Fatalf("consumed hits but reset after 0")
	}
}
