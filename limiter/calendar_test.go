package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func calReq(t testing.TB, u CalendarUnit, zone string, limit, hits int64) Request {
	return Request{Key: "tenant:7", Limit: limit, Calendar: mustCalendar(t, u, zone), Hits: hits}
}

func check(t *testing.T, s *Store, now time.Time, r Request) Decision {
	t.Helper()
	d, err := s.Check(now, r)
	require.NoError(t, err)
	return d
}

// A monthly quota in Paris: used up on January 31, denied until February
// begins in Paris, with retry, reset and refill all the time to it; then
// whole again.
func TestCalendarQuotaResetsAtTheBoundary(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarMonth, "Europe/Paris", 3, 1)
	at := local(t, "Europe/Paris", "2025-01-31T10:00:00.000")
	feb := local(t, "Europe/Paris", "2025-02-01T00:00:00.000")
	for i := range 3 {
		d := check(t, s, at, r)
		require.True(t, d.Allowed)
		assert.EqualValues(t, i, d.CurrentCount)
		assert.EqualValues(t, 2-i, d.Remaining)
		assert.Equal(t, feb.Sub(at), d.ResetAfter)
		assert.Equal(t, feb.Sub(at), d.RefillAfter)
	}
	d := check(t, s, at, r)
	assert.Equal(t, Decision{Allowed: false, Limit: 3, CurrentCount: 3, RetryAfter: feb.Sub(at), ResetAfter: feb.Sub(at), RefillAfter: feb.Sub(at)}, d)

	last := feb.Add(-time.Millisecond)
	d = check(t, s, last, r)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Millisecond, d.RetryAfter)

	d = check(t, s, feb, r)
	assert.True(t, d.Allowed, "the count starts again at the boundary: the burst there is intended")
	assert.Zero(t, d.CurrentCount)
	march := local(t, "Europe/Paris", "2025-03-01T00:00:00.000")
	assert.Equal(t, march.Sub(feb), d.ResetAfter, "February 2025 has 28 days")
}

// reset_after is the time to the boundary on the days a clock change
// makes 23 and 25 hours long.
func TestCalendarDaysOfClockChanges(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarDay, "America/New_York", 10, 1)
	for _, c := range []struct {
		day   string
		hours time.Duration
	}{{"2024-03-10", 23}, {"2024-07-04", 24}, {"2024-11-03", 25}} {
		d := check(t, s, local(t, "America/New_York", c.day+"T00:00:00.000"), r)
		assert.Equal(t, c.hours*time.Hour, d.ResetAfter, c.day)
		assert.Equal(t, c.hours*time.Hour, d.RefillAfter, c.day)
	}
}

// A day in UTC, a day in Paris and a 24 h sliding window of one key are
// three limits, and so are a day and a week.
func TestCalendarIsPartOfTheIdentity(t *testing.T) {
	s := newStore(t, 4, nil)
	now := local(t, "UTC", "2025-06-15T12:00:00.000")
	reqs := []Request{
		calReq(t, CalendarDay, "UTC", 1, 1),
		calReq(t, CalendarDay, "Europe/Paris", 1, 1),
		calReq(t, CalendarWeek, "UTC", 1, 1),
		{Key: "tenant:7", Limit: 1, Window: 24 * time.Hour, Hits: 1},
	}
	for _, r := range reqs {
		assert.True(t, check(t, s, now, r).Allowed, "%v", r.Calendar)
	}
	for _, r := range reqs {
		assert.False(t, check(t, s, now, r).Allowed, "%v", r.Calendar)
	}
	assert.Equal(t, 4, s.Stats().CounterKeys)
}

func TestCalendarRequestsNameTheBadField(t *testing.T) {
	s := newStore(t, 4, nil)
	for _, c := range []struct {
		edit  func(*Request)
		field string
	}{
		{func(r *Request) { r.Algorithm = SlidingWindowLog }, "algorithm"},
		{func(r *Request) { r.Window = time.Hour }, "window_ms"},
		{func(r *Request) { r.Calendar = Calendar(calendarUnitMask) }, "calendar"},
		{func(r *Request) { r.Hits = 4 }, "hits"},
		{func(r *Request) { r.Limit = 0 }, "limit"},
	} {
		r := calReq(t, CalendarMonth, "UTC", 3, 1)
		c.edit(&r)
		for _, op := range []Op{OpCheck, OpReserve, OpCharge} {
			r.Op = op
			if op == OpCharge && c.field == "hits" {
				continue // a charge may exceed the limit
			}
			_, err := s.Apply(time.UnixMilli(1_700_000_000_000), r)
			var ae *ArgumentError
			require.ErrorAs(t, err, &ae, "%s: want %s", op, c.field)
			assert.Equal(t, c.field, ae.Field, "%s: %v", op, err)
		}
	}
}

// A clock that stepped back into the previous period decides in the
// state's period, from its start: a quota cannot be regained by time
// travel.
func TestCalendarClockBackIsClamped(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarMonth, "UTC", 2, 1)
	feb := local(t, "UTC", "2025-02-01T00:00:00.000")
	check(t, s, feb.Add(time.Hour), r)
	check(t, s, feb.Add(time.Hour), r)
	d := check(t, s, feb.Add(-time.Minute), r)
	assert.False(t, d.Allowed)
	assert.EqualValues(t, 2, d.CurrentCount)
	assert.Equal(t, 28*24*time.Hour, d.RetryAfter, "measured from the start of the state's period")
}

// Handoff and replicas: the counts of one period are summed, a later
// period's count is kept, a period over by the receiver's clock adds
// nothing, and Forget of what MergeAdded returned takes back exactly.
func TestCalendarStatesMergeByPeriod(t *testing.T) {
	a, b := newStore(t, 4, nil), newStore(t, 4, nil)
	r := calReq(t, CalendarMonth, "Europe/Paris", 100, 3)
	jan := local(t, "Europe/Paris", "2025-01-20T00:00:00.000")
	check(t, a, jan, r)
	r2 := r
	r2.Hits = 2
	check(t, b, jan, r2)

	p := a.Transfer().PartitionOf(r.Key)
	states := a.Transfer().SnapshotPartition(p, jan)
	require.Len(t, states, 1)
	ks := states[0]
	assert.Equal(t, r.Calendar, ks.Calendar)
	assert.Zero(t, ks.Window)
	assert.Equal(t, local(t, "Europe/Paris", "2025-01-01T00:00:00.000").UnixMilli(), ks.WindowID)
	assert.EqualValues(t, 3, ks.Curr)
	assert.Equal(t, local(t, "Europe/Paris", "2025-02-01T00:00:00.000").UnixMilli(), ks.Expiry())

	added, errs := b.Transfer().MergeAdded(jan, states)
	require.Empty(t, errs)
	assert.EqualValues(t, 5, peekCount(t, b, jan, r), "one period: summed")
	b.Transfer().Forget(jan, added)
	assert.EqualValues(t, 2, peekCount(t, b, jan, r), "Forget takes back what was added")

	// b's clock has reached February: January's state adds nothing.
	feb := local(t, "Europe/Paris", "2025-02-01T00:00:00.000")
	merged, errs := b.Transfer().Merge(feb, states)
	require.Empty(t, errs)
	assert.Equal(t, 1, merged)
	assert.Zero(t, peekCount(t, b, feb, r))

	// A sender ahead has crossed into February; b, still in January,
	// keeps February's count: the boundary moves by the skew.
	c := newStore(t, 4, nil)
	check(t, c, jan, r2)
	later := ks
	later.WindowID, later.Curr = feb.UnixMilli(), 7
	_, errs = c.Transfer().Merge(jan, []KeyState{later})
	require.Empty(t, errs)
	assert.EqualValues(t, 7, peekCount(t, c, feb.Add(-time.Second), r))
	// And an older period's state after that adds nothing.
	_, errs = c.Transfer().Merge(feb.Add(-time.Second), []KeyState{ks})
	require.Empty(t, errs)
	assert.EqualValues(t, 7, peekCount(t, c, feb, r))

	bad := ks
	bad.Prev = 1
	_, errs = c.Transfer().Merge(jan, []KeyState{bad})
	require.Len(t, errs, 1)
	bad = ks
	bad.Algorithm = SlidingWindowLog
	_, errs = c.Transfer().Merge(jan, []KeyState{bad})
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errs[0], "algorithm")
}

// The replication journal carries a calendar key's state with its
// calendar, and its tombstone once reset: a counter only (a calendar has
// no log).
func TestCalendarChangesReplicate(t *testing.T) {
	s := newStore(t, 4, func(c *Config) { c.TrackChanges = true })
	r := calReq(t, CalendarWeek, "Asia/Tokyo", 10, 2)
	now := local(t, "Asia/Tokyo", "2025-06-18T09:00:00.000")
	check(t, s, now, r)
	p := s.Transfer().PartitionOf(r.Key)
	got := s.Changes().Take(nil, p, now)
	require.Len(t, got, 1)
	assert.Equal(t, KeyState{Key: r.Key, Calendar: r.Calendar, WindowID: local(t, "Asia/Tokyo", "2025-06-16T00:00:00.000").UnixMilli(), Curr: 2}, got[0])

	assert.True(t, s.Admin().DeleteLimit(now, r))
	got = s.Changes().Take(nil, p, now)
	assert.Equal(t, []KeyState{{Key: r.Key, Calendar: r.Calendar}}, got, "the tombstone, of the counter only")
}

// Reservations on a calendar limit settle in the period they were counted
// in: a refund never crosses a boundary, so last month's unused hits do
// not credit this month.
func TestCalendarReservationsSettleWithinTheirPeriod(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarMonth, "UTC", 20, 5)
	r.Op = OpReserve
	jan := local(t, "UTC", "2025-01-31T23:30:00.000")
	feb := local(t, "UTC", "2025-02-01T00:10:00.000")

	d, err := s.Apply(jan, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = s.Apply(jan.Add(time.Second), settleReq(r, d.Adjust.Reservation, 2))
	require.NoError(t, err)
	assert.Equal(t, Adjustment{Refunded: 3, Settled: SettledNow}, *d.Adjust)
	assert.EqualValues(t, 2, peekCount(t, s, jan.Add(time.Second), r))

	r.TTL = time.Hour
	d, err = s.Apply(jan, r)
	require.NoError(t, err)
	tok := d.Adjust.Reservation
	d, err = s.Apply(jan, r)
	require.NoError(t, err)
	tok2 := d.Adjust.Reservation
	check(t, s, feb, Request{Key: r.Key, Limit: 20, Calendar: r.Calendar, Hits: 4})
	d, err = s.Apply(feb, settleReq(r, tok, 1))
	require.NoError(t, err)
	assert.Equal(t, Adjustment{Settled: SettledNow}, *d.Adjust, "January's unused hits are gone with January")
	assert.EqualValues(t, 4, d.CurrentCount, "February keeps its own count")

	// A cost above the reservation is charged in the period of the settle.
	d, err = s.Apply(feb, settleReq(r, tok2, 8))
	require.NoError(t, err)
	assert.Equal(t, Adjustment{Over: 0, Settled: SettledNow}, *d.Adjust)
	assert.EqualValues(t, 7, peekCount(t, s, feb, r))
	assert.Len(t, s.Reservations().Open(r.Key, feb, 10), 0)

	// A token is bound to its calendar: another zone's is another limit.
	d, err = s.Apply(feb, r)
	require.NoError(t, err)
	other := r
	other.Calendar = mustCalendar(t, CalendarMonth, "Europe/Paris")
	_, err = s.Apply(feb, settleReq(other, d.Adjust.Reservation, 0))
	var ae *ArgumentError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "reservation", ae.Field)
	open := s.Reservations().Open(r.Key, feb, 10)
	require.Len(t, open, 1)
	assert.Equal(t, r.Calendar, open[0].Calendar)
	assert.Zero(t, open[0].Window)
}

// A HOLD (all-or-nothing) that expires unsettled gives its hits back to
// its period, not to the next.
func TestCalendarHoldExpiryReleasesWithinThePeriod(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarDay, "UTC", 10, 4)
	r.Op, r.TTL = OpHold, 10*time.Second
	now := local(t, "UTC", "2025-06-15T12:00:00.000")
	d, err := s.Apply(now, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.EqualValues(t, 4, peekCount(t, s, now, r))
	assert.Equal(t, 1, s.Reservations().Expire(now.Add(10*time.Second)))
	assert.Zero(t, peekCount(t, s, now.Add(10*time.Second), r))

	late := local(t, "UTC", "2025-06-15T23:59:55.000")
	_, err = s.Apply(late, r)
	require.NoError(t, err)
	check(t, s, late.Add(10*time.Second), Request{Key: r.Key, Limit: 10, Calendar: r.Calendar, Hits: 1})
	s.Reservations().Expire(late.Add(10 * time.Second))
	assert.EqualValues(t, 1, peekCount(t, s, late.Add(10*time.Second), r), "the hold's hits were yesterday's")
}

// REFUND takes back from the period's count, never below 0; CHARGE counts
// past the limit, and the debt lasts until the boundary.
func TestCalendarRefundAndCharge(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarHour, "UTC", 10, 6)
	now := local(t, "UTC", "2025-06-15T12:15:00.000")
	next := local(t, "UTC", "2025-06-15T13:00:00.000")
	check(t, s, now, r)
	r.Op, r.Hits = OpRefund, 4
	d, err := s.Apply(now, r)
	require.NoError(t, err)
	assert.EqualValues(t, 4, d.Adjust.Refunded)
	assert.EqualValues(t, 2, d.CurrentCount)
	r.Hits = 9
	d, err = s.Apply(now, r)
	require.NoError(t, err)
	assert.EqualValues(t, 2, d.Adjust.Refunded, "never below 0")

	r.Op, r.Hits = OpCharge, 25
	d, err = s.Apply(now, r)
	require.NoError(t, err)
	assert.EqualValues(t, 15, d.Adjust.Over)
	assert.False(t, d.Allowed)
	assert.Equal(t, next.Sub(now), d.RetryAfter, "the debt lasts until the boundary")
	assert.EqualValues(t, 0, d.CurrentCount)
	one := calReq(t, CalendarHour, "UTC", 10, 1)
	assert.False(t, check(t, s, next.Add(-time.Millisecond), one).Allowed)
	assert.True(t, check(t, s, next, one).Allowed)

	r.Op, r.Hits = OpRefund, 1
	d, err = s.Apply(next.Add(time.Hour), r)
	require.NoError(t, err)
	assert.Zero(t, d.Adjust.Refunded, "a refund finds nothing of a period that is over")
}

// --max-keys never evicts a calendar key: its count is a quota only its
// boundary resets. A new key that finds no sliding key to evict is
// refused and counted, as under --overflow=reject.
func TestCalendarKeysAreNeverEvicted(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.MaxKeys, c.Overflow = 2, OverflowEvict })
	now := local(t, "UTC", "2025-06-15T12:00:00.000")
	month := func(key string) Request {
		return Request{Key: key, Limit: 5, Calendar: mustCalendar(t, CalendarMonth, "UTC"), Hits: 1}
	}
	check(t, s, now, month("a"))
	check(t, s, now, month("b"))
	for _, r := range []Request{month("c"), {Key: "d", Limit: 5, Window: time.Minute, Hits: 1}} {
		_, err := s.Check(now, r)
		require.ErrorIs(t, err, ErrCapacity)
		assert.Contains(t, err.Error(), "never evicted")
	}
	st := s.Stats()
	assert.EqualValues(t, 2, st.Rejections)
	assert.Zero(t, st.Evictions)
	assert.EqualValues(t, 1, peekCount(t, s, now, month("a")), "kept exact")

	// A sliding key is evicted for a new one; the calendar one stays.
	s = newStore(t, 1, func(c *Config) { c.MaxKeys, c.Overflow = 2, OverflowEvict })
	check(t, s, now, month("a"))
	check(t, s, now, Request{Key: "sliding", Limit: 5, Window: time.Minute, Hits: 1})
	check(t, s, now, month("b"))
	assert.EqualValues(t, 1, s.Stats().Evictions)
	assert.EqualValues(t, 1, peekCount(t, s, now, month("a")))

	// Once its month is over, a calendar key is expired and makes room.
	july := local(t, "UTC", "2025-07-01T00:00:00.000")
	check(t, s, july, month("c"))
	assert.EqualValues(t, 2, s.Stats().Expired, "both of June's")
	assert.EqualValues(t, 1, s.Stats().Evictions)
}

// A calendar count that arrives by a restore, a handoff or a promotion
// (Merge, MergeAdded) is never dropped for room: a full partition first
// frees or evicts as for a new key, and past that keeps the state over
// its cap, counted. Any other state is refused there, as a new key is.
func TestCalendarStatesAreKeptPastTheKeyCap(t *testing.T) {
	now := local(t, "UTC", "2025-06-15T12:00:00.000")
	june := local(t, "UTC", "2025-06-01T00:00:00.000").UnixMilli()
	month := func(key string) Request {
		return Request{Key: key, Limit: 50, Calendar: mustCalendar(t, CalendarMonth, "UTC"), Hits: 1}
	}
	state := func(key string, curr int64) KeyState {
		return KeyState{Key: key, Algorithm: SlidingWindowCounter, Calendar: mustCalendar(t, CalendarMonth, "UTC"), WindowID: june, Curr: curr}
	}
	sliding := KeyState{Key: "s", Window: time.Minute, Algorithm: SlidingWindowCounter, WindowID: now.UnixMilli() / 60_000, Curr: 1}
	for _, overflow := range []OverflowPolicy{OverflowReject, OverflowEvict} {
		t.Run(overflow.String(), func(t *testing.T) {
			s := newStore(t, 1, func(c *Config) { c.MaxKeys, c.Overflow = 2, overflow })
			check(t, s, now, month("a"))
			check(t, s, now, month("b"))

			merged, errs := s.Transfer().Merge(now, []KeyState{state("c", 30), sliding})
			assert.Equal(t, 1, merged)
			require.Len(t, errs, 1, "the sliding state is refused as a new key is")
			assert.ErrorIs(t, errs[0], ErrCapacity)
			added, errs := s.Transfer().MergeAdded(now, []KeyState{state("d", 40)})
			require.Empty(t, errs)
			require.Len(t, added, 1)

			assert.EqualValues(t, 30, peekCount(t, s, now, month("c")), "restored past the cap, not dropped")
			assert.EqualValues(t, 40, peekCount(t, s, now, month("d")))
			st := s.Stats()
			assert.EqualValues(t, 2, st.CalendarOverCap)
			assert.Equal(t, 4, st.CounterKeys, "two past a cap of two")
			assert.EqualValues(t, 1, st.Rejections, "the sliding state's")
			_, err := s.Check(now, month("e"))
			assert.ErrorIs(t, err, ErrCapacity, "a new key is still refused")
		})
	}

	// Where a sliding key can be evicted, it is, and the cap holds.
	s := newStore(t, 1, func(c *Config) { c.MaxKeys, c.Overflow = 2, OverflowEvict })
	check(t, s, now, month("a"))
	check(t, s, now, Request{Key: "s", Limit: 5, Window: time.Minute, Hits: 1})
	_, errs := s.Transfer().Merge(now, []KeyState{state("c", 30)})
	require.Empty(t, errs)
	st := s.Stats()
	assert.EqualValues(t, 1, st.Evictions)
	assert.Zero(t, st.CalendarOverCap)
	assert.Equal(t, 2, st.CounterKeys)
	assert.EqualValues(t, 30, peekCount(t, s, now, month("c")))
}

func TestCalendarSweepAndInspect(t *testing.T) {
	s := newStore(t, 4, nil)
	r := calReq(t, CalendarDay, "Europe/Paris", 10, 3)
	now := local(t, "Europe/Paris", "2025-06-15T18:00:00.000")
	check(t, s, now, r)
	check(t, s, now, Request{Key: r.Key, Limit: 10, Window: time.Minute, Hits: 1})
	views, err := s.Admin().Inspect(now, r.Key, 10, 8)
	require.NoError(t, err)
	require.Len(t, views, 2)
	cal := views[0]
	assert.True(t, local(t, "Europe/Paris", "2025-06-15T00:00:00.000").Equal(cal.WindowStart), "the day began at midnight in Paris")
	cal.WindowStart = time.Time{}
	assert.Equal(t, KeyView{Algorithm: SlidingWindowCounter, Calendar: r.Calendar, Count: 3, ResetAfter: 6 * time.Hour,
		Current: 3, NextAllow: 6 * time.Hour}, cal)
	assert.Equal(t, time.Minute, views[1].Window)

	assert.Equal(t, 1, s.Sweep(now.Add(5*time.Hour)), "the sliding key")
	assert.Zero(t, s.Sweep(now.Add(6*time.Hour-time.Millisecond)))
	assert.Equal(t, 1, s.Sweep(now.Add(6*time.Hour)), "the day ends at midnight in Paris")
	assert.Zero(t, s.Stats().CounterKeys)
}
