package limiter

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustCalendar(t testing.TB, u CalendarUnit, zone string) Calendar {
	t.Helper()
	c, err := NewCalendar(u, zone)
	require.NoError(t, err)
	return c
}

func mustZone(t testing.TB, zone string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	return loc
}

// local is the instant the wall clock of zone shows s
// ("2006-01-02T15:04:05.000"); s must exist once there.
func local(t testing.TB, zone, s string) time.Time {
	t.Helper()
	tm, err := time.ParseInLocation("2006-01-02T15:04:05.000", s, mustZone(t, zone))
	require.NoError(t, err)
	return tm
}

// Every boundary the issue names, as the zone's wall clock shows it: the
// period holding t and the time left to its end.
func TestCalendarPeriods(t *testing.T) {
	for _, c := range []struct {
		name       string
		unit       CalendarUnit
		zone       string
		at         string // wall clock in zone
		start, end string // wall clock in zone
		left       time.Duration
	}{
		{"month end Jan 31 → Feb 1", CalendarMonth, "Europe/Paris", "2025-01-31T23:59:59.999", "2025-01-01T00:00:00.000", "2025-02-01T00:00:00.000", time.Millisecond},
		{"February of a common year: 28 days", CalendarMonth, "UTC", "2023-02-28T12:00:00.000", "2023-02-01T00:00:00.000", "2023-03-01T00:00:00.000", 12 * time.Hour},
		{"February of a leap year: 29 days", CalendarMonth, "UTC", "2024-02-28T12:00:00.000", "2024-02-01T00:00:00.000", "2024-03-01T00:00:00.000", 36 * time.Hour},
		{"Feb 29 itself", CalendarDay, "UTC", "2024-02-29T00:00:00.000", "2024-02-29T00:00:00.000", "2024-03-01T00:00:00.000", 24 * time.Hour},
		{"a 31-day month with a DST change (Paris, March)", CalendarMonth, "Europe/Paris", "2025-03-01T00:00:00.000", "2025-03-01T00:00:00.000", "2025-04-01T00:00:00.000", 31*24*time.Hour - time.Hour},
		{"ISO week starts on Monday", CalendarWeek, "UTC", "2025-06-15T23:00:00.000", "2025-06-09T00:00:00.000", "2025-06-16T00:00:00.000", time.Hour},
		{"a Monday begins its own week", CalendarWeek, "UTC", "2025-06-16T00:00:00.000", "2025-06-16T00:00:00.000", "2025-06-23T00:00:00.000", 7 * 24 * time.Hour},
		{"a week across the new year", CalendarWeek, "Europe/Paris", "2026-01-01T10:00:00.000", "2025-12-29T00:00:00.000", "2026-01-05T00:00:00.000", 3*24*time.Hour + 14*time.Hour},
		{"spring forward: a 23-hour day", CalendarDay, "America/New_York", "2024-03-10T00:00:00.000", "2024-03-10T00:00:00.000", "2024-03-11T00:00:00.000", 23 * time.Hour},
		{"fall back: a 25-hour day", CalendarDay, "America/New_York", "2024-11-03T00:00:00.000", "2024-11-03T00:00:00.000", "2024-11-04T00:00:00.000", 25 * time.Hour},
		{"after the spring-forward gap", CalendarDay, "America/New_York", "2024-03-10T03:00:00.000", "2024-03-10T00:00:00.000", "2024-03-11T00:00:00.000", 21 * time.Hour},
		{"a leap year: 366 days", CalendarYear, "UTC", "2024-01-01T00:00:00.000", "2024-01-01T00:00:00.000", "2025-01-01T00:00:00.000", 366 * 24 * time.Hour},
		{"a year in a zone", CalendarYear, "Asia/Tokyo", "2025-12-31T23:59:00.000", "2025-01-01T00:00:00.000", "2026-01-01T00:00:00.000", time.Minute},
		{"a minute", CalendarMinute, "UTC", "2025-06-15T10:20:30.250", "2025-06-15T10:20:00.000", "2025-06-15T10:21:00.000", 29*time.Second + 750*time.Millisecond},
		{"an hour", CalendarHour, "Europe/Paris", "2025-06-15T10:20:30.000", "2025-06-15T10:00:00.000", "2025-06-15T11:00:00.000", 39*time.Minute + 30*time.Second},
		{"an hour at half past UTC's (India, +5:30)", CalendarHour, "Asia/Kolkata", "2025-06-15T10:59:00.000", "2025-06-15T10:00:00.000", "2025-06-15T11:00:00.000", time.Minute},
		{"a minute at +5:45 (Nepal)", CalendarMinute, "Asia/Kathmandu", "2025-06-15T10:59:59.000", "2025-06-15T10:59:00.000", "2025-06-15T11:00:00.000", time.Second},
		// Santiago moves its clocks at midnight: 2023-09-03 has no 00:00,
		// it begins at 01:00 -03, and the day before has 23 hours.
		{"a day whose midnight is skipped begins after the gap", CalendarDay, "America/Santiago", "2023-09-03T01:00:00.000", "2023-09-03T01:00:00.000", "2023-09-04T00:00:00.000", 23 * time.Hour},
		{"the day before it ends at the gap", CalendarDay, "America/Santiago", "2023-09-02T23:59:00.000", "2023-09-02T00:00:00.000", "2023-09-03T01:00:00.000", time.Minute},
		// Samoa skipped 2011-12-30 when it crossed the date line: the 29th
		// (24 hours) ends where the 31st begins.
		{"a day after which the calendar skips one", CalendarDay, "Pacific/Apia", "2011-12-29T12:00:00.000", "2011-12-29T00:00:00.000", "2011-12-31T00:00:00.000", 12 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			cal := mustCalendar(t, c.unit, c.zone)
			at := local(t, c.zone, c.at)
			start, end := cal.Period(at.UnixMilli())
			assert.Equal(t, local(t, c.zone, c.start).UnixMilli(), start, "start %s", time.UnixMilli(start).In(mustZone(t, c.zone)))
			assert.Equal(t, local(t, c.zone, c.end).UnixMilli(), end, "end %s", time.UnixMilli(end).In(mustZone(t, c.zone)))
			assert.Equal(t, c.left, time.Duration(end-at.UnixMilli())*time.Millisecond)
		})
	}
}

// On the day New York falls back, 01:00–02:00 happens twice: each real
// hour is its own period, so an hourly quota never spans two hours.
func TestCalendarHourRepeatedByFallBackIsTwoPeriods(t *testing.T) {
	cal := mustCalendar(t, CalendarHour, "America/New_York")
	first := time.Date(2024, 11, 3, 5, 30, 0, 0, time.UTC) // 01:30 EDT
	second := first.Add(time.Hour)                         // 01:30 EST
	s1, e1 := cal.Period(first.UnixMilli())
	s2, e2 := cal.Period(second.UnixMilli())
	assert.Equal(t, time.Date(2024, 11, 3, 5, 0, 0, 0, time.UTC).UnixMilli(), s1)
	assert.Equal(t, e1, s2, "the second 01:00 begins where the first ends")
	assert.Equal(t, int64(time.Hour/time.Millisecond), e2-s2)
}

// label is a period's name as the zone's calendar spells it, computed
// without the store's code: two instants are in one period iff their
// labels are equal. Hours carry the offset, so that the hour a fall-back
// repeats is two labels.
// zoneOffset returns the zone's offset from UTC at ms, in seconds.
func zoneOffset(loc *time.Location, ms int64) int {
	_, off := time.UnixMilli(ms).In(loc).Zone()
	return off
}

func label(u CalendarUnit, t time.Time) string {
	switch u {
	case CalendarMinute:
		return t.Format("2006-01-02T15:04 -0700")
	case CalendarHour:
		return t.Format("2006-01-02T15 -0700")
	case CalendarDay:
		return t.Format("2006-01-02")
	case CalendarWeek:
		y, w := t.ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	case CalendarMonth:
		return t.Format("2006-01")
	}
	return t.Format("2006")
}

// Over random instants of 2010–2030 in zones with every kind of clock
// change (DST north and south, at midnight, by 30 minutes, offsets of
// :30 and :45, a skipped day): the period holding t holds it, and each of
// its ends is where the zone's own calendar changes its label, found by
// the label of the millisecond on either side.
func TestCalendarPeriodsMatchTheZonesCalendar(t *testing.T) {
	seed := seedFromEnv(t, uint64(time.Now().UnixNano()))
	t.Logf("seed %d (PEERLIMIT_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	lo, hi := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	zonesTried := []string{"UTC", "Europe/Paris", "America/New_York", "Australia/Sydney", "America/Santiago", "America/Havana",
		"Asia/Beirut", "Asia/Kolkata", "Asia/Kathmandu", "Pacific/Chatham", "Pacific/Apia", "Australia/Lord_Howe"}
	for _, zone := range zonesTried {
		loc := mustZone(t, zone)
		for u := CalendarMinute; u < calendarUnits; u++ {
			cal := mustCalendar(t, u, zone)
			for range 300 {
				ms := lo + rng.Int64N(hi-lo)
				start, end := cal.Period(ms)
				require.True(t, start <= ms && ms < end, "%s %s: %d outside [%d, %d)", zone, u, ms, start, end)
				require.LessOrEqual(t, time.Duration(end-start)*time.Millisecond, u.Longest(), "%s %s", zone, u)
				if u <= CalendarHour && zoneOffset(loc, start) != zoneOffset(loc, end-1) {
					// A clock change inside a real minute or hour (Lord Howe's
					// 30 minutes, Chatham's at 2:45): one real period under two
					// labels, by design (see zone.fixed).
					continue
				}
				in := func(x int64) string { return label(u, time.UnixMilli(x).In(loc)) }
				want := in(ms)
				assert.Equal(t, want, in(start), "%s %s at %s: the start is in another period", zone, u, time.UnixMilli(ms).In(loc))
				assert.Equal(t, want, in(end-1), "%s %s at %s: the end's eve is in another period", zone, u, time.UnixMilli(ms).In(loc))
				assert.NotEqual(t, want, in(start-1), "%s %s at %s: the period began earlier", zone, u, time.UnixMilli(ms).In(loc))
				assert.NotEqual(t, want, in(end), "%s %s at %s: the period ends later", zone, u, time.UnixMilli(ms).In(loc))
				if u > CalendarHour {
					s2, e2 := cal.Period(end)
					assert.Equal(t, end, s2, "%s %s: the next period starts where this one ends", zone, u)
					assert.Greater(t, e2, s2)
				}
			}
		}
	}
}

func TestNewCalendarNamesTheField(t *testing.T) {
	for _, c := range []struct {
		unit  CalendarUnit
		zone  string
		field string
	}{
		{NoCalendar, "Europe/Paris", "time_zone"},
		{CalendarUnit(9), "", "calendar"},
		{CalendarMonth, "Mars/Olympus_Mons", "time_zone"},
		{CalendarMonth, "Local", "time_zone"},
		{CalendarMonth, string(make([]byte, 300)), "time_zone"},
	} {
		_, err := NewCalendar(c.unit, c.zone)
		var ae *ArgumentError
		require.ErrorAs(t, err, &ae, "%v %q", c.unit, c.zone)
		assert.Equal(t, c.field, ae.Field)
	}
	c, err := NewCalendar(NoCalendar, "")
	require.NoError(t, err)
	assert.Zero(t, c)

	utc := mustCalendar(t, CalendarDay, "")
	assert.Equal(t, utc, mustCalendar(t, CalendarDay, "UTC"), "the default zone is UTC")
	assert.Equal(t, "UTC", utc.Zone())
	paris := mustCalendar(t, CalendarMonth, "Europe/Paris")
	assert.Equal(t, paris, mustCalendar(t, CalendarMonth, "Europe/Paris"), "a zone is loaded once")
	assert.Equal(t, "MONTH in Europe/Paris", paris.String())
	assert.Equal(t, CalendarMonth, paris.Unit())
}

func TestParseCalendarUnit(t *testing.T) {
	for s, want := range map[string]CalendarUnit{"": NoCalendar, "month": CalendarMonth, "MONTH": CalendarMonth, "Week": CalendarWeek,
		"minute": CalendarMinute, "hour": CalendarHour, "day": CalendarDay, "year": CalendarYear} {
		got, err := ParseCalendarUnit(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	_, err := ParseCalendarUnit("fortnight")
	var ae *ArgumentError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "calendar", ae.Field)
}

// A zone another member names that this node does not know is carried
// as such, and the store refuses it naming the field.
func TestCalendarOfAnUnknownZoneIsRefusedByTheStore(t *testing.T) {
	s := newStore(t, 4, nil)
	c := CalendarOf(CalendarDay, "Mars/Olympus_Mons")
	_, err := s.Check(time.UnixMilli(1_700_000_000_000), Request{Key: "k", Limit: 1, Calendar: c, Hits: 1})
	var ae *ArgumentError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "time_zone", ae.Field)
	_, err = s.Check(time.UnixMilli(1_700_000_000_000), Request{Key: "k", Limit: 1, Calendar: CalendarOf(CalendarUnit(12), ""), Hits: 1})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "calendar", ae.Field)
	assert.Equal(t, mustCalendar(t, CalendarDay, "Europe/Paris"), CalendarOf(CalendarDay, "Europe/Paris"))
}
