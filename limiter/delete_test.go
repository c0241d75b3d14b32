package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// exhaust uses up r's limit at now and requires the next hit to be denied.
func exhaust(t *testing.T, s *Store, now time.Time, r Request) {
	t.Helper()
	for i := range r.Limit {
		d, err := s.Check(now, r)
		require.NoError(t, err)
		require.True(t, d.Allowed, "hit %d", i)
	}
	d, err := s.Check(now, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
}

func TestDeleteLiftsABlockAndOnlyThatLimit(t *testing.T) {
	for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		t.Run(a.String(), func(t *testing.T) {
			s := newStore(t, partition.DefaultCount, nil)
			now := sec(1000)
			minute := Request{Key: "user:1", Limit: 3, Window: time.Minute, Algorithm: a, Hits: 1}
			hour := minute
			hour.Window = time.Hour
			other := minute
			other.Key = "user:2"
			exhaust(t, s, now, minute)
			exhaust(t, s, now, hour)
			exhaust(t, s, now, other)

			assert.True(t, s.Admin().Delete(now, "user:1", time.Minute, a), "a live state existed")
			d, err := s.Check(now, minute)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the block is lifted")
			assert.Zero(t, d.CurrentCount, "starts from zero")

			for _, r := range []Request{hour, other} {
				d, err := s.Check(now, r)
				require.NoError(t, err)
				assert.False(t, d.Allowed, "%s/%s untouched", r.Key, r.Window)
			}
			// The other algorithm under the same key and window is another
			// map: nothing to delete there.
			assert.False(t, s.Admin().Delete(now, "user:2", time.Minute, 1-a))
			assert.False(t, s.Admin().Delete(now, "absent", time.Minute, a))
		})
	}
}

func TestDeleteReportsExpiredStateAsAbsent(t *testing.T) {
	s := newStore(t, partition.DefaultCount, nil)
	r := Request{Key: "k", Limit: 2, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	_, err := s.Check(sec(1000), r)
	require.NoError(t, err)
	assert.False(t, s.Admin().Delete(sec(1002), "k", time.Second, SlidingWindowLog), "expired: counted nothing any more")
	assert.Zero(t, s.Stats().LogKeys, "but removed all the same")
}

func TestDeleteKeyClearsEveryWindowAndAlgorithm(t *testing.T) {
	// One partition holds every key: the scan must pick only this key's states.
	s := newStore(t, 1, nil)
	now := sec(1000)
	for _, w := range []time.Duration{time.Second, time.Minute, time.Hour} {
		for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
			exhaust(t, s, now, Request{Key: "user:1", Limit: 2, Window: w, Algorithm: a, Hits: 1})
		}
	}
	neighbour := Request{Key: "user:10", Limit: 2, Window: time.Minute, Hits: 1}
	exhaust(t, s, now, neighbour)

	// At now+1.5s the 1s log state has expired; the 1s counter still holds
	// its count in the previous window.
	later := now.Add(1500 * time.Millisecond)
	assert.Equal(t, 5, s.Admin().DeleteKey(later, "user:1"))
	st := s.Stats()
	assert.Equal(t, 1, st.CounterKeys+st.LogKeys, "only the neighbour is left")
	d, err := s.Check(later, neighbour)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Zero(t, s.Admin().DeleteKey(later, "user:1"), "nothing left")
}
