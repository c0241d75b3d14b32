package route_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
)

func calendarReq(t testing.TB, key string, limit int64, u limiter.CalendarUnit, zone string) limiter.Request {
	t.Helper()
	c, err := limiter.NewCalendar(u, zone)
	require.NoError(t, err)
	return limiter.Request{Key: key, Limit: limit, Calendar: c, Hits: 1}
}

// A hot calendar quota checked through the members that do not own it:
// they get leases as for a sliding counter, and the quota stays exact.
func TestLeasesOnACalendarQuotaKeepItExact(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	c := newCluster(t, three, withLeases)
	req := calendarReq(t, c.key(t, "n2", "hot"), 1000, limiter.CalendarMonth, "Europe/Paris")
	vias := []string{"n1", "n3"}
	allowed := c.hammer(t, rng, vias, req, 900)
	require.Equal(t, 900, allowed, "seed %d", seed)
	leased := metric(t, c.members["n1"].reg, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_COUNTER", "route", "leased", "outcome", "allowed") +
		metric(t, c.members["n3"].reg, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_COUNTER", "route", "leased", "outcome", "allowed")
	assert.Greater(t, leased, 0.9*900, "seed %d: leased, without a hop", seed)
	allowed += c.hammer(t, rng, vias, req, 2000)
	assert.LessOrEqual(t, allowed, 1000, "seed %d: never over the quota", seed)
	c.clock.Advance(time.Second)
	c.settleAll()
	c.settleAll()
	allowed += c.hammer(t, rng, vias, req, 500)
	assert.Equal(t, 1000, allowed, "seed %d: once settled, exactly the quota", seed)
	assert.EqualValues(t, 1000, c.members["n2"].held(t, c.clock.Now(), req), "seed %d", seed)
}

// A calendar lease ends with its period: one asked for just before the
// boundary lasts until it, and its unused hits, given back after it, are
// not credited to the new period.
func TestACalendarLeaseEndsWithItsPeriod(t *testing.T) {
	c := newCluster(t, three, withLeases)
	n1, n2 := c.members["n1"], c.members["n2"]
	req := calendarReq(t, c.key(t, "n2", "hot"), 1000, limiter.CalendarDay, "")
	_, end := req.Calendar.Period(c.clock.Now().UnixMilli())
	c.clock.Set(time.UnixMilli(end - 200))
	for range askAt { // forwarded; the last asks for a lease
		require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
	}
	require.Equal(t, 1, n1.leases.Held())
	lent := int64(metric(t, n2.reg, "peerlimit_lease_hits_total", "direction", "lent"))
	require.Positive(t, lent)
	assert.EqualValues(t, askAt+lent, n2.held(t, c.clock.Now(), req), "the lease's hits are taken from today's count")

	c.clock.Set(time.UnixMilli(end))          // tomorrow: the lease has ended with today
	res := c.members["n3"].svc.Check(bg, req) // n1 would ask for tomorrow's lease
	require.True(t, res.Decision.Allowed)
	assert.Equal(t, "n2", res.Owner)
	c.settleAll()
	c.settleAll()
	assert.EqualValues(t, 1, n2.held(t, c.clock.Now(), req), "today's unused lease is not credited to tomorrow")
	assert.Zero(t, n2.leases.Lent())
}

// An all-or-nothing batch of a calendar quota and a sliding limit on two
// owners: refused whole when the quota is spent, counted on both when
// both have room, and the quota's hold is released within its period.
func TestAllOrNothingMixesACalendarQuotaAndASlidingLimit(t *testing.T) {
	c := newCluster(t, three)
	n1 := c.members["n1"]
	quota := calendarReq(t, c.key(t, "n2", "tenant"), 2, limiter.CalendarMonth, "America/New_York")
	rate := counterReq(c.key(t, "n3", "rps"), 10, time.Second)
	for range 2 {
		results, err := n1.svc.CheckAll(bg, []limiter.Request{quota, rate})
		require.NoError(t, err)
		for i, r := range results {
			require.NoError(t, r.Err)
			assert.True(t, r.Decision.Allowed, "item %d", i)
		}
	}
	results, err := n1.svc.CheckAll(bg, []limiter.Request{quota, rate})
	require.NoError(t, err)
	assert.False(t, results[0].Decision.Allowed)
	assert.False(t, results[1].Decision.Allowed, "refused with the batch")
	_, end := quota.Calendar.Period(c.clock.Now().UnixMilli())
	assert.Equal(t, time.Duration(end-c.clock.Now().UnixMilli())*time.Millisecond, results[0].Decision.RetryAfter, "until the month ends in New York")
	now := c.clock.Now()
	assert.EqualValues(t, 2, c.members["n2"].held(t, now, quota))
	assert.EqualValues(t, 2, c.members["n3"].held(t, now, rate), "the refused batch's hold was released")
	for _, m := range c.members {
		assert.Zero(t, openOn(m, quota.Key, now), "no hold left open on %s", m.id)
	}

	c.clock.Set(time.UnixMilli(end))
	results, err = n1.svc.CheckAll(bg, []limiter.Request{quota, rate})
	require.NoError(t, err)
	assert.True(t, results[0].Decision.Allowed, "a new month")
	assert.True(t, results[1].Decision.Allowed)
	assert.EqualValues(t, 1, c.members["n2"].held(t, c.clock.Now(), quota))
}

// An all-or-nothing batch refused by another limit answers a GCRA item
// with the room its bucket has, which its burst, not its rate, bounds.
func TestAllOrNothingRefusedAnswersABucketsRoomUpToItsBurst(t *testing.T) {
	c := newCluster(t, three)
	n1 := c.members["n1"]
	bucket := limiter.Request{Key: c.key(t, "n2", "bucket"), Limit: 2, Window: time.Second, Algorithm: limiter.GCRA, Burst: 10, Hits: 1}
	spent := counterReq(c.key(t, "n3", "spent"), 1, time.Minute)
	res := n1.svc.Check(bg, spent)
	require.True(t, res.Decision.Allowed)
	results, err := n1.svc.CheckAll(bg, []limiter.Request{bucket, spent})
	require.NoError(t, err)
	assert.False(t, results[0].Decision.Allowed, "refused with the batch")
	assert.EqualValues(t, 10, results[0].Decision.Remaining, "the bucket's whole burst is still there")
}
