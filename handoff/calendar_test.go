package handoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
)

// A calendar quota that a node held but does not own goes to its owner
// like any state: the counts of one period are summed with the owner's,
// and the key's other limits (another zone, a sliding window) stay
// apart, on every node.
func TestHandoffOfCalendarKeys(t *testing.T) {
	p := newPair(t, time.Second)
	paris, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
	require.NoError(t, err)
	utc, err := limiter.NewCalendar(limiter.CalendarMonth, "")
	require.NoError(t, err)
	monthly := func(key string, cal limiter.Calendar, hits int64) limiter.Request {
		return limiter.Request{Key: key, Limit: 100, Calendar: cal, Hits: hits}
	}
	keys := p.keys("b", 3)
	for _, k := range keys {
		for _, r := range []limiter.Request{monthly(k, paris, 3), monthly(k, utc, 4), {Key: k, Limit: 100, Window: 30 * 24 * time.Hour, Hits: 5}} {
			_, err := p.a.store.Check(p.now, r)
			require.NoError(t, err)
		}
	}
	_, err = p.b.store.Check(p.now, monthly(keys[0], paris, 2)) // the owner's own count of the same month
	require.NoError(t, err)

	assert.Zero(t, p.a.sender.Run(bg))
	assert.Zero(t, p.a.store.Stats().CounterKeys, "a keeps nothing of b's keys")
	count := func(r limiter.Request) int64 {
		r.Hits = 0
		d, err := p.b.store.Check(p.now, r)
		require.NoError(t, err)
		return d.CurrentCount
	}
	assert.EqualValues(t, 5, count(monthly(keys[0], paris, 0)), "one period: summed")
	assert.EqualValues(t, 3, count(monthly(keys[1], paris, 0)))
	assert.EqualValues(t, 4, count(monthly(keys[1], utc, 0)), "another zone, another counter")
	assert.EqualValues(t, 5, count(limiter.Request{Key: keys[1], Limit: 100, Window: 30 * 24 * time.Hour}), "the sliding month, apart")
	assert.Equal(t, 9, p.b.store.Stats().CounterKeys)
}
