package limiter

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// Moving a partition to another store keeps every decision as it was.
func TestSnapshotMergeForgetKeepDecisions(t *testing.T) {
	a, b := newStore(t, partition.DefaultCount, nil), newStore(t, partition.DefaultCount, nil)
	t0 := sec(1_000_020)
	reqs := []Request{
		{Key: "user:1", Limit: 3, Window: time.Minute, Hits: 1},
		{Key: "user:1", Limit: 3, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: 1},
	}
	for _, r := range reqs {
		for range 3 {
			_, err := a.Check(t0, r)
			require.NoError(t, err)
		}
	}
	p := a.Transfer().PartitionOf("user:1")
	states := a.Transfer().SnapshotPartition(p, t0)
	require.Len(t, states, 2)
	assert.Equal(t, 2, a.Transfer().PartitionLen(p), "a snapshot leaves the state in place")
	a.Transfer().Forget(t0, states)
	assert.Zero(t, a.Transfer().PartitionLen(p), "forgetting what was sent leaves nothing")

	merged, errs := b.Transfer().Merge(t0, states)
	require.Empty(t, errs)
	assert.Equal(t, 2, merged)
	for _, r := range reqs {
		d, err := b.Check(t0.Add(time.Second), r)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s: the moved count still blocks", r.Algorithm)
		assert.EqualValues(t, 3, d.CurrentCount)
	}
}

// Both sides served the key (a partition): every admitted hit counts.
func TestMergeSumsWhatBothSidesAdmitted(t *testing.T) {
	a, b := newStore(t, partition.DefaultCount, nil), newStore(t, partition.DefaultCount, nil)
	w := 10 * time.Second
	t0 := sec(1_000_000) // a window start
	check := func(s *Store, at time.Time, r Request) {
		_, err := s.Check(at, r)
		require.NoError(t, err)
	}
	counter := Request{Key: "k", Limit: 100, Window: w, Hits: 2}
	log := Request{Key: "k", Limit: 100, Window: w, Algorithm: SlidingWindowLog, Hits: 1}
	check(a, t0, counter)                     // a: window 100000, curr 2
	check(b, t0.Add(-5*time.Second), counter) // b: window 99999, curr 2
	check(b, t0.Add(1*time.Second), counter)  // b: rolls: prev 2, curr 2
	check(a, t0.Add(1*time.Second), log)      // a: log [t0+1s]
	check(b, t0.Add(2*time.Second), log)      // b: log [t0+2s]
	_, errs := b.Transfer().Merge(t0.Add(3*time.Second), a.Transfer().SnapshotPartition(a.Transfer().PartitionOf("k"), t0.Add(3*time.Second)))
	require.Empty(t, errs)

	d, err := b.Check(t0.Add(3*time.Second), withHits(counter, 0))
	require.NoError(t, err)
	// prev 2 × 7/10 = 1.4, curr 2 + 2 = 4 → floor(5.4) = 5
	assert.EqualValues(t, 5, d.CurrentCount)
	d, err = b.Check(t0.Add(3*time.Second), withHits(log, 0))
	require.NoError(t, err)
	assert.EqualValues(t, 2, d.CurrentCount, "a's entry joins b's")
}

func TestMergeDropsExpiredAndClampsFutureState(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	now := sec(1_000_000)
	w := 10 * time.Second
	nowMS := now.UnixMilli()
	_, errs := s.Transfer().Merge(now, []KeyState{
		{Key: "old-counter", Window: w, WindowID: nowMS/10_000 - 2, Curr: 5},
		{Key: "old-log", Window: w, Algorithm: SlidingWindowLog, Log: []int64{nowMS - 10_000}},
		{Key: "future-counter", Window: w, WindowID: nowMS/10_000 + 50, Curr: 3},
		{Key: "future-log", Window: w, Algorithm: SlidingWindowLog, Log: []int64{nowMS + 1e9}},
	})
	require.Empty(t, errs)
	st := s.Stats()
	assert.Equal(t, 1, st.CounterKeys, "the expired counter is not stored")
	assert.Equal(t, 1, st.LogKeys)

	d, err := s.Check(now, Request{Key: "future-counter", Limit: 3, Window: w, Hits: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.LessOrEqual(t, d.RetryAfter, 2*w, "the key is not frozen in the future")
	d, err = s.Check(now.Add(w), Request{Key: "future-log", Limit: 1, Window: w, Algorithm: SlidingWindowLog, Hits: 1})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a future entry counts as now, and leaves a window later")
}

func TestMergeRejectsInvalidStates(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	merged, errs := s.Transfer().Merge(sec(100), []KeyState{
		{Key: "", Window: time.Second},
		{Key: "k", Window: 0},
		{Key: "k", Window: time.Second, Algorithm: 7},
		{Key: "k", Window: time.Second, Curr: -1, WindowID: 100},
		{Key: "ok", Window: time.Second, WindowID: 100, Curr: 1},
	})
	assert.Equal(t, 1, merged)
	assert.Len(t, errs, 4)
}

func TestMergeCapsLogAtMaxLogLimit(t *testing.T) {
	s := newStore(t, partition.DefaultCount, func(cfg *Config) { cfg.MaxLogLimit = 5 })
	now := sec(1000)
	log := make([]int64, 12)
	for i := range log {
		log[i] = now.UnixMilli() - int64(12-i)
	}
	_, errs := s.Transfer().Merge(now, []KeyState{{Key: "k", Window: time.Second, Algorithm: SlidingWindowLog, Log: log}})
	require.Empty(t, errs)
	assert.Equal(t, 5, s.Stats().LogEntries)
}

// Checks racing a handoff: whatever the store admitted is either in what
// was sent or still in the store. Nothing is lost, nothing counted twice.
func TestSnapshotAndForgetDuringTrafficLoseNothing(t *testing.T) {
	src, dst := newStore(t, 1, nil), newStore(t, 1, nil)
	now := sec(1_000_000)
	req := Request{Key: "hot", Limit: 1 << 40, Window: time.Hour, Algorithm: SlidingWindowCounter, Hits: 1}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if d, err := src.Check(now, req); err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	for range 50 {
		sent := src.Transfer().SnapshotPartition(0, now)
		_, errs := dst.Transfer().Merge(now, sent)
		require.Empty(t, errs)
		src.Transfer().Forget(now, sent)
	}
	close(stop)
	wg.Wait()
	sent := src.Transfer().SnapshotPartition(0, now)
	_, errs := dst.Transfer().Merge(now, sent)
	require.Empty(t, errs)
	src.Transfer().Forget(now, sent)
	assert.Zero(t, src.Transfer().PartitionLen(0))
	d, err := dst.Check(now, withHits(req, 0))
	require.NoError(t, err)
	assert.Equal(t, admitted.Load(), d.CurrentCount)
}

// While a handoff is in flight the key keeps its count here, so a check
// decided meanwhile (fallback, or a forward during convergence) is decided
// against the full state; forgetting what was sent keeps only what came
// after.
func TestForgetKeepsWhatWasAdmittedAfterTheSnapshot(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	now := sec(1_000_000)
	for _, algo := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		req := Request{Key: "k-" + algo.String(), Limit: 3, Window: time.Minute, Algorithm: algo, Hits: 1}
		for range 2 {
			_, err := s.Check(now, req)
			require.NoError(t, err)
		}
		sent := s.Transfer().SnapshotPartition(s.Transfer().PartitionOf(req.Key), now)
		d, err := s.Check(now.Add(time.Second), req)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.EqualValues(t, 2, d.CurrentCount, "%s: decided against the full state while in flight", algo)
		d, err = s.Check(now.Add(time.Second), req)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s: the limit holds during the handoff", algo)

		s.Transfer().Forget(now.Add(time.Second), sent)
		d, err = s.Check(now.Add(time.Second), withHits(req, 0))
		require.NoError(t, err)
		assert.EqualValues(t, 1, d.CurrentCount, "%s: only the hit admitted after the snapshot stays", algo)
	}
}

func TestSubtractSorted(t *testing.T) {
	assert.Equal(t, []int64{1, 3, 3, 7}, subtractSorted([]int64{1, 2, 3, 3, 3, 5, 7}, []int64{2, 3, 5, 6}))
	assert.Empty(t, subtractSorted([]int64{4, 4}, []int64{4, 4, 4}))
}

func TestMoveLogReplacesEntriesUnderOneLock(t *testing.T) {
	s := newStore(t, 4, nil)
	t0 := time.UnixMilli(1_700_000_000_000)
	req := Request{Key: "k", Limit: 10, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: 1}
	_, err := s.Check(t0, req)
	require.NoError(t, err)
	req.Hits = 4
	_, err = s.Check(t0.Add(time.Second), req) // 4 placeholders at t0+1s
	require.NoError(t, err)
	at := t0.Add(2 * time.Second)
	ph := []int64{t0.Add(time.Second).UnixMilli(), t0.Add(time.Second).UnixMilli(), t0.Add(time.Second).UnixMilli(), t0.Add(time.Second).UnixMilli()}
	// Two of the four were used, later; the other two go back.
	s.Transfer().MoveLog(at, "k", time.Minute, ph, []int64{t0.Add(1500 * time.Millisecond).UnixMilli(), at.Add(time.Hour).UnixMilli(), 0, 0, 0})
	views, err := s.Admin().Inspect(at, "k", 0, 0)
	require.NoError(t, err)
	require.Len(t, views, 1)
	assert.Equal(t, []time.Time{t0, t0.Add(1500 * time.Millisecond), at}, views[0].Entries,
		"the first hit stays, a time in the future is taken as now, and what left the window is dropped")
	s.Transfer().MoveLog(at, "k", time.Minute, ph, []int64{at.UnixMilli()}) // the placeholders are gone: nothing is added
	views, err = s.Admin().Inspect(at, "k", 0, 0)
	require.NoError(t, err)
	assert.Len(t, views[0].Entries, 3, "a move adds no more entries than it found")
	s.Transfer().MoveLog(at, "absent", time.Minute, ph, ph) // nothing to move, nothing created
	views, err = s.Admin().Inspect(at, "absent", 0, 0)
	require.NoError(t, err)
	assert.Empty(t, views)
}

// CheckPlaced says where the store counted the hits: a log whose newest
// entry is later than now puts them there, a counter already in a later
// window at its start.
func TestCheckPlacedSaysWhereTheHitsWent(t *testing.T) {
	s := newStore(t, 4, nil)
	t0 := time.UnixMilli(1_700_000_000_000)
	log := Request{Key: "log", Limit: 10, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: 1}
	_, at, err := s.CheckPlaced(t0, log)
	require.NoError(t, err)
	assert.Equal(t, t0.UnixMilli(), at)
	_, err = s.Check(t0.Add(5*time.Millisecond), log)
	require.NoError(t, err)
	_, at, err = s.CheckPlaced(t0.Add(2*time.Millisecond), log)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(5*time.Millisecond).UnixMilli(), at, "after the newest entry")

	counter := Request{Key: "counter", Limit: 10, Window: time.Second, Algorithm: SlidingWindowCounter, Hits: 1}
	next := t0.Truncate(time.Second).Add(time.Second)
	_, err = s.Check(next.Add(10*time.Millisecond), counter)
	require.NoError(t, err)
	_, at, err = s.CheckPlaced(next.Add(-10*time.Millisecond), counter)
	require.NoError(t, err)
	assert.Equal(t, next.UnixMilli(), at, "the counter's current window's start")
}
