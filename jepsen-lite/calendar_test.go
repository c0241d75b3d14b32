package jepsenlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// dayHistory is one day key (limit 3) of zone, on three nodes, from start
// for an hour.
func dayHistory(start time.Time, zone string, ops []Op, events ...Event) History {
	return History{
		Scenario: "synthetic", Start: start, End: time.Hour, Nodes: []string{"n1", "n2", "n3"},
		Keys: []KeySpec{{Name: "day", Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER, Limit: 3, Calendar: pb.CalendarUnit_DAY, TimeZone: zone}},
		Ops:  ops, Events: append([]Event{{Name: "start", Steady: 1, Expect: map[string][]string{}}}, events...),
		Up: map[string][]Span{"n1": {{From: 0}}, "n2": {{From: 0}}, "n3": {{From: 0}}},
	}
}

// A calendar key's window is its day in its own zone: Paris's 28 March
// 2026 ends at 23:00 UTC, half an hour into this run, when UTC's goes on.
func TestCheckerCountsACalendarDayInItsZone(t *testing.T) {
	start := time.Date(2026, 3, 28, 22, 30, 0, 0, time.UTC)
	var ops []Op
	for i := range 3 {
		at := time.Duration(i) * time.Minute
		ops = append(ops, allowed(0, at, at+ms, "n1"))                               // Paris's 28th
		ops = append(ops, allowed(0, 40*time.Minute+at, 40*time.Minute+at+ms, "n1")) // Paris's 29th
	}
	r := Analyze(dayHistory(start, "Europe/Paris", ops))
	assert.Empty(t, r.Violations(), "3 a day in Paris")
	assert.Equal(t, 2, r.Calendar.Windows)
	assert.InDelta(t, 1.0, r.Calendar.Worst, 1e-9)
	assert.Zero(t, r.Log.Windows+r.CounterFixed.Windows+r.CounterSliding.Windows, "a calendar key has no sliding window")

	r = Analyze(dayHistory(start, "UTC", ops))
	require.Len(t, r.Calendar.Violations, 1, "6 in UTC's 28th")
	assert.Equal(t, 6, r.Calendar.Violations[0].Allowed)
	assert.Equal(t, 3, r.Calendar.Excess)
	assert.InDelta(t, 2.0, r.Calendar.Worst, 1e-9)

	// One decided across Paris's midnight is charged to neither day.
	across := allowed(0, 29*time.Minute, 31*time.Minute, "n1")
	r = Analyze(dayHistory(start, "Europe/Paris", append(ops, across)))
	assert.Empty(t, r.Violations())
}

// A kill may lose what its owner admitted in its last round, not yet
// written (Step.Loses): a day holds that many more than its limit, and
// no more.
func TestCheckerAllowsWhatAKillMayLose(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	kill := Event{Name: "kill -9 every node", Begin: 2 * time.Second, End: 2*time.Second + 20*ms, Steady: 1, Fault: true, Loses: 40 * ms}
	ops := []Op{
		allowed(0, 100*ms, 101*ms, "n1"),
		allowed(0, 200*ms, 201*ms, "n1"),
		allowed(0, 1970*ms, 1971*ms, "n1"), // in the kill's last round: lost
		allowed(0, 5*time.Second, 5*time.Second+ms, "n1"),
	}
	r := Analyze(dayHistory(start, "", ops, kill))
	assert.Empty(t, r.Violations(), "4 of 3, one of them perhaps lost by the kill")
	assert.Equal(t, 1, r.Calendar.Excess)
	assert.Equal(t, 1, r.Calendar.Allowance, "the admission in the kill's last 40 ms")
	r.MaxWorst = 1.1
	assert.Contains(t, r.OverPromise(), "calendar worst 1.33×", "the promise counts every admission")

	r = Analyze(dayHistory(start, "", append(ops, allowed(0, 6*time.Second, 6*time.Second+ms, "n1")), kill))
	require.Len(t, r.Calendar.Violations, 1, "5: one more than the kill may have lost")
	assert.True(t, r.Calendar.Violations[0].Silent)
	assert.Equal(t, 4, r.Calendar.Violations[0].Bound)

	kill.Loses = 0 // a graceful stop loses nothing
	r = Analyze(dayHistory(start, "", ops, kill))
	require.Len(t, r.Calendar.Violations, 1)
	assert.Equal(t, 3, r.Calendar.Violations[0].Bound)
	assert.GreaterOrEqual(t, r.Events[1].ConvergedAfter(), time.Duration(0), "nobody left to converge: at once")
}

func TestCalendarPeriods(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	for _, tc := range []struct {
		unit       pb.CalendarUnit
		at         time.Time
		start, end time.Time
	}{
		// The 23-hour day of the spring change.
		{pb.CalendarUnit_DAY, time.Date(2026, 3, 8, 12, 0, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny)},
		// ISO weeks start on Monday; 1 January 2027 is a Friday.
		{pb.CalendarUnit_WEEK, time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC), time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)},
		{pb.CalendarUnit_WEEK, time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{pb.CalendarUnit_MONTH, time.Date(2028, 2, 29, 1, 0, 0, 0, time.UTC), time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{pb.CalendarUnit_YEAR, time.Date(2026, 12, 31, 23, 59, 0, 0, ny), time.Date(2026, 1, 1, 0, 0, 0, 0, ny), time.Date(2027, 1, 1, 0, 0, 0, 0, ny)},
	} {
		start, end, ok := calendarPeriod(tc.unit, tc.at)
		require.True(t, ok)
		assert.True(t, start.Equal(tc.start), "%s of %s starts %s, want %s", tc.unit, tc.at, start, tc.start)
		assert.True(t, end.Equal(tc.end), "%s of %s ends %s, want %s", tc.unit, tc.at, end, tc.end)
	}
	_, _, ok := calendarPeriod(pb.CalendarUnit_HOUR, time.Now())
	assert.False(t, ok, "hours are not counted by the checker")
}
