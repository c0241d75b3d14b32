package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A store that tracks changes hands each changed key once, as its current
// state, and a deleted key as tombstones; one that does not tracks
// nothing.
func TestTakeChanged(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TrackChanges = true
	s, err := New(cfg, 1)
	require.NoError(t, err)
	now := time.UnixMilli(1_700_000_000_000)
	counter := Request{Key: "c", Limit: 5, Window: time.Second, Hits: 2}
	log := Request{Key: "l", Limit: 5, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	for _, r := range []Request{counter, log, {Key: "peek", Limit: 5, Window: time.Second}} {
		_, err := s.Check(now, r)
		require.NoError(t, err)
	}
	got := s.TakeChanged(0, now)
	require.Len(t, got, 2, "a peek changes nothing")
	byKey := map[string]KeyState{}
	for _, ks := range got {
		byKey[ks.Key] = ks
	}
	assert.EqualValues(t, 2, byKey["c"].Curr)
	assert.Equal(t, []int64{now.UnixMilli()}, byKey["l"].Log)
	assert.Empty(t, s.TakeChanged(0, now), "taken")

	s.Delete(now, "c", time.Second, SlidingWindowCounter)
	got = s.TakeChanged(0, now)
	require.Len(t, got, 2, "a tombstone of each algorithm")
	for _, ks := range got {
		assert.Equal(t, "c", ks.Key)
		assert.Zero(t, ks.Curr+ks.Prev+int64(len(ks.Log)))
	}

	_, err = s.Check(now, log)
	require.NoError(t, err)
	s.ClearChanged(0)
	assert.Empty(t, s.TakeChanged(0, now))

	off, err := New(DefaultConfig(), 1)
	require.NoError(t, err)
	_, err = off.Check(now, counter)
	require.NoError(t, err)
	assert.Empty(t, off.TakeChanged(0, now))
}
