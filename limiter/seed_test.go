package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// sec is a Unix time in whole seconds, as the seeds write it.
func sec(s int64) time.Time { return time.Unix(s, 0) }

// step is one request of a scripted scenario and what must come back.
type step struct {
	at      time.Time
	req     Request
	allowed bool
	count   int64 // CurrentCount
	// retry and reset are checked only when non-zero or when check is set.
	retry, reset time.Duration
	checkTimes   bool
}

func run(t *testing.T, s *Store, steps []step) {
	t.Helper()
	for i, st := range steps {
		d, err := s.Check(st.at, st.req)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.allowed, d.Allowed, "step %d allowed", i)
		assert.Equal(t, st.count, d.CurrentCount, "step %d current count", i)
		if st.checkTimes {
			assert.Equal(t, st.retry, d.RetryAfter, "step %d retry after", i)
			assert.Equal(t, st.reset, d.ResetAfter, "step %d reset after", i)
		}
	}
}

// Seed 000: window 1 min, prev window 8 requests, current 3, a request at
// t = 1745000145 s (45 s into window 29083335) with limit 5: estimate
// 8 × 0.25 + 3 = 5, and 5 ≥ 5 blocks.
func TestSeed000CounterWorkedExample(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	const w = time.Minute
	prevStart, currStart := sec(29083334*60), sec(29083335*60)
	load := Request{Key: "user:abc:/search", Limit: 100, Window: w}
	run(t, s, []step{
		{at: prevStart, req: withHits(load, 8), allowed: true, count: 0},
		{at: currStart, req: withHits(load, 3), allowed: true, count: 8}, // 8 × 1.0 + 0
	})
	req := Request{Key: "user:abc:/search", Limit: 5, Window: w, Hits: 1}
	d, err := s.Check(sec(1745000145), req)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "estimate 5 ≥ limit 5 must block")
	assert.EqualValues(t, 5, d.CurrentCount)
	assert.EqualValues(t, 0, d.Remaining)
	// The seeds say "retry at the end of the window" (15 s). The exact answer
	// is 1 ms: at 45.001 s the estimate is 8 × 14.999/60 + 3 = 4.9998, floor 4.
	assert.Equal(t, time.Millisecond, d.RetryAfter)
	// curr > 0, so the state is empty when window 29083337 begins.
	assert.Equal(t, 75*time.Second, d.ResetAfter)

	// And the seed's other branch: at 4 < 5 the request is allowed.
	d, err = s.Check(sec(1745000145).Add(time.Millisecond), req)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 4, d.CurrentCount)
	assert.EqualValues(t, 0, d.Remaining)
}

// Seed 004: limit 7 per minute, prev 5, curr 3, 30 s into the window:
// 3 + 5 × 0.5 = 5.5, floored to 5 < 7: allowed.
func TestSeed004CounterWorkedExample(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	base := int64(1_700_000_040) // a minute boundary
	load := Request{Key: "k", Limit: 100, Window: time.Minute}
	run(t, s, []step{
		{at: sec(base - 60), req: withHits(load, 5), allowed: true, count: 0},
		{at: sec(base), req: withHits(load, 3), allowed: true, count: 5},
		{at: sec(base + 30), req: Request{Key: "k", Limit: 7, Window: time.Minute, Hits: 1}, allowed: true, count: 5},
	})
	d, err := s.Check(sec(base+30), Request{Key: "k", Limit: 7, Window: time.Minute}) // peek
	require.NoError(t, err)
	assert.EqualValues(t, 6, d.CurrentCount, "the allowed request was counted: 5.5 + 1 → 6")
	assert.EqualValues(t, 1, d.Remaining)
}

// Seed 003: log [3650, 3680, 3695, 3710], T = 3720, W = 60, limit 5: 3650 is
// cleaned, 3 remain, 3 < 5 allows, and the log becomes
// [3680, 3695, 3710, 3720].
func TestSeed003LogWorkedExample(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	req := Request{Key: "user:1:/login", Limit: 5, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: 1}
	for _, ts := range []int64{3650, 3680, 3695, 3710} {
		d, err := s.Check(sec(ts), req)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := s.Check(sec(3720), req)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 3, d.CurrentCount)
	assert.EqualValues(t, 1, d.Remaining)
	assert.Equal(t, []int64{3680_000, 3695_000, 3710_000, 3720_000}, logEntries(t, s, req))
}

// The window is (T−W, T]: an entry exactly W old no longer counts, as with
// the seed's ZREMRANGEBYSCORE key 0 (now − window).
func TestLogWindowIsHalfOpen(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	req := Request{Key: "k", Limit: 1, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: 1}
	run(t, s, []step{
		{at: sec(3660), req: req, allowed: true, count: 0, reset: time.Minute, checkTimes: true},
		{at: sec(3719).Add(999 * time.Millisecond), req: req, allowed: false, count: 1,
			retry: time.Millisecond, reset: time.Millisecond, checkTimes: true},
		{at: sec(3720), req: req, allowed: true, count: 0, reset: time.Minute, checkTimes: true},
	})
}

// Denied requests leave no trace in the log (seed 003's critical detail):
// a flood of denials neither grows memory nor delays recovery.
func TestLogNeverStoresDeniedRequests(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	req := Request{Key: "k", Limit: 3, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	t0 := sec(1000)
	for i := range 1000 {
		_, err := s.Check(t0.Add(time.Duration(i)*time.Microsecond*100), req)
		require.NoError(t, err)
	}
	assert.Len(t, logEntries(t, s, req), 3)
	assert.Equal(t, 3, s.Stats().LogEntries)
	d, err := s.Check(t0.Add(time.Second), req)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the first three entries left the window at t0+1s")
}

func withHits(r Request, n int64) Request { r.Hits = n; return r }

// logEntries returns the absolute timestamps (ms) held for req's key.
func logEntries(t *testing.T, s *Store, req Request) []int64 {
	t.Helper()
	sh := s.shards.of(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, ok := sh.logs[stateKey{req.Key, req.Window.Milliseconds()}]
	require.True(t, ok, "no log state for %q", req.Key)
	out := make([]int64, st.n)
	for i := range out {
		out[i] = st.at(int32(i))
	}
	return out
}
