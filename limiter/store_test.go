package limiter

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

func TestInvalidRequestsNameTheField(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	ok := Request{Key: "k", Limit: 10, Window: time.Second, Hits: 1}
	cases := []struct {
		name  string
		edit  func(*Request)
		field string
		text  string
	}{
		{"empty key", func(r *Request) { r.Key = "" }, "key", "must not be empty"},
		{"oversize key", func(r *Request) { r.Key = strings.Repeat("x", 1025) }, "key", "1025 bytes"},
		{"invalid utf8", func(r *Request) { r.Key = "\xff" }, "key", "UTF-8"},
		{"zero limit", func(r *Request) { r.Limit = 0 }, "limit", "positive"},
		{"negative limit", func(r *Request) { r.Limit = -5 }, "limit", "positive"},
		{"zero window", func(r *Request) { r.Window = 0 }, "window_ms", "positive"},
		{"negative window", func(r *Request) { r.Window = -time.Second }, "window_ms", "positive"},
		{"sub-ms window", func(r *Request) { r.Window = 1500 * time.Microsecond }, "window_ms", "whole number"},
		{"huge window", func(r *Request) { r.Window = 400 * 24 * time.Hour }, "window_ms", "maximum"},
		{"negative hits", func(r *Request) { r.Hits = -1 }, "hits", "negative"},
		{"hits above limit", func(r *Request) { r.Hits = 11 }, "hits", "never be allowed"},
		{"unknown algorithm", func(r *Request) { r.Algorithm = 9 }, "algorithm", "unknown"},
		{"log limit too high", func(r *Request) { r.Algorithm, r.Limit = SlidingWindowLog, 10_001 }, "limit", "SLIDING_WINDOW_COUNTER"},
		{"log window too long", func(r *Request) { r.Algorithm, r.Window = SlidingWindowLog, 50*24*time.Hour }, "window_ms", "49.7 days"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			c.edit(&r)
			_, err := s.Check(sec(1000), r)
			var ae *ArgumentError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, c.field, ae.Field)
			assert.Contains(t, ae.Error(), c.text)
		})
	}
	assert.Zero(t, s.Stats().CounterKeys+s.Stats().LogKeys, "rejected requests create no state")
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		got, err := ParseAlgorithm(a.String())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	got, err := ParseAlgorithm("")
	require.NoError(t, err)
	assert.Equal(t, SlidingWindowCounter, got, "absent means the default")
	_, err = ParseAlgorithm("token_bucket")
	var ae *ArgumentError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "algorithm", ae.Field)
}

// An invalid config is refused with an error naming the field. A zero
// field is invalid too: New takes the config as given, and a config that
// wants the defaults starts from DefaultConfig.
func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate(partition.DefaultCount))
	// small is a valid one-partition config with tiny bounds; a case breaks
	// one thing in it, so that it fails for that alone.
	small := func(maxKeys int) func(*Config) {
		return func(cfg *Config) {
			cfg.MaxKeys, cfg.MaxKeyBytes, cfg.MaxWindow, cfg.MaxLogLimit = maxKeys, 1, time.Second, 1
		}
	}
	for _, c := range []struct {
		name       string
		partitions int
		edit       func(*Config)
		field      string
	}{
		{"negative partitions", -1, small(10), "partitions"},
		{"zero partitions", 0, nil, "partitions"},
		{"fewer keys than partitions", 10, small(5), "MaxKeys"},
		{"log limit above 2^30", 1, func(cfg *Config) { small(5)(cfg); cfg.MaxLogLimit = 1 << 31 }, "MaxLogLimit"},
		{"unknown overflow", 1, func(cfg *Config) { small(5)(cfg); cfg.Overflow = 7 }, "Overflow"},
		{"zero MaxKeys", partition.DefaultCount, func(cfg *Config) { cfg.MaxKeys = 0 }, "MaxKeys"},
		{"zero MaxKeyBytes", partition.DefaultCount, func(cfg *Config) { cfg.MaxKeyBytes = 0 }, "MaxKeyBytes"},
		{"zero MaxWindow", partition.DefaultCount, func(cfg *Config) { cfg.MaxWindow = 0 }, "MaxWindow"},
		{"zero MaxLogLimit", partition.DefaultCount, func(cfg *Config) { cfg.MaxLogLimit = 0 }, "MaxLogLimit"},
		{"zero MaxLogEntries", partition.DefaultCount, func(cfg *Config) { cfg.MaxLogEntries = 0 }, "MaxLogEntries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(configWith(c.edit), c.partitions)
			assert.Nil(t, s)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.field)
		})
	}
}

func TestPeekConsumesNothingAndCreatesNoState(t *testing.T) {
	for _, algo := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		s := newStore(t, partition.DefaultCount, nil)
		peek := Request{Key: "k", Limit: 2, Window: time.Second, Algorithm: algo}
		d, err := s.Check(sec(10), peek)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.EqualValues(t, 2, d.Remaining)
		assert.Zero(t, s.Stats().CounterKeys+s.Stats().LogKeys, algo)

		run(t, s, []step{
			{at: sec(10), req: withHits(peek, 2), allowed: true, count: 0},
			{at: sec(10), req: peek, allowed: true, count: 2}, // at the limit, a peek still "fits"
			{at: sec(10), req: peek, allowed: true, count: 2},
			{at: sec(10), req: withHits(peek, 1), allowed: false, count: 2},
		})
	}
}

// A clock that steps back must not give a key its allowance back.
func TestTimeGoingBackwardsIsClamped(t *testing.T) {
	for _, algo := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		s := newStore(t, partition.DefaultCount, nil)
		req := Request{Key: "k", Limit: 2, Window: 10 * time.Second, Algorithm: algo, Hits: 1}
		run(t, s, []step{
			{at: sec(1_000_005), req: req, allowed: true, count: 0},
			{at: sec(1_000_006), req: req, allowed: true, count: 1},
			// Three windows back: decided as if at the latest state.
			{at: sec(1_000_005 - 30), req: req, allowed: false, count: 2},
			{at: sec(0), req: req, allowed: false, count: 2},
		})
		d, err := s.Check(time.Unix(-100, 0), req) // before the epoch
		require.NoError(t, err)
		assert.False(t, d.Allowed, algo)
	}
}

// Two windows of the same key are independent limits; a changed limit
// applies to what is already counted.
func TestStateIdentity(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	perSec := Request{Key: "k", Limit: 1, Window: time.Second, Hits: 1}
	perMin := Request{Key: "k", Limit: 1, Window: time.Minute, Hits: 1}
	run(t, s, []step{
		{at: sec(60), req: perSec, allowed: true},
		{at: sec(60), req: perMin, allowed: true},
		{at: sec(60), req: perSec, allowed: false, count: 1},
		{at: sec(60), req: Request{Key: "k", Limit: 5, Window: time.Second, Hits: 1}, allowed: true, count: 1},
		{at: sec(60), req: Request{Key: "k", Limit: 1, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}, allowed: true},
	})
}

func TestSweepFreesExpiredKeys(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	t0 := sec(1_000_000) // a 10 s boundary
	for i := range 100 {
		key := "user-" + string(rune('a'+i%26)) + strings.Repeat("x", i)
		_, err := s.Check(t0, Request{Key: key, Limit: 5, Window: 10 * time.Second, Hits: 1})
		require.NoError(t, err)
		_, err = s.Check(t0, Request{Key: key, Limit: 5, Window: 10 * time.Second, Algorithm: SlidingWindowLog, Hits: 1})
		require.NoError(t, err)
	}
	require.Equal(t, 100, s.Stats().CounterKeys)
	require.Equal(t, 100, s.Stats().LogKeys)

	// The log empties when its newest entry leaves the window, the counter
	// once two windows have passed.
	assert.Equal(t, 0, s.Sweep(t0.Add(10*time.Second-time.Millisecond)))
	assert.Equal(t, 100, s.Sweep(t0.Add(10*time.Second)))
	assert.Equal(t, 0, s.Sweep(t0.Add(20*time.Second-time.Millisecond)))
	assert.Equal(t, 100, s.Sweep(t0.Add(20*time.Second)))
	st := s.Stats()
	assert.Zero(t, st.CounterKeys+st.LogKeys)
	assert.EqualValues(t, 200, st.Expired)
}

func TestSweepCompactsShardsAfterAFlood(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxKeys = 10_000 })
	t0 := sec(1_000_000)
	for i := range 5000 {
		_, err := s.Check(t0, Request{Key: "flood-" + itoa(i), Limit: 1, Window: time.Second, Hits: 1})
		require.NoError(t, err)
	}
	require.Equal(t, 5000, s.shards[0].peak)
	_, err := s.Check(t0.Add(time.Second), Request{Key: "keeper", Limit: 1, Window: time.Hour, Hits: 1})
	require.NoError(t, err)
	assert.Equal(t, 5000, s.Sweep(t0.Add(2*time.Second)))
	assert.Equal(t, 1, s.shards[0].peak, "maps rebuilt at their live size")
	d, err := s.Check(t0.Add(2*time.Second), Request{Key: "keeper", Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.CurrentCount, "live keys survive compaction")
}

func TestOverflowEvictKeepsServingAndCounts(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxKeys = 50 })
	t0 := sec(1_000_000)
	for i := range 200 {
		d, err := s.Check(t0, Request{Key: "k" + itoa(i), Limit: 1, Window: time.Hour, Hits: 1})
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	st := s.Stats()
	assert.Equal(t, 50, st.CounterKeys, "the cap holds")
	assert.EqualValues(t, 150, st.Evictions)
}

func TestOverflowEvictPrefersExpiredKeys(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxKeys = 4 })
	t0 := sec(1_000_000)
	for i := range 4 {
		_, err := s.Check(t0, Request{Key: "old" + itoa(i), Limit: 1, Window: time.Second, Hits: 1})
		require.NoError(t, err)
	}
	_, err := s.Check(t0.Add(time.Minute), Request{Key: "new", Limit: 1, Window: time.Second, Hits: 1})
	require.NoError(t, err)
	st := s.Stats()
	assert.Zero(t, st.Evictions)
	assert.EqualValues(t, 4, st.Expired)
}

func TestOverflowRejectKeepsExistingKeysExact(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxKeys, cfg.Overflow = 3, OverflowReject })
	t0 := sec(1_000_000)
	for i := range 3 {
		_, err := s.Check(t0, Request{Key: "k" + itoa(i), Limit: 1, Window: time.Hour, Hits: 1, Algorithm: Algorithm(i % 2)})
		require.NoError(t, err)
	}
	_, err := s.Check(t0, Request{Key: "intruder", Limit: 1, Window: time.Hour, Hits: 1})
	require.ErrorIs(t, err, ErrCapacity)
	_, err = s.Check(t0, Request{Key: "intruder", Limit: 1, Window: time.Hour, Hits: 1, Algorithm: SlidingWindowLog})
	require.ErrorIs(t, err, ErrCapacity)
	// Peeks and existing keys still work at capacity.
	_, err = s.Check(t0, Request{Key: "intruder", Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	d, err := s.Check(t0, Request{Key: "k0", Limit: 1, Window: time.Hour, Hits: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed, "k0 still remembers its hit")
	assert.EqualValues(t, 2, s.Stats().Rejections)
}

// Over 49 days a key's log offsets would overflow 32 bits; the base moves.
func TestLogRebasesOverLongLife(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	w := 40 * 24 * time.Hour
	req := Request{Key: "k", Limit: 3, Window: w, Algorithm: SlidingWindowLog, Hits: 1}
	t0 := sec(1_000_000)
	times := []time.Time{t0, t0.Add(30 * 24 * time.Hour), t0.Add(45 * 24 * time.Hour), t0.Add(65 * 24 * time.Hour)}
	for _, at := range times {
		d, err := s.Check(at, req)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	want := []int64{times[1].UnixMilli(), times[2].UnixMilli(), times[3].UnixMilli()}
	assert.Equal(t, want, logEntries(t, s, req))
	d, err := s.Check(times[3], req)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, times[1].Add(w).Sub(times[3]), d.RetryAfter)
}

// The log's ring grows to the limit and gives memory back after a burst.
func TestLogRingSizing(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	req := Request{Key: "k", Limit: 1000, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	t0 := sec(1_000_000)
	for i := range 1000 {
		_, err := s.Check(t0.Add(time.Duration(i)*time.Microsecond), req)
		require.NoError(t, err)
	}
	st := s.shards.of("k").logs[stateKey{"k", 1000}]
	assert.Equal(t, 1000, len(st.ring), "never above the limit")
	_, err := s.Check(t0.Add(5*time.Second), req)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(st.ring), 16, "shrinks once drained")
}

// Extreme but valid values decide without overflow.
func TestExtremeValues(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	maxW := s.Config().MaxWindow
	req := Request{Key: "k", Limit: math.MaxInt64, Window: maxW, Hits: math.MaxInt64 / 2}
	now := time.UnixMilli(math.MaxInt64 / 4)
	for i, want := range []bool{true, true, false} {
		d, err := s.Check(now, req)
		require.NoError(t, err)
		assert.Equal(t, want, d.Allowed, "step %d", i)
		assert.GreaterOrEqual(t, d.RetryAfter, time.Duration(0))
	}
	d, err := s.Check(now, Request{Key: "k", Limit: 1, Window: maxW, Hits: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Positive(t, d.RetryAfter)
	assert.LessOrEqual(t, d.RetryAfter, 2*maxW)
}

// Concurrent callers on one key: the log admits exactly the limit.
func TestConcurrentChecksAdmitExactlyTheLimit(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	for _, algo := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		req := Request{Key: "hot-" + algo.String(), Limit: 500, Window: time.Hour, Algorithm: algo, Hits: 1}
		t0 := sec(3600 * 1000) // a window start, so the counter's prev is empty
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 200 {
					d, err := s.Check(t0.Add(time.Duration(g*200+i)*time.Microsecond), req)
					if err == nil && d.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.EqualValues(t, 500, allowed.Load(), algo)
	}
}

func TestErrCapacityIsWrapped(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxKeys, cfg.Overflow = 1, OverflowReject })
	_, err := s.Check(sec(1), Request{Key: "a", Limit: 1, Window: time.Hour, Hits: 1})
	require.NoError(t, err)
	_, err = s.Check(sec(1), Request{Key: "b", Limit: 1, Window: time.Hour, Hits: 1})
	assert.True(t, errors.Is(err, ErrCapacity))
	assert.Contains(t, err.Error(), "shard holds 1 keys")
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}
