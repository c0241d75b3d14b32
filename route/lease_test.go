package route_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// withLeases turns budget leases on, as a node has them by default: at the
// harness's clock, which moves only when a test moves it, a member asks
// for a lease at its askAt-th forward of a key.
func withLeases(o *clusterOpts) { o.leases = true }

// askAt is the forward of a key, within 100 ms, at which a member asks
// for a lease with the default settings: two checks after its first, a
// rate of 20/s, for a lease of 8 hits (lease.Config.MinHits) and 400 ms.
const askAt = 3

// settleAll runs every member's lease loop once.
func (c *cluster) settleAll() {
	for _, m := range c.members {
		m.leases.SettleWithOwners(bg, c.clock.Now(), false)
		m.leases.Expire(c.clock.Now())
	}
}

// hammer sends n checks of req through the members vias, in random order,
// moving the clock 1 ms every 10 checks and running the lease loops every
// 50: a hot key from several nodes. It returns how many were allowed.
func (c *cluster) hammer(t *testing.T, rng *rand.Rand, vias []string, req limiter.Request, n int) int {
	t.Helper()
	allowed := 0
	for i := range n {
		res := c.members[vias[rng.IntN(len(vias))]].svc.Check(bg, req)
		require.NoError(t, res.Err)
		assert.False(t, res.Degraded)
		if res.Decision.Allowed {
			allowed++
		}
		if i%10 == 9 {
			c.clock.Advance(time.Millisecond)
		}
		if i%50 == 49 {
			c.settleAll()
		}
	}
	return allowed
}

// A hot key checked through the two members that do not own it: they get
// leases, so few checks take a hop, and the limit stays exact: while
// leases are out the key admits no more than its limit, and once they are
// settled exactly its limit, for both algorithms.
func TestLeasesSpreadAHotKeyAndKeepItsLimitExact(t *testing.T) {
	for _, req := range []limiter.Request{counterReq("", 1000, time.Hour), logReq("", 1000, time.Hour)} {
		t.Run(req.Algorithm.String(), func(t *testing.T) {
			seed := rand.Uint64()
			rng := rand.New(rand.NewPCG(seed, 3))
			c := newCluster(t, three, withLeases)
			req.Key = c.key(t, "n2", "hot")
			vias := []string{"n1", "n3"}
			allowed := c.hammer(t, rng, vias, req, 900)
			require.Equal(t, 900, allowed, "seed %d: under the limit every check passes", seed)
			leased := metric(t, c.members["n1"].reg, "peerlimit_checks_total", "algorithm", req.Algorithm.String(), "route", "leased", "outcome", "allowed") +
				metric(t, c.members["n3"].reg, "peerlimit_checks_total", "algorithm", req.Algorithm.String(), "route", "leased", "outcome", "allowed")
			assert.Greater(t, leased, 0.9*900, "seed %d: all but the first checks of each lease were admitted without a hop", seed)

			allowed += c.hammer(t, rng, vias, req, 2000)
			assert.LessOrEqual(t, allowed, 1000, "seed %d: never over the limit", seed)
			c.clock.Advance(time.Second) // every lease ends; the loops settle them
			c.settleAll()
			c.settleAll()
			allowed += c.hammer(t, rng, vias, req, 500)
			assert.Equal(t, 1000, allowed, "seed %d: once settled, exactly the limit", seed)
			assert.EqualValues(t, 1000, c.members["n2"].held(t, c.clock.Now(), req), "seed %d: the owner's count is every admission", seed)
			assert.Zero(t, c.members["n2"].leases.Lent(), "seed %d", seed)
		})
	}
}

// A warm key, 5 checks/s through each of the two members that do not own
// it: each gets leases of about 8 hits over 1.6 s, so most checks take no
// hop, and the limit stays exact: never over it while leases are out,
// exactly it once they are settled, for both algorithms.
func TestWarmKeyLeasesFromTwoNodesKeepItsLimitExact(t *testing.T) {
	for _, req := range []limiter.Request{counterReq("", 60, time.Hour), logReq("", 60, time.Hour)} {
		t.Run(req.Algorithm.String(), func(t *testing.T) {
			c := newCluster(t, three, withLeases)
			req.Key = c.key(t, "n2", "warm")
			warm := func(n int) int { // n checks, alternately through n1 and n3, 100 ms apart
				allowed := 0
				for i := range n {
					res := c.members[[]string{"n1", "n3"}[i%2]].svc.Check(bg, req)
					require.NoError(t, res.Err)
					assert.False(t, res.Degraded)
					if res.Decision.Allowed {
						allowed++
					}
					c.clock.Advance(100 * time.Millisecond)
					c.settleAll()
				}
				return allowed
			}
			allowed := warm(50)
			require.Equal(t, 50, allowed, "under the limit every check passes")
			leased := metric(t, c.members["n1"].reg, "peerlimit_checks_total", "algorithm", req.Algorithm.String(), "route", "leased", "outcome", "allowed") +
				metric(t, c.members["n3"].reg, "peerlimit_checks_total", "algorithm", req.Algorithm.String(), "route", "leased", "outcome", "allowed")
			assert.Greater(t, leased, 0.6*50, "most checks admitted without a hop")
			assert.Positive(t, metric(t, c.members["n2"].reg, "peerlimit_leases_total", "event", "granted"))

			allowed += warm(100)
			assert.LessOrEqual(t, allowed, 60, "never over the limit")
			c.clock.Advance(10 * time.Second) // every lease ends; the loops settle them
			c.settleAll()
			c.settleAll()
			allowed += warm(20)
			assert.Equal(t, 60, allowed, "once settled, exactly the limit")
			assert.EqualValues(t, 60, c.members["n2"].held(t, c.clock.Now(), req), "the owner's count is every admission")
			assert.Zero(t, c.members["n2"].leases.Lent())
		})
	}
}

// Settling a log lease moves the hits the owner took at the grant to when
// the holder admitted them: the owner's log is then what it would have
// been without the lease.
func TestSettlingALogLeaseMovesItsHitsToTheirTimes(t *testing.T) {
	c := newCluster(t, three, withLeases)
	n1, n2 := c.members["n1"], c.members["n2"]
	req := logReq(c.key(t, "n2", "hot"), 100, time.Minute)
	for range askAt { // forwarded; the last asks for a lease
		require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
	}
	granted := c.clock.Now()
	require.Equal(t, 1, n1.leases.Held())
	lent := metric(t, n2.reg, "peerlimit_lease_hits_total", "direction", "lent")
	require.Positive(t, lent)
	assert.EqualValues(t, askAt+lent, n2.held(t, c.clock.Now(), req), "the lease's hits are taken at once")

	for range 3 { // admitted from the lease, 40 ms apart
		c.clock.Advance(40 * time.Millisecond)
		res := n1.svc.Check(bg, req)
		require.True(t, res.Decision.Allowed)
		assert.Equal(t, "n2", res.Owner)
	}
	c.clock.Advance(400 * time.Millisecond) // the lease has ended
	c.settleAll()
	assert.EqualValues(t, 1, metric(t, n2.reg, "peerlimit_leases_total", "event", "settled"))
	assert.EqualValues(t, lent-3, metric(t, n2.reg, "peerlimit_lease_hits_total", "direction", "returned"))
	views, err := n2.store.Admin().Inspect(c.clock.Now(), req.Key, 0, 0)
	require.NoError(t, err)
	require.Len(t, views, 1)
	require.Len(t, views[0].Entries, askAt+3)
	assert.Equal(t, []time.Time{granted.Add(40 * time.Millisecond), granted.Add(80 * time.Millisecond), granted.Add(120 * time.Millisecond)},
		views[0].Entries[askAt:], "the leased hits at the times they were admitted")
}

// A settlement that reaches the owner late (its holder's machine stalled,
// the call was slow) is still applied: the owner waits well past the
// holder's schedule before counting a lease as all used, so a loaded but
// healthy cluster stays exact. With one lease duration of grace, a
// settlement 400 ms late found its lease expired and its unused hits
// stayed taken (TestLeasesOnRealNodesKeepAHotKeyExact, under CI's load).
func TestALateSettlementIsStillApplied(t *testing.T) {
	for _, req := range []limiter.Request{counterReq("", 100, time.Hour), logReq("", 100, time.Hour)} {
		t.Run(req.Algorithm.String(), func(t *testing.T) {
			c := newCluster(t, three, withLeases)
			n1, n2 := c.members["n1"], c.members["n2"]
			req.Key = c.key(t, "n2", "hot")
			for range askAt {
				require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
			}
			require.Equal(t, 1, n1.leases.Held())
			lent := int64(metric(t, n2.reg, "peerlimit_lease_hits_total", "direction", "lent"))
			for range 5 {
				require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
			}
			c.clock.Advance(1050 * time.Millisecond) // the 400 ms lease ended 650 ms ago
			n2.leases.Expire(c.clock.Now())          // the owner's loop runs before the holder's settlement arrives
			n1.leases.SettleWithOwners(bg, c.clock.Now(), false)
			assert.EqualValues(t, 1, metric(t, n2.reg, "peerlimit_leases_total", "event", "settled"))
			assert.Zero(t, metric(t, n2.reg, "peerlimit_leases_total", "event", "expired"))
			assert.EqualValues(t, lent-5, metric(t, n2.reg, "peerlimit_lease_hits_total", "direction", "returned"))
			assert.EqualValues(t, askAt+5, n2.held(t, c.clock.Now(), req), "the owner counts what was admitted, no more")
		})
	}
}

// A lease is lent at the time the owner's store put its hits, not the
// owner's clock when it asked the store: a check that read a later clock
// may take the key's lock first, and the log then puts the lease's
// placeholders at that check's time. Settled against the clock's time,
// they were not found, and the unused ones stayed counted: under CI's
// load, "the owner counts 3000 of 2930 admitted" with every lease settled
// and their hits' books balanced.
func TestALeaseIsTakenBackWhereTheStorePutIt(t *testing.T) {
	c := newCluster(t, three, withLeases)
	n1, n2 := c.members["n1"], c.members["n2"]
	req := logReq(c.key(t, "n2", "hot"), 100, time.Hour)
	for range askAt - 1 {
		require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
	}
	// A check stamped 5 ms later got the lock first.
	_, err := n2.store.Check(c.clock.Now().Add(5*time.Millisecond), req)
	require.NoError(t, err)
	require.True(t, n1.svc.Check(bg, req).Decision.Allowed) // the askAt-th forward asks for a lease
	require.Equal(t, 1, n1.leases.Held())
	for range 3 {
		require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
	}
	c.clock.Advance(time.Second)
	c.settleAll()
	require.EqualValues(t, 1, metric(t, n2.reg, "peerlimit_leases_total", "event", "settled"))
	assert.EqualValues(t, askAt+1+3, n2.held(t, c.clock.Now(), req), "askAt forwarded, the later check, 3 from the lease: no placeholder left")
}

// A lease whose holder never settles (it crashed, or was cut off) counts
// as all used, at its last moment: the owner admits less meanwhile,
// never more.
func TestALostLeaseCostsUnderAdmissionOnly(t *testing.T) {
	for _, req := range []limiter.Request{counterReq("", 100, time.Hour), logReq("", 100, time.Hour)} {
		t.Run(req.Algorithm.String(), func(t *testing.T) {
			c := newCluster(t, three, withLeases)
			n1, n2, n3 := c.members["n1"], c.members["n2"], c.members["n3"]
			req.Key = c.key(t, "n2", "hot")
			for range askAt {
				require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
			}
			require.Equal(t, 1, n1.leases.Held())
			lent := int64(metric(t, n2.reg, "peerlimit_lease_hits_total", "direction", "lent"))
			used := int64(0)
			for range 5 {
				used++
				require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
			}
			c.net.Cut("n1", "n2")            // n1 is gone for the owner: its settlement never arrives
			c.clock.Advance(5 * time.Second) // past its end (400 ms) and the owner's grace for a settlement (10 × 400 ms)
			c.settleAll()
			assert.EqualValues(t, 1, metric(t, n2.reg, "peerlimit_leases_total", "event", "expired"))
			assert.EqualValues(t, 1, metric(t, n1.reg, "peerlimit_leases_total", "event", "settle_failed"))
			assert.Zero(t, n2.leases.Lent())
			admitted := askAt + used
			// Everyone else gets what the lost lease leaves: the unused hits
			// stay taken.
			more := 0
			for range 200 {
				if n3.svc.Check(bg, req).Decision.Allowed {
					more++
				}
			}
			assert.EqualValues(t, 100-askAt-lent, more, "the lost lease's %d unused hits stay taken", lent-used)
			assert.LessOrEqual(t, admitted+int64(more), int64(100))
		})
	}
}

// A counter's lease ends with the owner's fixed window: its hits cannot
// be counted in one window and admitted in the next. Too near the end of
// a window, no lease is lent.
func TestCounterLeasesEndWithTheirWindow(t *testing.T) {
	c := newCluster(t, three, withLeases)
	n1, n2 := c.members["n1"], c.members["n2"]
	req := counterReq(c.key(t, "n2", "hot"), 1000, time.Second) // windows start at whole seconds (t0)
	c.clock.Advance(850 * time.Millisecond)                     // 150 ms before the end: a 149 ms lease
	for range askAt {
		require.True(t, n1.svc.Check(bg, req).Decision.Allowed)
	}
	require.Equal(t, 1, n1.leases.Held())
	c.clock.Advance(148 * time.Millisecond)
	res := n1.svc.Check(bg, req)
	require.True(t, res.Decision.Allowed)
	assert.EqualValues(t, 1, metric(t, n1.reg, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_COUNTER", "route", "leased", "outcome", "allowed"),
		"the lease's last millisecond")
	c.clock.Advance(2 * time.Millisecond) // the next window: the lease is over
	n1.svc.Check(bg, req)
	assert.EqualValues(t, 1, metric(t, n1.reg, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_COUNTER", "route", "leased", "outcome", "allowed"))

	c.clock.Advance(950 * time.Millisecond) // 50 ms before the next end: under a quarter of a lease
	before := metric(t, n2.reg, "peerlimit_leases_total", "event", "granted")
	c.settleAll()
	for range 40 {
		n1.svc.Check(bg, req)
	}
	assert.Equal(t, before, metric(t, n2.reg, "peerlimit_leases_total", "event", "granted"), "no lease this near a window's end")
}

// What a holder reports is clamped to what was lent, and only the holder
// may settle its lease: a member cannot make the owner count less than
// was admitted.
func TestSettlementsCannotUndercount(t *testing.T) {
	c := newCluster(t, three, withLeases)
	n1, n2, n3 := c.members["n1"], c.members["n2"], c.members["n3"]
	req := counterReq(c.key(t, "n2", "hot"), 1000, time.Hour)
	for range askAt {
		n1.svc.Check(bg, req)
	}
	before := n2.held(t, c.clock.Now(), req)
	require.Positive(t, before-askAt)
	assert.Zero(t, n2.svc.Peer.HandleSettle(bg, "n3", []peer.LeaseUse{{ID: 1, Used: 0}}), "not n3's lease")
	_ = n3
	assert.Equal(t, 1, n2.svc.Peer.HandleSettle(bg, "n1", []peer.LeaseUse{{ID: 1, Used: -5}}))
	assert.EqualValues(t, askAt, n2.held(t, c.clock.Now(), req), "a negative use is none: every lent hit returns")
	assert.Zero(t, n2.svc.Peer.HandleSettle(bg, "n1", []peer.LeaseUse{{ID: 1, Used: 0}}), "settled once")
}

// A hot key at its limit gets no lease; its forwarding node then stops
// asking for as long as the lease it asked for, so the key's checks stay
// plain forwards (batched on the peer stream) instead of one Lease call
// each.
func TestAKeyThatGetsNoLeaseIsNotAskedForAgainAtOnce(t *testing.T) {
	c := newCluster(t, three, withLeases)
	n1 := c.members["n1"]
	req := counterReq(c.key(t, "n2", "hot"), 16, time.Hour) // the smallest limit leased (maxLeaseShare)
	full := req
	full.Hits = req.Limit
	require.True(t, c.members["n2"].svc.Check(bg, full).Decision.Allowed, "the key at its limit on its owner")
	for range 100 {
		n1.svc.Check(bg, req)
	}
	asked := metric(t, n1.reg, "peerlimit_leases_total", "event", "asked")
	assert.EqualValues(t, 1, asked, "asked once, at the askAt-th forward, when the key was already at its limit")
	c.clock.Advance(400 * time.Millisecond) // the lease asked for: 8 hits at 20/s
	for range 100 {
		n1.svc.Check(bg, req)
	}
	assert.EqualValues(t, 2, metric(t, n1.reg, "peerlimit_leases_total", "event", "asked"), "once more that lease's duration later")
	assert.Zero(t, metric(t, n1.reg, "peerlimit_leases_total", "event", "received"))
}
