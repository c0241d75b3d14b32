package limiter

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A store that tracks changes hands each changed key once, as its current
// state, and a deleted key as tombstones; one that does not tracks
// nothing.
func TestTakeChanged(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true })
	now := time.UnixMilli(1_700_000_000_000)
	counter := Request{Key: "c", Limit: 5, Window: time.Second, Hits: 2}
	log := Request{Key: "l", Limit: 5, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	for _, r := range []Request{counter, log, {Key: "peek", Limit: 5, Window: time.Second}} {
		_, err := s.Check(now, r)
		require.NoError(t, err)
	}
	got := s.Changes().Take(nil, 0, now)
	require.Len(t, got, 2, "a peek changes nothing")
	byKey := map[string]KeyState{}
	for _, ks := range got {
		byKey[ks.Key] = ks
	}
	assert.EqualValues(t, 2, byKey["c"].Curr)
	assert.Equal(t, []int64{now.UnixMilli()}, byKey["l"].Log)
	assert.Empty(t, s.Changes().Take(nil, 0, now), "taken")

	s.Admin().Delete(now, "c", time.Second, SlidingWindowCounter)
	got = s.Changes().Take(nil, 0, now)
	require.Len(t, got, 2, "a tombstone of each algorithm")
	for _, ks := range got {
		assert.Equal(t, "c", ks.Key)
		assert.Zero(t, ks.Curr+ks.Prev+int64(len(ks.Log)))
	}

	_, err := s.Check(now, log)
	require.NoError(t, err)
	s.Changes().Clear(0)
	assert.Empty(t, s.Changes().Take(nil, 0, now))

	off, err := New(DefaultConfig(), 1)
	require.NoError(t, err)
	_, err = off.Check(now, counter)
	require.NoError(t, err)
	assert.Empty(t, off.Changes().Take(nil, 0, now))
}

// A key changed many times in a round is taken once, at its last state;
// what changes nothing (a peek, a denial) is not taken.
func TestTakeChangedKeepsOneRecordPerKey(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true })
	now := time.UnixMilli(1_700_000_000_000)
	counter := Request{Key: "c", Limit: 5, Window: time.Second, Hits: 1}
	log := Request{Key: "l", Limit: 3, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	for i := range 5 {
		_, err := s.Check(now.Add(time.Duration(i)*time.Millisecond), counter)
		require.NoError(t, err)
		_, err = s.Check(now.Add(time.Duration(i)*time.Millisecond), log) // the last two are denied
		require.NoError(t, err)
	}
	got := s.Changes().Take(nil, 0, now.Add(10*time.Millisecond))
	require.Len(t, got, 2)
	assert.Equal(t, "c", got[0].Key)
	assert.EqualValues(t, 5, got[0].Curr)
	assert.Equal(t, "l", got[1].Key)
	assert.Len(t, got[1].Log, 3)

	_, err := s.Check(now.Add(20*time.Millisecond), Request{Key: "c", Limit: 5, Window: time.Second}) // a peek
	require.NoError(t, err)
	_, err = s.Check(now.Add(20*time.Millisecond), log) // denied
	require.NoError(t, err)
	assert.Empty(t, s.Changes().Take(nil, 0, now.Add(20*time.Millisecond)))
}

// A state that changed and then went before the round took it, evicted
// for room or expired, goes as its tombstone: the backup must drop its
// copy, as it would have had the state gone before it changed.
func TestTakeChangedSendsTheTombstoneOfAStateGone(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true; c.MaxKeys = 1 })
	now := time.UnixMilli(1_700_000_000_000)
	for _, k := range []string{"a", "b"} { // b evicts a
		_, err := s.Check(now, Request{Key: k, Limit: 5, Window: time.Second, Hits: 1})
		require.NoError(t, err)
	}
	got := s.Changes().Take(nil, 0, now)
	byKey := map[string]int64{}
	for _, ks := range got {
		byKey[ks.Key] += ks.Prev + ks.Curr + int64(len(ks.Log))
	}
	assert.Equal(t, map[string]int64{"a": 0, "b": 1}, byKey)

	_, err := s.Check(now, Request{Key: "b", Limit: 5, Window: time.Second, Hits: 1})
	require.NoError(t, err)
	got = s.Changes().Take(nil, 0, now.Add(2*time.Second)) // b's count has left both windows
	require.Len(t, got, 1)
	assert.Zero(t, got[0].Prev+got[0].Curr, "expired: a tombstone")
}

// Whatever a store does between rounds (checks of either algorithm,
// resets, merges, sweeps), a backup that applies every round's states
// in order, the last of a key its copy and an empty state dropping it,
// holds exactly the store's live states when the round is taken.
func TestTakeChangedReplaysToTheStore(t *testing.T) {
	seed := seedFromEnv(t, uint64(time.Now().UnixNano()))
	rng := rand.New(rand.NewPCG(seed, 0))
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true })
	type id struct {
		key    string
		window time.Duration
		algo   Algorithm
	}
	backup := map[id]KeyState{}
	ms := int64(1_700_000_000_000)
	keys := []string{"a", "b", "c", "d"}
	for step := range 3000 {
		ms += rng.Int64N(200)
		now := time.UnixMilli(ms)
		k, w, a := keys[rng.IntN(len(keys))], time.Duration(1+rng.IntN(2))*time.Second, Algorithm(rng.IntN(2))
		switch op := rng.IntN(12); {
		case op < 7:
			_, err := s.Check(now, Request{Key: k, Limit: 4, Window: w, Algorithm: a, Hits: rng.Int64N(3)})
			require.NoError(t, err)
		case op == 7:
			s.Admin().Delete(now, k, w, a)
		case op == 8:
			s.Admin().DeleteKey(now, k)
		case op == 9:
			s.Transfer().Merge(now, []KeyState{{Key: k, Window: w, Algorithm: a, WindowID: ms / w.Milliseconds(), Curr: 1, Log: []int64{ms}}})
		case op == 10:
			s.Sweep(now)
		default:
			for _, ks := range s.Changes().Take(nil, 0, now) {
				if ks.Prev+ks.Curr == 0 && len(ks.Log) == 0 {
					delete(backup, id{ks.Key, ks.Window, ks.Algorithm})
				} else {
					backup[id{ks.Key, ks.Window, ks.Algorithm}] = ks
				}
			}
			want := map[id]KeyState{}
			for _, ks := range s.Transfer().SnapshotPartition(0, now) {
				want[id{ks.Key, ks.Window, ks.Algorithm}] = liveAt(ks, ms)
			}
			got := map[id]KeyState{}
			for i, ks := range backup {
				if ks = liveAt(ks, ms); ks.Prev+ks.Curr > 0 || len(ks.Log) > 0 {
					got[i] = ks
				}
			}
			require.Equal(t, want, got, "step %d (PEERLIMIT_SEED=%d replays it)", step, seed)
		}
	}
}

// liveAt returns what ks counts at now (ms): a counter rolled to now's
// window, a log without the entries that left it.
func liveAt(ks KeyState, now int64) KeyState {
	w := ks.Window.Milliseconds()
	if ks.Algorithm == SlidingWindowLog {
		ks.Log = slices.DeleteFunc(slices.Clone(ks.Log), func(t int64) bool { return t <= now-w })
		if len(ks.Log) == 0 {
			ks.Log = nil
		}
		return ks
	}
	st := counterState{window: ks.WindowID, prev: ks.Prev, curr: ks.Curr}
	st.roll(floorDiv(now, w))
	ks.WindowID, ks.Prev, ks.Curr = st.window, st.prev, st.curr
	return ks
}
