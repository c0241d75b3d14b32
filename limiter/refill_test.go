package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// refillStep is one request and the RefillAfter it must report.
type refillStep struct {
	at     time.Time
	hits   int64
	refill time.Duration
}

// runRefill checks each step's RefillAfter, and that the decision keeps the
// general contract, against one key of req's algorithm and window.
func runRefill(t *testing.T, s *Store, req Request, steps []refillStep) {
	t.Helper()
	for i, st := range steps {
		r := withHits(req, st.hits)
		d, err := s.Check(st.at, r)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.refill, d.RefillAfter, "step %d (%s, hits %d) refill after", i, st.at.Format(time.StampMilli), st.hits)
		checkDecisionContract(t, r, d)
	}
}

// The counter's RefillAfter is the rest of the epoch-aligned fixed window
// the decision falls in: W at its start, 1 ms at its last millisecond, and
// it runs down in between whether the request is allowed, denied or a peek.
func TestCounterRefillAfterRunsDownToTheWindowEnd(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	const w = 10 * time.Second
	start := sec(1_000_000) // a multiple of W: a window starts here
	req := Request{Key: "k", Limit: 2, Window: w}
	runRefill(t, s, req, []refillStep{
		{at: start.Add(-time.Millisecond), hits: 0, refill: time.Millisecond}, // a peek at an absent key
		{at: start, hits: 1, refill: w},
		{at: start.Add(time.Millisecond), hits: 1, refill: w - time.Millisecond},
		{at: start.Add(4 * time.Second), hits: 1, refill: 6 * time.Second}, // denied
		{at: start.Add(7 * time.Second), hits: 0, refill: 3 * time.Second},
		{at: start.Add(w - time.Millisecond), hits: 1, refill: time.Millisecond},
		{at: start.Add(w), hits: 1, refill: w}, // the next window
		{at: start.Add(w + 2500*time.Millisecond), hits: 0, refill: 7500 * time.Millisecond},
	})
}

// The log's RefillAfter is when its oldest hit in the window leaves it:
// with hits at t1 < t2, t1+W−now; once t1 has left, t2+W−now; 0 once the
// window holds nothing.
func TestLogRefillAfterFollowsTheOldestHit(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	const w = 10 * time.Second
	t1, t2 := sec(100), sec(103)
	req := Request{Key: "k", Limit: 2, Window: w, Algorithm: SlidingWindowLog}
	runRefill(t, s, req, []refillStep{
		{at: sec(99), hits: 0, refill: 0}, // a peek at an absent key
		{at: t1, hits: 1, refill: w},
		{at: t2, hits: 1, refill: t1.Add(w).Sub(t2)},
		{at: sec(105), hits: 1, refill: t1.Add(w).Sub(sec(105))}, // denied: the log is full
		{at: t1.Add(w).Add(-time.Millisecond), hits: 0, refill: time.Millisecond},
		{at: t1.Add(w), hits: 0, refill: t2.Add(w).Sub(t1.Add(w))}, // (T−W, T]: t1 has left
		{at: sec(112), hits: 0, refill: t2.Add(w).Sub(sec(112))},
		{at: t2.Add(w), hits: 0, refill: 0}, // the window holds nothing
	})
}

// A clock that steps back is decided where the state is (the counter's
// window start, the log's newest hit), and RefillAfter is measured from
// there too, so it never exceeds the window.
func TestRefillAfterWhenTheClockStepsBack(t *testing.T) {
	const w = 10 * time.Second
	t.Run("counter", func(t *testing.T) {
		s := newStore(t, partition.DefaultCount, nil)
		req := Request{Key: "k", Limit: 5, Window: w}
		runRefill(t, s, req, []refillStep{
			{at: sec(1_000_005), hits: 1, refill: 5 * time.Second},
			{at: sec(1_000_005 - 30), hits: 1, refill: w}, // decided at 1_000_000
			{at: sec(0), hits: 0, refill: w},
			// Back within the state's window is not clamped: the window is the same.
			{at: sec(1_000_003), hits: 1, refill: 7 * time.Second},
		})
	})
	t.Run("log", func(t *testing.T) {
		s := newStore(t, partition.DefaultCount, nil)
		req := Request{Key: "k", Limit: 5, Window: w, Algorithm: SlidingWindowLog}
		runRefill(t, s, req, []refillStep{
			{at: sec(1_000_005), hits: 1, refill: w},
			{at: sec(1_000_006), hits: 1, refill: 9 * time.Second},
			{at: sec(1_000_005 - 30), hits: 1, refill: 9 * time.Second}, // decided at 1_000_006
			{at: sec(0), hits: 0, refill: 9 * time.Second},
		})
	})
}
