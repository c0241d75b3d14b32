package jepsenlite

import (
	"fmt"
	"slices"
	"time"
	_ "time/tzdata" // the checker counts in the keys' zones on any host

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// calendar checks a calendar key's periods, each in the key's zone: the
// allowed checks whose whole [invoke, complete] interval, in wall time,
// lies inside one period were certainly decided in it, and are charged
// to it (the others are not: a lower bound, as for the windows).
//
// The periods are computed here from the zone's calendar (time.Date), not
// by the limiter's code: the checker is the limiter's oracle.
func (r *Result) calendar(a *Admission, start time.Time, ks KeySpec, ops []Op) {
	loc, err := time.LoadLocation(ks.TimeZone) // "" is UTC
	if err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("checker: key %s: %v", ks.Name, err))
		return
	}
	wall := func(d time.Duration) time.Time { return start.Add(d).In(loc) }
	byPeriod := map[int64][]Op{}
	ends := map[int64]time.Time{}
	for _, op := range ops {
		lo, loEnd, ok := calendarPeriod(ks.Calendar, wall(op.Invoke))
		if !ok {
			r.Errors = append(r.Errors, fmt.Sprintf("checker: key %s: calendar unit %s is not checked", ks.Name, ks.Calendar))
			return
		}
		if hi, _, _ := calendarPeriod(ks.Calendar, wall(op.Complete)); !hi.Equal(lo) {
			continue // decided in one period or the next: charged to neither
		}
		byPeriod[lo.UnixMilli()] = append(byPeriod[lo.UnixMilli()], op)
		ends[lo.UnixMilli()] = loEnd
	}
	periods := make([]int64, 0, len(byPeriod))
	for p := range byPeriod {
		periods = append(periods, p)
	}
	slices.Sort(periods)
	for _, p := range periods {
		// The bound over the part of the period the run saw: every phase
		// it overlaps.
		from := max(time.UnixMilli(p).Sub(start), 0)
		to := min(ends[p].Sub(start), r.Duration)
		in := byPeriod[p]
		lost := r.lost(in)
		a.Allowance += lost
		r.check(a, ks, from, to, in, 1, lost)
		if n := len(in); n > int(ks.Limit) {
			a.Excess += n - int(ks.Limit)
			if _, calm := r.bound(from, to); calm {
				a.ExcessCalm += n - int(ks.Limit)
			}
		}
	}
}

// lost counts the admissions of ops that a kill may have lost: those
// that may have been decided within Loses before a step that kills
// (Step.Loses), which the killed owner had perhaps not yet written. A
// calendar period, days long, carries them past the restart; a sliding
// window of the profile's (1 s) is over before the nodes are back.
func (r *Result) lost(ops []Op) int {
	n := 0
	for _, ev := range r.Events {
		if ev.Loses <= 0 {
			continue
		}
		for _, op := range ops {
			if op.Complete >= ev.Begin-ev.Loses && op.Invoke <= ev.End {
				n++
			}
		}
	}
	return n
}

// calendarPeriod returns the period of unit that holds t, in t's zone:
// from the first instant of its first date to that of the next period's.
// ok is false for the units the checker does not count (minutes, hours).
func calendarPeriod(unit pb.CalendarUnit, t time.Time) (start, end time.Time, ok bool) {
	y, m, d := t.Date()
	loc := t.Location()
	switch unit {
	case pb.CalendarUnit_DAY:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc), true
	case pb.CalendarUnit_WEEK: // ISO 8601: from Monday
		monday := d - (int(t.Weekday())+6)%7
		return time.Date(y, m, monday, 0, 0, 0, 0, loc), time.Date(y, m, monday+7, 0, 0, 0, 0, loc), true
	case pb.CalendarUnit_MONTH:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc), true
	case pb.CalendarUnit_YEAR:
		return time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc), true
	}
	return time.Time{}, time.Time{}, false
}
