package limiter

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/partition"
)

// Calendar windows. A calendar-aligned limit counts the hits of one
// period of a calendar unit (a minute, an hour, a day, an ISO week from
// Monday, a month, a year) in a named IANA time zone, and its count
// starts again from zero at the period's boundary: a quota, not a rate.
// It is the sliding window counter's state with a fixed window: the
// window id is the period's start (Unix ms), the current count its hits,
// the previous count always zero. docs/limiter.md, "Calendar windows",
// states the contract.

// CalendarUnit is the period a calendar-aligned limit counts in. The zero
// value, NoCalendar, is a sliding window.
type CalendarUnit uint8

const (
	NoCalendar CalendarUnit = iota
	CalendarMinute
	CalendarHour
	CalendarDay
	// CalendarWeek is the ISO 8601 week: from Monday 00:00 to the next.
	CalendarWeek
	CalendarMonth
	CalendarYear
	calendarUnits // how many values there are
)

var calendarUnitNames = [calendarUnits]string{"", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "YEAR"}

// String returns the unit's API name ("MONTH"); "" for NoCalendar.
func (u CalendarUnit) String() string {
	if u < calendarUnits {
		return calendarUnitNames[u]
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// Longest is the longest period of u in any zone: a day is 23 to 25
// hours long, a month 28 to 31 days, so that a caller capping a time at
// "one window" caps it at this. Zero for NoCalendar.
func (u CalendarUnit) Longest() time.Duration {
	// The most a zone turns its clocks back at once (Antarctica/Troll
	// moves by 2 hours); a zone that skips a day (Samoa, 2011) makes no
	// period longer.
	const clockChange = 2 * time.Hour
	const day = 24 * time.Hour
	switch u {
	case CalendarMinute:
		return time.Minute
	case CalendarHour:
		return time.Hour
	case CalendarDay:
		return day + clockChange
	case CalendarWeek:
		return 7*day + clockChange
	case CalendarMonth:
		return 31*day + clockChange
	case CalendarYear:
		return 366*day + clockChange
	}
	return 0
}

// ParseCalendarUnit reads a unit's API name, in any case ("month",
// "MONTH"); "" is NoCalendar. An unknown name is an *ArgumentError naming
// the calendar field.
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	for i, n := range calendarUnitNames {
		if strings.EqualFold(s, n) {
			return CalendarUnit(i), nil
		}
	}
	return 0, &ArgumentError{"calendar", fmt.Sprintf("unknown unit %q; want MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", clip(s))}
}

// Calendar is a calendar-aligned window: a unit in a time zone. The zero
// value is none (a sliding window). It is a handle into this process's
// table of the zones it has loaded, so two Calendars are compared with ==
// and a Calendar costs a request 4 bytes; the handle never leaves the
// process: the wire carries Unit and Zone, from which NewCalendar or
// CalendarOf makes the receiver's own handle.
type Calendar uint32

// The handle's layout: the unit in the low bits, the zone's index above.
const (
	calendarUnitBits = 3
	calendarUnitMask = 1<<calendarUnitBits - 1
	// unknownZone is the index of a zone this process could not load
	// (CalendarOf): the store refuses it, naming time_zone.
	unknownZone = 1<<(32-calendarUnitBits) - 1
)

// NewCalendar returns the calendar of unit in the IANA time zone named
// zone ("Europe/Paris"; "" is UTC). A calendar needs a unit: NoCalendar
// with a zone is refused naming time_zone, an unknown unit naming
// calendar, a zone this process cannot load naming time_zone ("Local",
// the node's own zone, is refused: it would differ between nodes).
// NoCalendar with no zone is the zero Calendar, no error.
func NewCalendar(unit CalendarUnit, zone string) (Calendar, error) {
	switch {
	case unit == NoCalendar && zone != "":
		return 0, &ArgumentError{"time_zone", "is only for a calendar limit: give calendar too"}
	case unit == NoCalendar:
		return 0, nil
	case unit >= calendarUnits:
		return 0, &ArgumentError{"calendar", fmt.Sprintf("unknown value %d", unit)}
	}
	idx, err := zones.index(zone)
	if err != nil {
		return 0, err
	}
	return Calendar(idx<<calendarUnitBits | uint32(unit)), nil
}

// CalendarOf is NewCalendar for what another member sent, which may name
// a zone or unit this process does not know (another version of the time
// zone database): it never fails, and the store refuses such a calendar
// wherever it is used, naming the field.
func CalendarOf(unit CalendarUnit, zone string) Calendar {
	c, err := NewCalendar(unit, zone)
	switch {
	case err == nil:
		return c
	case unit == NoCalendar || unit >= calendarUnits:
		return Calendar(unknownZone<<calendarUnitBits | calendarUnitMask) // an invalid unit
	}
	return Calendar(unknownZone<<calendarUnitBits | uint32(unit))
}

// Unit returns c's unit; NoCalendar for the zero Calendar.
func (c Calendar) Unit() CalendarUnit { return CalendarUnit(c & calendarUnitMask) }

// Zone returns the name of c's time zone ("UTC" for the default), "" for
// the zero Calendar or a zone this process does not know.
func (c Calendar) Zone() string {
	if z := c.zone(); z != nil {
		return z.name
	}
	return ""
}

// String describes c: "MONTH in Europe/Paris".
func (c Calendar) String() string {
	if c == 0 {
		return "none"
	}
	return c.Unit().String() + " in " + c.Zone()
}

// Period returns the period of c that holds t (Unix ms), as [start, end)
// in Unix ms: where its count starts and where it starts again. For a
// Calendar the store would refuse it returns (t, t).
func (c Calendar) Period(t int64) (start, end int64) {
	k, ok := c.cal()
	if !ok {
		return t, t
	}
	p := k.periodAt(t)
	return p.start, p.end
}

// validate reports a calendar the store cannot count in: a unit or a zone
// this process does not know.
func (c Calendar) validate() error {
	if u := c.Unit(); u == NoCalendar || u >= calendarUnits {
		return &ArgumentError{"calendar", fmt.Sprintf("unknown value %d", u)}
	}
	if c.zone() == nil {
		return &ArgumentError{"time_zone", "is unknown to this node (its time zone database lacks it)"}
	}
	return nil
}

// stateWindow is the window a calendar's states are stored under: the
// negative of the handle, which no sliding window (positive ms) can be.
func (c Calendar) stateWindow() int64 { return -int64(c) }

// binding is what a reservation token binds for c in place of a window:
// stable across processes, unlike the handle.
func (c Calendar) binding() uint64 {
	return partition.Hash(c.Zone())*0x9E3779B97F4A7C15 ^ uint64(c.Unit())<<56 ^ 1<<63
}

func (c Calendar) zone() *zone {
	zs := *zones.all.Load()
	if i := uint32(c) >> calendarUnitBits; i < uint32(len(zs)) {
		return zs[i]
	}
	return nil
}

// cal returns c as the store computes its periods; ok is false for a
// Calendar it would refuse.
func (c Calendar) cal() (cal, bool) {
	z := c.zone()
	u := c.Unit()
	return cal{z, u}, z != nil && u != NoCalendar && u < calendarUnits
}

// calendarOfWindow is the Calendar of a state stored under window w < 0.
func calendarOfWindow(w int64) Calendar { return Calendar(-w) }

// zoneTable is the process's table of time zones, by name and by index.
// time.LoadLocation reads and parses the zone database each time it is
// called (~150 µs), so each zone is loaded once, on first use. Only zones
// that load are added: the table is bounded by the database (~600 names),
// whatever names requests carry.
type zoneTable struct {
	mu     sync.Mutex // serializes additions
	byName sync.Map   // name → uint32 index
	all    atomic.Pointer[[]*zone]
}

// zones is the table every Calendar indexes: a handle must mean the same
// zone in every store of the process, and a zone is immutable data.
var zones = newZoneTable()

func newZoneTable() *zoneTable {
	t := &zoneTable{}
	utc := []*zone{{name: "UTC", loc: time.UTC}}
	t.all.Store(&utc)
	t.byName.Store("UTC", uint32(0))
	return t
}

// maxZoneName bounds the zone names tried: the longest IANA name is 32
// bytes.
const maxZoneName = 64

// index returns the index of the zone called name ("" is UTC), loading
// it on first use.
func (t *zoneTable) index(name string) (uint32, error) {
	if name == "" {
		name = "UTC"
	}
	if i, ok := t.byName.Load(name); ok {
		return i.(uint32), nil
	}
	if name == "Local" {
		return 0, &ArgumentError{"time_zone", `"Local" is each node's own zone, which may differ between nodes; name an IANA zone such as "Europe/Paris"`}
	}
	if len(name) > maxZoneName {
		return 0, &ArgumentError{"time_zone", fmt.Sprintf("unknown time zone %q: longer than any IANA name", clip(name))}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return 0, &ArgumentError{"time_zone", fmt.Sprintf("unknown time zone %q; want an IANA name such as \"Europe/Paris\" (default UTC)", Echo(name))}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.byName.Load(name); ok { // another caller added it meanwhile
		return i.(uint32), nil
	}
	all := *t.all.Load()
	if len(all) >= unknownZone {
		return 0, &ArgumentError{"time_zone", "too many time zones in use"} // cannot happen: the database is far smaller
	}
	next := append(all[:len(all):len(all)], &zone{name: name, loc: loc})
	t.all.Store(&next)
	t.byName.Store(name, uint32(len(all)))
	return uint32(len(all)), nil
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > maxZoneName {
		return s[:maxZoneName] + "…"
	}
	return s
}

// zone is one loaded time zone.
type zone struct {
	name string
	loc  *time.Location
	// current caches, per unit, the last period computed: nearly every
	// decision falls in it, and computing one costs a zone lookup and two
	// time.Date calls (~0.3 µs).
	current [calendarUnits]atomic.Pointer[period]
}

// period is one calendar period, [start, end) in Unix ms.
type period struct{ start, end int64 }

// cal is a calendar as the store computes its periods.
type cal struct {
	z *zone
	u CalendarUnit
}

// maxCalendarMS is the latest time a calendar period is computed for, the
// end of year 9999 UTC: the periods of later times would overflow the
// arithmetic of time.Date and of Unix ms. A later time is taken as it.
const maxCalendarMS = 253402300799999

// periodAt returns the period that holds t (Unix ms).
func (c cal) periodAt(t int64) period {
	t = min(t, maxCalendarMS)
	cur := &c.z.current[c.u]
	if p := cur.Load(); p != nil && p.start <= t && t < p.end {
		return *p
	}
	p := c.compute(t)
	if old := cur.Load(); old == nil || p.start > old.start {
		cur.Store(&p) // a late request's older period does not replace the current one
	}
	return p
}

// endOf returns the end of the period that starts at start (Unix ms), a
// window id of this calendar.
func (c cal) endOf(start int64) int64 {
	switch c.u {
	case CalendarMinute:
		return start + 60_000
	case CalendarHour:
		return start + 3_600_000
	}
	return c.periodAt(start).end
}

func (c cal) compute(t int64) period {
	switch c.u {
	case CalendarMinute:
		return c.z.fixed(t, 60_000)
	case CalendarHour:
		return c.z.fixed(t, 3_600_000)
	}
	return c.z.dated(c.u, t)
}

// fixed returns the period of length unit (ms) that holds t and starts
// where the zone's wall clock shows a whole unit: each real minute or
// hour is one period, so the hour a fall-back repeats is two periods and
// the hour a spring-forward skips is none. In a zone whose offset from
// UTC is a whole number of hours, the hours are UTC's; in India's (+5:30)
// they start at half past UTC's.
func (z *zone) fixed(t, unit int64) period {
	_, off := time.UnixMilli(t).In(z.loc).Zone()
	start := t - mod(t+int64(off)*1000, unit)
	return period{start, start + unit}
}

func mod(a, b int64) int64 {
	if m := a % b; m < 0 {
		return m + b
	}
	return a % b
}

// dated returns the day, week, month or year that holds t in the zone:
// from the first instant of its first date to the first instant of the
// next period's, so that a month is 28 to 31 days and a day with a clock
// change 23 or 25 hours.
func (z *zone) dated(u CalendarUnit, t int64) period {
	lt := time.UnixMilli(t).In(z.loc)
	y, m, d := lt.Date()
	switch u {
	case CalendarWeek:
		d -= (int(lt.Weekday()) + 6) % 7 // back to Monday (ISO 8601)
	case CalendarMonth:
		d = 1
	case CalendarYear:
		m, d = time.January, 1
	}
	start, end := z.nth(u, y, m, d, 0), z.nth(u, y, m, d, 1)
	// The wall clock may go back over a midnight (a fall-back at 00:30
	// repeats 23:30 to 00:30), so a time's date can be the day before the
	// period that holds it: step to the neighbour.
	switch {
	case t < start:
		start, end = z.nth(u, y, m, d, -1), start
	case t >= end:
		start, end = end, z.nth(u, y, m, d, 2)
	}
	return period{start, end}
}

// nth returns the start (Unix ms) of the period k units after the one
// that starts on the date y-m-d.
func (z *zone) nth(u CalendarUnit, y int, m time.Month, d, k int) int64 {
	switch u {
	case CalendarDay:
		d += k
	case CalendarWeek:
		d += 7 * k
	case CalendarMonth:
		m += time.Month(k)
	case CalendarYear:
		y += k
	}
	return z.firstInstant(y, m, d)
}

// firstInstant returns the first instant (Unix ms) of the date y-m-d
// (normalized as time.Date normalizes it) in the zone: its midnight, or,
// where a clock change skips the midnight (Santiago, Havana, Beirut move
// their clocks at 00:00), the end of the skipped span. time.Date then
// returns the instant before the span, on the day before: the day would
// begin an hour early.
func (z *zone) firstInstant(y int, m time.Month, d int) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, z.loc)
	if t.Day() != time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Day() {
		h, mi, s := t.Clock() // the old offset's wall clock, before midnight
		t = t.Add(24*time.Hour - time.Duration(h)*time.Hour - time.Duration(mi)*time.Minute - time.Duration(s)*time.Second)
	}
	return t.UnixMilli()
}
