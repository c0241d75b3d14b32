package limiter

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adj is one scripted operation on a store and what must come back.
type adj struct {
	op   string // "check", "charge", "refund"
	at   time.Duration
	hits int64
	want Decision
	n    int64 // over (charge) or refunded (refund)
}

func runAdj(t *testing.T, s *Store, t0 time.Time, base Request, steps []adj) {
	t.Helper()
	for i, st := range steps {
		r := base
		r.Hits = st.hits
		var d Decision
		var n int64
		var err error
		switch st.op {
		case "check":
			d, err = s.Check(t0.Add(st.at), r)
		case "charge":
			d, n, err = s.Charge(t0.Add(st.at), r)
		case "refund":
			d, n, err = s.Refund(t0.Add(st.at), r)
		}
		require.NoError(t, err, "step %d", i)
		st.want.Limit = r.Limit
		assert.Equal(t, st.want, d, "step %d (%s %d at %s)", i, st.op, st.hits, st.at)
		assert.Equal(t, st.n, n, "step %d (%s %d at %s): over or refunded", i, st.op, st.hits, st.at)
	}
}

const minute = time.Minute

// t0 starts a counter window of one minute.
var adjT0 = sec(1_800_000)

func TestRefundCounterTakesCurrentThenPrevious(t *testing.T) {
	s := newStore(t, 1, nil)
	base := Request{Key: "k", Limit: 10, Window: minute}
	s75 := 75 * time.Second
	runAdj(t, s, adjT0, base, []adj{
		{op: "check", at: 0, hits: 4, want: Decision{Allowed: true, Remaining: 6, ResetAfter: 2 * minute, RefillAfter: minute}},
		// 15 s into the next window: prev 4 weighs 4 × 45/60 = 3.
		{op: "check", at: s75, hits: 3, want: Decision{Allowed: true, Remaining: 4, CurrentCount: 3, ResetAfter: 105 * time.Second, RefillAfter: 45 * time.Second}},
		// 3 from curr, then 2 from prev (4 → 2): estimate 2 × 45/60 = 1.
		{op: "refund", at: s75, hits: 5, n: 5, want: Decision{Allowed: true, Remaining: 9, CurrentCount: 1, ResetAfter: 45 * time.Second, RefillAfter: 45 * time.Second}},
		// Only 2 are left to give back; never below zero.
		{op: "refund", at: s75, hits: 5, n: 2, want: Decision{Allowed: true, Remaining: 10, RefillAfter: 45 * time.Second}},
		{op: "refund", at: s75, hits: 1, n: 0, want: Decision{Allowed: true, Remaining: 10, RefillAfter: 45 * time.Second}},
		// No credit: the limit is what it was.
		{op: "check", at: s75, hits: 10, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 105 * time.Second, RefillAfter: 45 * time.Second}},
	})
}

func TestRefundLogTakesTheNewestEntries(t *testing.T) {
	s := newStore(t, 1, nil)
	base := Request{Key: "k", Limit: 5, Window: minute, Algorithm: SlidingWindowLog}
	runAdj(t, s, adjT0, base, []adj{
		{op: "check", at: 0, hits: 2, want: Decision{Allowed: true, Remaining: 3, ResetAfter: minute, RefillAfter: minute}},
		{op: "check", at: 10 * time.Second, hits: 2, want: Decision{Allowed: true, Remaining: 1, CurrentCount: 2, ResetAfter: minute, RefillAfter: 50 * time.Second}},
		// The two at 10 s and one at 0 go; one at 0 stays.
		{op: "refund", at: 20 * time.Second, hits: 3, n: 3, want: Decision{Allowed: true, Remaining: 4, CurrentCount: 1, ResetAfter: 40 * time.Second, RefillAfter: 40 * time.Second}},
		// What has left the window cannot be refunded.
		{op: "refund", at: 70 * time.Second, hits: 5, n: 0, want: Decision{Allowed: true, Remaining: 5}},
	})
	assert.Zero(t, s.Stats().LogEntries)
	requireAccounting(t, s)
}

func TestRefundOfAnAbsentKeyCreatesNothing(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true })
	for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		d, n, err := s.Refund(adjT0.Add(15*time.Second), Request{Key: "none", Limit: 5, Window: minute, Algorithm: a, Hits: 3})
		require.NoError(t, err)
		assert.Zero(t, n)
		assert.True(t, d.Allowed)
		assert.EqualValues(t, 5, d.Remaining)
		assert.Zero(t, d.CurrentCount)
	}
	st := s.Stats()
	assert.Zero(t, st.CounterKeys+st.LogKeys)
	assert.Empty(t, s.Changes().Take(nil, 0, adjT0))
}

// A charge over the limit counts everything; RetryAfter is when a 1-hit
// request passes again, and a check then sees exactly that.
func TestChargeCounterGoesIntoDebt(t *testing.T) {
	s := newStore(t, 1, nil)
	base := Request{Key: "k", Limit: 10, Window: minute}
	// Next window, prev 25: floor(25 × (60 − x)/60) ≤ 9 from x = 36.001 s.
	runAdj(t, s, adjT0, base, []adj{
		{op: "charge", at: 0, hits: 25, n: 15, want: Decision{CurrentCount: 0, RetryAfter: 96001 * time.Millisecond, ResetAfter: 2 * minute, RefillAfter: minute}},
		{op: "check", at: time.Second, hits: 1, want: Decision{CurrentCount: 25, RetryAfter: 95001 * time.Millisecond, ResetAfter: 119 * time.Second, RefillAfter: 59 * time.Second}},
		{op: "check", at: 96 * time.Second, hits: 1, want: Decision{CurrentCount: 10, RetryAfter: time.Millisecond, ResetAfter: 24 * time.Second, RefillAfter: 24 * time.Second}},
		{op: "check", at: 96001 * time.Millisecond, hits: 1, want: Decision{Allowed: true, CurrentCount: 9, ResetAfter: 83999 * time.Millisecond, RefillAfter: 23999 * time.Millisecond}},
		// A charge that fits is a check that cannot be denied.
		// 25 × 23/60 + 1 = 10: a charge of 1 is 1 over, and a 1-hit request
		// waits until floor(25 × (60 − x)/60) ≤ 7, x = 40.801 s.
		{op: "charge", at: 97 * time.Second, hits: 1, n: 1, want: Decision{CurrentCount: 10, RetryAfter: 3801 * time.Millisecond, ResetAfter: 83 * time.Second, RefillAfter: 23 * time.Second}},
	})
}

func TestChargeLogKeepsTheNewestWithinItsBound(t *testing.T) {
	s := newStore(t, 1, nil)
	base := Request{Key: "k", Limit: 3, Window: minute, Algorithm: SlidingWindowLog}
	runAdj(t, s, adjT0, base, []adj{
		{op: "check", at: 0, hits: 2, want: Decision{Allowed: true, Remaining: 1, ResetAfter: minute, RefillAfter: minute}},
		// 2 + 5 entries, bound 2 × 3 = 6: the oldest goes. A 1-hit request
		// waits for the 5 entries at 10 s, as it would with all 7.
		{op: "charge", at: 10 * time.Second, hits: 5, n: 4, want: Decision{CurrentCount: 2, RetryAfter: minute, ResetAfter: minute, RefillAfter: 50 * time.Second}},
		{op: "check", at: 30 * time.Second, hits: 1, want: Decision{CurrentCount: 6, RetryAfter: 40 * time.Second, ResetAfter: 40 * time.Second, RefillAfter: 30 * time.Second}},
		{op: "check", at: minute, hits: 1, want: Decision{CurrentCount: 5, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second, RefillAfter: 10 * time.Second}},
		// A peek in debt says so: 0 more hits do not fit while over.
		{op: "check", at: minute, hits: 0, want: Decision{CurrentCount: 5, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second, RefillAfter: 10 * time.Second}},
		{op: "refund", at: minute, hits: 1, n: 1, want: Decision{CurrentCount: 4, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second, RefillAfter: 10 * time.Second}},
		{op: "check", at: 70 * time.Second, hits: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: minute, RefillAfter: minute}},
	})
	requireAccounting(t, s)
}

// MaxLogLimit caps the bound: a log in debt never holds more than a full
// log of the largest limit, so it fits the log budget as any log does.
func TestChargeLogBoundIsCappedByMaxLogLimit(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.MaxLogLimit, c.MaxLogEntries = 4, 4 })
	r := Request{Key: "k", Limit: 3, Window: minute, Algorithm: SlidingWindowLog, Hits: 100}
	d, over, err := s.Charge(adjT0, r)
	require.NoError(t, err)
	assert.EqualValues(t, 97, over)
	assert.Equal(t, Decision{Limit: 3, RetryAfter: minute, ResetAfter: minute, RefillAfter: minute}, d)
	assert.Equal(t, 4, s.Stats().LogEntries)
	assert.Equal(t, 4, s.Stats().LogSlots)
	d, err = s.Check(adjT0.Add(59999*time.Millisecond), Request{Key: "k", Limit: 3, Window: minute, Algorithm: SlidingWindowLog, Hits: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.EqualValues(t, 4, d.CurrentCount)
	assert.Equal(t, time.Millisecond, d.RetryAfter)
	requireAccounting(t, s)
}

func TestChargeCounterSaturates(t *testing.T) {
	s := newStore(t, 1, nil)
	r := Request{Key: "k", Limit: 10, Window: time.Second, Hits: math.MaxInt64}
	for i := range 2 {
		d, over, err := s.Charge(adjT0, r)
		require.NoError(t, err)
		assert.EqualValues(t, int64(math.MaxInt64)-10, over, "charge %d", i)
		assert.False(t, d.Allowed)
		checkDecisionContract(t, r, d)
	}
	check := Request{Key: "k", Limit: 10, Window: time.Second, Hits: 1}
	d, err := s.Check(adjT0.Add(500*time.Millisecond), check)
	require.NoError(t, err)
	assert.EqualValues(t, int64(math.MaxInt64), d.CurrentCount)
	assert.Equal(t, 1500*time.Millisecond, d.RetryAfter, "the next window weighs MaxInt64 × (W − x)/W ≥ 10 until its last millisecond")
	checkDecisionContract(t, check, d)
	_, n, err := s.Refund(adjT0, Request{Key: "k", Limit: 10, Window: time.Second, Hits: math.MaxInt64 - 1})
	require.NoError(t, err)
	assert.EqualValues(t, int64(math.MaxInt64)-1, n)
	d, err = s.Check(adjT0, check)
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.CurrentCount)

	// The log stores its bound, never hits entries.
	logCharge := Request{Key: "l", Limit: 10, Window: time.Second, Algorithm: SlidingWindowLog, Hits: math.MaxInt64}
	d, over, err := s.Charge(adjT0, logCharge)
	require.NoError(t, err)
	assert.EqualValues(t, int64(math.MaxInt64)-10, over)
	checkDecisionContract(t, logCharge, d)
	assert.Equal(t, 20, s.Stats().LogEntries)
	requireAccounting(t, s)
}

func TestAdjustValidation(t *testing.T) {
	s := newStore(t, 1, nil)
	ok := Request{Key: "k", Limit: 10, Window: time.Second, Hits: 1}
	cases := []struct {
		name  string
		edit  func(*Request)
		field string
		text  string
	}{
		{"zero hits", func(r *Request) { r.Hits = 0 }, "hits", "positive"},
		{"negative hits", func(r *Request) { r.Hits = -1 }, "hits", "positive"},
		{"empty key", func(r *Request) { r.Key = "" }, "key", "empty"},
		{"zero limit", func(r *Request) { r.Limit = 0 }, "limit", "positive"},
		{"sub-ms window", func(r *Request) { r.Window = 1500 * time.Microsecond }, "window_ms", "whole number"},
		{"unknown algorithm", func(r *Request) { r.Algorithm = 9 }, "algorithm", "unknown"},
		{"log limit too high", func(r *Request) { r.Algorithm, r.Limit = SlidingWindowLog, 10_001 }, "limit", "SLIDING_WINDOW_COUNTER"},
	}
	ops := map[string]func(Request) error{
		"charge": func(r Request) error { _, _, err := s.Charge(adjT0, r); return err },
		"refund": func(r Request) error { _, _, err := s.Refund(adjT0, r); return err },
	}
	for name, op := range ops {
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				r := ok
				c.edit(&r)
				var ae *ArgumentError
				require.ErrorAs(t, op(r), &ae)
				assert.Equal(t, c.field, ae.Field)
				assert.Contains(t, ae.Error(), c.text)
			})
		}
	}
	assert.Zero(t, s.Stats().CounterKeys+s.Stats().LogKeys, "rejected requests create no state")
	// More hits than the limit are a cost, not an impossible request.
	for name, op := range ops {
		for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
			r := ok
			r.Algorithm, r.Hits = a, 11
			assert.NoError(t, op(r), "%s %s of hits > limit", name, a)
		}
	}
}

func TestChargeMeetsTheKeyCap(t *testing.T) {
	for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		reject := newStore(t, 1, func(c *Config) { c.MaxKeys, c.Overflow = 1, OverflowReject })
		_, err := reject.Check(adjT0, Request{Key: "a", Limit: 5, Window: minute, Algorithm: a, Hits: 1})
		require.NoError(t, err)
		_, _, err = reject.Charge(adjT0, Request{Key: "b", Limit: 5, Window: minute, Algorithm: a, Hits: 9})
		require.ErrorIs(t, err, ErrCapacity)
		assert.Contains(t, err.Error(), "--max-keys")
		_, _, err = reject.Refund(adjT0, Request{Key: "b", Limit: 5, Window: minute, Algorithm: a, Hits: 9})
		require.NoError(t, err, "a refund needs no room")
		st := reject.Stats()
		assert.Equal(t, 1, st.CounterKeys+st.LogKeys)
		assert.EqualValues(t, 1, st.Rejections)
		requireAccounting(t, reject)

		evict := newStore(t, 1, func(c *Config) { c.MaxKeys = 1 })
		_, err = evict.Check(adjT0, Request{Key: "a", Limit: 5, Window: minute, Algorithm: a, Hits: 1})
		require.NoError(t, err)
		_, over, err := evict.Charge(adjT0, Request{Key: "b", Limit: 5, Window: minute, Algorithm: a, Hits: 9})
		require.NoError(t, err)
		assert.EqualValues(t, 4, over)
		assert.EqualValues(t, 1, evict.Stats().Evictions)
		requireAccounting(t, evict)
	}
}

func TestChargeMeetsTheLogBudget(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries, cfg.Overflow = 100, 100, OverflowReject })
	_, err := s.Check(adjT0, logReq("a", 100, 60))
	require.NoError(t, err)
	_, _, err = s.Charge(adjT0, logReq("b", 100, 50))
	require.ErrorIs(t, err, ErrCapacity)
	assert.Contains(t, err.Error(), "--max-log-entries")
	st := s.Stats()
	assert.Equal(t, 1, st.LogKeys)
	assert.Equal(t, 60, st.LogEntries)
	assert.EqualValues(t, 1, st.LogRejections)
	requireAccounting(t, s)
	// A held log in debt stays within its bound (here MaxLogLimit, 100),
	// which fits any partition's share: 60 + 50 keeps the newest 100.
	_, over, err := s.Charge(adjT0, logReq("a", 100, 50))
	require.NoError(t, err)
	assert.EqualValues(t, 10, over)
	assert.Equal(t, 100, s.Stats().LogEntries)
	requireAccounting(t, s)
}

// A charge and a refund reach the backup like a check, and a refund that
// empties a key sends its tombstone.
func TestAdjustmentsAreTracked(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true })
	counter := Request{Key: "c", Limit: 5, Window: minute, Hits: 7}
	log := Request{Key: "l", Limit: 5, Window: minute, Algorithm: SlidingWindowLog, Hits: 3}
	for _, r := range []Request{counter, log} {
		_, _, err := s.Charge(adjT0, r)
		require.NoError(t, err)
	}
	got := s.Changes().Take(nil, 0, adjT0)
	require.Len(t, got, 2)
	assert.EqualValues(t, 7, got[0].Curr)
	assert.Len(t, got[1].Log, 3)

	for _, r := range []Request{counter, log} {
		_, n, err := s.Refund(adjT0, r)
		require.NoError(t, err)
		assert.Equal(t, r.Hits, n)
	}
	got = s.Changes().Take(nil, 0, adjT0)
	require.Len(t, got, 2)
	for _, ks := range got {
		assert.Zero(t, ks.Curr+ks.Prev+int64(len(ks.Log)), "%s: tombstone", ks.Key)
	}
	// Nothing left to refund: nothing changed, nothing sent.
	_, n, err := s.Refund(adjT0, counter)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Empty(t, s.Changes().Take(nil, 0, adjT0))

	// The replayed records rebuild the owner's state on a backup.
	_, _, err = s.Charge(adjT0, counter)
	require.NoError(t, err)
	backup := newStore(t, 1, nil)
	_, errs := backup.Transfer().Merge(adjT0, s.Changes().Take(nil, 0, adjT0))
	require.Empty(t, errs)
	d, err := backup.Check(adjT0, Request{Key: "c", Limit: 5, Window: minute, Hits: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.EqualValues(t, 7, d.CurrentCount)
}

func TestChargeCountsInHotKeysAndExpires(t *testing.T) {
	s := newStore(t, 1, nil)
	r := Request{Key: "debtor", Limit: 5, Window: minute, Hits: 8}
	d, _, err := s.Charge(adjT0, r)
	require.NoError(t, err)
	_, _, err = s.Refund(adjT0, r)
	require.NoError(t, err)
	hot := s.Admin().HotKeys(adjT0, 3)
	require.Len(t, hot.Checks, 1)
	assert.EqualValues(t, 1, hot.Checks[0].Count, "the charge counts, the refund does not")
	require.Len(t, hot.Denials, 1)
	assert.Equal(t, "debtor", hot.Denials[0].Key)

	// The state expires when the charge said it would.
	_, _, err = s.Charge(adjT0, r)
	require.NoError(t, err)
	assert.Zero(t, s.Sweep(adjT0.Add(d.ResetAfter-time.Millisecond)))
	assert.Equal(t, 1, s.Sweep(adjT0.Add(d.ResetAfter)))
}

func TestAdjustErrorsAreArgumentOrCapacity(t *testing.T) {
	s := newStore(t, 1, nil)
	_, _, err := s.Charge(adjT0, Request{Key: "k", Limit: -1, Window: minute, Hits: 1})
	var ae *ArgumentError
	require.True(t, errors.As(err, &ae))
}
