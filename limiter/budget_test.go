package limiter

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// requireAccounting compares the shards' running totals with a full walk
// of their maps: every path that changes state must keep them exact, or
// the log budget and the metrics drift.
func requireAccounting(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		entries, slots, keyBytes := 0, 0, 0
		for k := range sh.counters {
			keyBytes += len(k.key)
		}
		for k, st := range sh.logs {
			keyBytes += len(k.key)
			entries += int(st.n)
			slots += len(st.ring)
		}
		for k := range sh.gcras {
			keyBytes += len(k.key)
		}
		got := [3]int{sh.entries, sh.slots, sh.keyBytes}
		sh.mu.Unlock()
		require.Equal(t, [3]int{entries, slots, keyBytes}, got, "shard %d: entries, slots, key bytes", i)
		require.LessOrEqual(t, slots, s.room.logShare, "shard %d holds more log slots than its share", i)
	}
}

func logReq(key string, limit, hits int64) Request {
	return Request{Key: key, Limit: limit, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: hits}
}

func TestLogBudgetValidation(t *testing.T) {
	budget := func(entries int64) Config {
		return configWith(func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries = 100, entries })
	}
	_, err := New(budget(399), 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MaxLogEntries must be")
	assert.Contains(t, err.Error(), "4 × 100")
	_, err = New(budget(400), 4)
	require.NoError(t, err)
	// The defaults fit each other.
	_, err = New(DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
}

// Under reject, a log that would grow past its shard's share is refused
// with ErrCapacity naming the flag, consumes nothing, and counts; the
// logs already held keep deciding exactly.
func TestLogBudgetRejects(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries, cfg.Overflow = 100, 100, OverflowReject })
	t0 := sec(1_000_000)
	d, err := s.Check(t0, logReq("a", 100, 60))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = s.Check(t0, logReq("b", 100, 40))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	requireAccounting(t, s)

	_, err = s.Check(t0, logReq("c", 100, 1))
	require.ErrorIs(t, err, ErrCapacity)
	assert.Contains(t, err.Error(), "--max-log-entries")
	_, err = s.Check(t0, logReq("a", 100, 1))
	require.ErrorIs(t, err, ErrCapacity, "a held log cannot grow either")

	// Peeks still answer, from exact state.
	d, err = s.Check(t0, logReq("a", 100, 0))
	require.NoError(t, err)
	assert.EqualValues(t, 60, d.CurrentCount)
	d, err = s.Check(t0, logReq("c", 100, 0))
	require.NoError(t, err)
	assert.Zero(t, d.CurrentCount)

	st := s.Stats()
	assert.EqualValues(t, 2, st.LogRejections)
	assert.Zero(t, st.LogEvictions)
	assert.Equal(t, 100, st.LogEntries)
	assert.Equal(t, 100, st.LogSlots)
	requireAccounting(t, s)

	// Once a's entries leave the window, the room is back.
	d, err = s.Check(t0.Add(time.Minute), logReq("c", 100, 1))
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	requireAccounting(t, s)
}

// Under evict, the log that needs room takes it from the sampled log that
// would expire soonest, and every such key is counted.
func TestLogBudgetEvictsSoonestExpiring(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries = 100, 100 })
	t0 := sec(1_000_000)
	// old expires first: its newest entry is a second older than young's.
	_, err := s.Check(t0, logReq("old", 50, 50))
	require.NoError(t, err)
	_, err = s.Check(t0.Add(time.Second), logReq("young", 50, 50))
	require.NoError(t, err)
	requireAccounting(t, s)

	d, err := s.Check(t0.Add(2*time.Second), logReq("new", 10, 10))
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	st := s.Stats()
	assert.EqualValues(t, 1, st.LogEvictions)
	assert.Zero(t, st.LogRejections)
	assert.Equal(t, 2, st.LogKeys)
	requireAccounting(t, s)

	// young kept its count, old restarts from zero.
	d, err = s.Check(t0.Add(2*time.Second), logReq("young", 50, 0))
	require.NoError(t, err)
	assert.EqualValues(t, 50, d.CurrentCount)
	d, err = s.Check(t0.Add(2*time.Second), logReq("old", 50, 0))
	require.NoError(t, err)
	assert.Zero(t, d.CurrentCount)
}

// A log never evicts itself, and nothing else to evict means a refusal
// even under evict.
func TestLogBudgetNeverEvictsTheKeyItself(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries = 100, 100 })
	t0 := sec(1_000_000)
	// Limit 200 exceeds MaxLogLimit; to reach the budget with one key, lower
	// the limit of the same key (a changed limit applies to its count).
	_, err := s.Check(t0, logReq("solo", 100, 100))
	require.NoError(t, err)
	_, err = s.Check(t0, logReq("solo", 100, 1))
	require.NoError(t, err, "over its limit: denied, not refused")
	// A second key needs room only solo has.
	_, err = s.Check(t0, logReq("other", 10, 1))
	require.NoError(t, err, "evicts solo")
	assert.EqualValues(t, 1, s.Stats().LogEvictions)
	requireAccounting(t, s)
}

// A ring that cannot double within the budget grows exactly as needed.
func TestLogBudgetGrowsExactlyWhenTight(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries = 100, 100 })
	t0 := sec(1_000_000)
	_, err := s.Check(t0, logReq("big", 100, 70)) // a ring of 70
	require.NoError(t, err)
	for i := range 30 {
		d, err := s.Check(t0, logReq("small", 100, 1))
		require.NoError(t, err, "hit %d", i)
		require.True(t, d.Allowed)
	}
	st := s.Stats()
	assert.Equal(t, 100, st.LogSlots)
	assert.Zero(t, st.LogEvictions)
	requireAccounting(t, s)
}

// Handoff merges count against the budget too: a merge that does not fit
// is refused (and reported by Merge) under reject.
func TestLogBudgetBoundsMerge(t *testing.T) {
	s := newStore(t, 1, func(cfg *Config) { cfg.MaxLogLimit, cfg.MaxLogEntries, cfg.Overflow = 100, 100, OverflowReject })
	t0 := sec(1_000_000)
	_, err := s.Check(t0, logReq("held", 100, 80))
	require.NoError(t, err)
	log := make([]int64, 30)
	for i := range log {
		log[i] = t0.UnixMilli() - int64(i)
	}
	merged, errs := s.Transfer().Merge(t0, []KeyState{{Key: "moved", Window: time.Minute, Algorithm: SlidingWindowLog, Log: log[:20]},
		{Key: "too-big", Window: time.Minute, Algorithm: SlidingWindowLog, Log: log}})
	assert.Equal(t, 1, merged)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], ErrCapacity)
	requireAccounting(t, s)
}

// Random traffic through every path that changes state keeps the running
// totals equal to a walk of the maps, and the budget is never exceeded.
func TestAccountingUnderRandomTraffic(t *testing.T) {
	seed := seedFromEnv(t, uint64(time.Now().UnixNano()))
	t.Logf("seed %d (PEERLIMIT_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, overflow := range []OverflowPolicy{OverflowEvict, OverflowReject} {
		s := newStore(t, 3, func(cfg *Config) {
			cfg.MaxKeys, cfg.MaxLogLimit, cfg.MaxLogEntries, cfg.Overflow = 60, 50, 3*120, overflow
		})
		other := newStore(t, 3, nil)
		now := sec(1_000_000)
		for i := range 5000 {
			now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
			key := fmt.Sprintf("k%d", rng.IntN(90))
			w := time.Duration(1+rng.IntN(3)) * time.Second
			switch op := rng.IntN(100); {
			case op < 80:
				limit := int64(1 + rng.IntN(50))
				_, err := s.Check(now, Request{Key: key, Limit: limit, Window: w, Algorithm: Algorithm(rng.IntN(3)), Hits: rng.Int64N(limit + 1)})
				if err != nil {
					require.ErrorIs(t, err, ErrCapacity)
				}
			case op < 84:
				s.Admin().Delete(now, key, w, Algorithm(rng.IntN(3)))
			case op < 86:
				s.Admin().DeleteKey(now, key)
			case op < 88:
				s.Sweep(now)
			case op < 94:
				p := rng.IntN(s.Transfer().Partitions())
				states := s.Transfer().SnapshotPartition(p, now)
				if len(states) > 0 {
					states = states[:1+rng.IntN(len(states))]
				}
				other.Transfer().Merge(now, states)
				s.Transfer().Forget(now, states)
			default:
				p := rng.IntN(other.Transfer().Partitions())
				s.Transfer().Merge(now, other.Transfer().SnapshotPartition(p, now))
			}
			if i%50 == 0 {
				requireAccounting(t, s)
			}
		}
		requireAccounting(t, s)
		requireAccounting(t, other)
		st := s.Stats()
		t.Logf("%s: %+v", overflow, st)
		// The traffic reached both caps, so their paths were exercised.
		if overflow == OverflowEvict {
			assert.Positive(t, st.Evictions)
			assert.Positive(t, st.LogEvictions)
		} else {
			assert.Positive(t, st.Rejections)
			assert.Positive(t, st.LogRejections)
		}
	}
}

// The estimate of Stats.Bytes stays within a third of the heap the state
// really takes, measured as BenchmarkMemoryPerKey does.
func TestEstimateBytesTracksTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~20 MB and runs the GC")
	}
	for _, c := range []struct {
		name  string
		algo  Algorithm
		limit int64
		keys  int
	}{
		{"counter", SlidingWindowCounter, 100, 50_000},
		{"log-limit-5", SlidingWindowLog, 5, 50_000},
		{"log-limit-1000", SlidingWindowLog, 1000, 1_000},
		{"gcra", GCRA, 100, 50_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys := benchKeys(c.keys)
			before := heapInUse()
			s := newStore(t, partition.DefaultCount, func(cfg *Config) { cfg.MaxKeys = 1 << 22 })
			for _, k := range keys {
				_, err := s.Check(benchT0, Request{Key: k, Limit: c.limit, Window: time.Minute, Algorithm: c.algo, Hits: c.limit})
				require.NoError(t, err)
			}
			measured := float64(heapInUse() - before)
			est := float64(s.Stats().Bytes)
			runtime.KeepAlive(keys)
			runtime.KeepAlive(s)
			t.Logf("estimate %.0f B, measured %.0f B (%.2f×)", est, measured, est/measured)
			assert.InEpsilon(t, measured, est, 0.34)
		})
	}
}
