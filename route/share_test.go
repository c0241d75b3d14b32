package route_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/route"
)

// With FallbackShare, a check whose owner cannot be reached is decided
// here against this node's share of its limit: limit ÷ the members it
// knows. The sides of a partition together keep near one limit.
func TestShareFallbackHoldsAnUnreachableOwnersKeyToAShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three, withFallback(route.FallbackShare))
		n1 := c.members["n1"]
		req := logReq(c.key(t, "n2", "k"), 9, time.Minute)
		c.net.Cut("n1", "n2")
		allowed := 0
		for range 5 {
			res := n1.svc.Check(bg, req)
			require.NoError(t, res.Err)
			assert.True(t, res.Degraded)
			assert.EqualValues(t, 3, res.Decision.Limit, "the limit it was held to: 9 ÷ 3 members")
			if res.Decision.Allowed {
				allowed++
			}
		}
		assert.Equal(t, 3, allowed)
		assert.Equal(t, 5.0, metric(t, n1.reg, "peerlimit_owner_unreachable_total", "policy", "share"))
	})
}

// While members have failed (live < known), FallbackShare holds every key
// a node decides to live ÷ known of its limit, its own keys too: from
// inside, a crash and a partition look the same. A request for more than
// the whole share is refused and counts nothing.
func TestShareHoldsEveryKeyWhileMembersHaveFailed(t *testing.T) {
	c := newCluster(t, three, withFallback(route.FallbackShare), func(o *clusterOpts) {
		o.share = func() (int, int) { return 2, 3 }
	})
	n1 := c.members["n1"]
	req := counterReq(c.key(t, "n1", "own"), 9, time.Hour)
	allowed := 0
	for range 8 {
		res := n1.svc.Check(bg, req)
		require.NoError(t, res.Err)
		assert.True(t, res.Degraded, "held to a share: not the owner's whole limit")
		assert.EqualValues(t, 6, res.Decision.Limit, "9 × 2 live ÷ 3 known")
		if res.Decision.Allowed {
			allowed++
		}
	}
	assert.Equal(t, 6, allowed)

	big := counterReq(c.key(t, "n1", "big"), 9, time.Hour)
	big.Hits = 7
	res := n1.svc.Check(bg, big)
	require.NoError(t, res.Err)
	assert.False(t, res.Decision.Allowed, "7 hits can never fit a share of 6")
	big.Hits = 0
	assert.Zero(t, n1.held(t, c.clock.Now(), big), "and counted nothing")
}

// A GCRA limit's explicit burst is held to the same share as its rate:
// a burst given equal to the limit admits what the limit's default burst
// does (6 of 9 with 2 of 3 members live), not the whole burst on each
// side, and a burst above the limit admits its share, whose hits may
// exceed the shared limit's.
func TestShareHoldsAGCRABurstToItsShare(t *testing.T) {
	c := newCluster(t, three, withFallback(route.FallbackShare), func(o *clusterOpts) {
		o.share = func() (int, int) { return 2, 3 }
	})
	n1 := c.members["n1"]
	for _, burst := range []int64{0, 9} {
		req := limiter.Request{Key: c.key(t, "n1", fmt.Sprint("burst", burst)), Limit: 9, Window: time.Hour,
			Algorithm: limiter.GCRA, Burst: burst, Hits: 1}
		allowed := 0
		for range 12 {
			res := n1.svc.Check(bg, req)
			require.NoError(t, res.Err)
			if res.Decision.Allowed {
				allowed++
			}
		}
		assert.Equal(t, 6, allowed, "burst %d: 9 × 2 live ÷ 3 known at once", burst)
	}

	big := limiter.Request{Key: c.key(t, "n1", "big"), Limit: 9, Window: time.Hour, Algorithm: limiter.GCRA, Burst: 30, Hits: 20}
	res := n1.svc.Check(bg, big)
	require.NoError(t, res.Err)
	assert.True(t, res.Decision.Allowed, "20 hits fit a burst's share of 20")
	res = n1.svc.Check(bg, big)
	require.NoError(t, res.Err)
	assert.False(t, res.Decision.Allowed, "and no more")
}
