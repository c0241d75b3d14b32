package node_test

import "time"

// hourish is the window of the tests that count exactly: about an hour,
// chosen when the tests start so that the fixed window the counter is in
// has at least 15 minutes left. The sliding window counter's windows are
// aligned to the epoch (floor(t / W)): across a boundary its estimate
// weighs the previous window's hits down, and 3 hits read 2 a millisecond
// later. TestGracefulLeaveHandsCountsToHeirs, in a CI run that crossed
// 06:00 with an hour's window, failed so ("count 2, want 3").
var hourish = windowAwayFromBoundary(time.Now(), time.Hour, 15*time.Minute)

// windowAwayFromBoundary returns the first of base, base + 1 min, … whose
// current fixed window at now has at least margin left.
func windowAwayFromBoundary(now time.Time, base, margin time.Duration) time.Duration {
	ms := now.UnixMilli()
	for w := base; ; w += time.Minute {
		if wms := w.Milliseconds(); wms-ms%wms >= margin.Milliseconds() {
			return w
		}
	}
}
