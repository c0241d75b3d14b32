package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInspectCounterShowsBothWindowsAndConsumesNothing(t *testing.T) {
	s := newStore(t, 4, nil)
	w := 10 * time.Second
	t0 := time.UnixMilli(1_000_000_000_000) // a window boundary: 10^12 is a multiple of 10^4
	req := Request{Key: "k", Limit: 5, Window: w, Hits: 1}
	for range 4 {
		_, err := s.Check(t0.Add(time.Second), req)
		require.NoError(t, err)
	}
	at := t0.Add(w + 5*time.Second) // halfway through the next window: 4 × ½ = 2
	views, err := s.Admin().Inspect(at, "k", 0, 0)
	require.NoError(t, err)
	require.Len(t, views, 1)
	v := views[0]
	assert.Equal(t, SlidingWindowCounter, v.Algorithm)
	assert.Equal(t, w, v.Window)
	assert.EqualValues(t, 2, v.Count)
	assert.EqualValues(t, 4, v.Previous)
	assert.EqualValues(t, 0, v.Current)
	assert.Equal(t, t0.Add(w), v.WindowStart)
	assert.Equal(t, 5*time.Second, v.ResetAfter)

	// With a limit, NextAllow is what a denied check at the same time says.
	views, err = s.Admin().Inspect(at, "k", 2, 1)
	require.NoError(t, err)
	d, err := s.Check(at, Request{Key: "k", Limit: 2, Window: w, Hits: 1})
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, d.RetryAfter, views[0].NextAllow)
	assert.EqualValues(t, d.CurrentCount, views[0].Count, "inspecting consumed nothing")
}

func TestInspectLogListsTheWindowsHits(t *testing.T) {
	s := newStore(t, 4, nil)
	w := time.Minute
	t0 := time.UnixMilli(1_700_000_000_000)
	req := Request{Key: "k", Limit: 3, Window: w, Hits: 1, Algorithm: SlidingWindowLog}
	for _, off := range []time.Duration{0, 10 * time.Second, 20 * time.Second} {
		_, err := s.Check(t0.Add(off), req)
		require.NoError(t, err)
	}
	at := t0.Add(65 * time.Second) // the first hit has left
	views, err := s.Admin().Inspect(at, "k", 3, 2)
	require.NoError(t, err)
	require.Len(t, views, 1)
	v := views[0]
	assert.Equal(t, SlidingWindowLog, v.Algorithm)
	assert.EqualValues(t, 2, v.Count)
	assert.Equal(t, []time.Time{t0.Add(10 * time.Second), t0.Add(20 * time.Second)}, v.Entries)
	assert.Equal(t, 15*time.Second, v.ResetAfter)
	d, err := s.Check(at, Request{Key: "k", Limit: 3, Window: w, Hits: 2, Algorithm: SlidingWindowLog})
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, d.RetryAfter, v.NextAllow)
}

func TestInspectCreatesNothingAndSkipsExpiredState(t *testing.T) {
	s := newStore(t, 4, nil)
	now := time.UnixMilli(1_700_000_000_000)
	views, err := s.Admin().Inspect(now, "absent", 10, 1)
	require.NoError(t, err)
	assert.Empty(t, views)
	assert.Zero(t, s.Stats().CounterKeys+s.Stats().LogKeys)

	_, err = s.Check(now, Request{Key: "k", Limit: 1, Window: time.Second, Hits: 1})
	require.NoError(t, err)
	_, err = s.Check(now, Request{Key: "k", Limit: 1, Window: time.Minute, Hits: 1, Algorithm: SlidingWindowLog})
	require.NoError(t, err)
	views, err = s.Admin().Inspect(now, "k", 0, 0)
	require.NoError(t, err)
	require.Len(t, views, 2, "every window and algorithm of the key")
	assert.Equal(t, SlidingWindowCounter, views[0].Algorithm)
	views, err = s.Admin().Inspect(now.Add(5*time.Second), "k", 0, 0)
	require.NoError(t, err)
	require.Len(t, views, 1, "the 1 s counter has expired")
	assert.Equal(t, SlidingWindowLog, views[0].Algorithm)
}

func TestInspectRefusesBadArgumentsNamingTheField(t *testing.T) {
	s := newStore(t, 4, func(c *Config) { c.MaxKeyBytes = 4 })
	now := time.Now()
	for _, c := range []struct {
		key         string
		limit, hits int64
		field       string
	}{
		{"", 1, 1, "key"},
		{"toolong", 1, 1, "key"},
		{"k", -1, 0, "limit"},
		{"k", 2, 3, "hits"},
		{"k", 0, -1, "hits"},
	} {
		_, err := s.Admin().Inspect(now, c.key, c.limit, c.hits)
		var ae *ArgumentError
		require.ErrorAs(t, err, &ae, "%+v", c)
		assert.Equal(t, c.field, ae.Field, "%+v", c)
	}
}
