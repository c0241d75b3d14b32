package route_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

func withFallback(p route.FallbackPolicy) func(*clusterOpts) {
	return func(o *clusterOpts) { o.route = func(_ string, c *route.Config) { c.Fallback = p } }
}

// With n1's link to n2 cut (n2 lives, n1's ring still names it), every
// check n1 receives for n2's keys waits for the call's deadline and is
// answered by the fallback policy, marked degraded and counted; checks of
// keys n1 owns, and n1's calls to n3, go on as before.
func TestFallbackAnswersWhenTheOwnerCannotBeAsked(t *testing.T) {
	for _, c := range []struct {
		policy route.FallbackPolicy
		// allowed says which of 5 checks of a limit of 3 the policy admits.
		allowed []bool
		// held is what n1's own store counts for the key afterwards.
		held int64
	}{
		{route.FallbackLocal, []bool{true, true, true, false, false}, 3},
		{route.FallbackAllow, []bool{true, true, true, true, true}, 0},
		{route.FallbackDeny, []bool{false, false, false, false, false}, 0},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cl := newCluster(t, three, withFallback(c.policy))
				n1 := cl.members["n1"]
				key := cl.key(t, "n2", "k")
				req := logReq(key, 3, time.Minute)
				cl.net.Cut("n1", "n2")

				start := time.Now()
				for i, want := range c.allowed {
					res := n1.svc.Check(bg, req)
					require.NoError(t, res.Err)
					assert.True(t, res.Degraded, "check %d", i)
					assert.Equal(t, "n1", res.Owner, "answered here")
					assert.Equal(t, want, res.Decision.Allowed, "check %d", i)
					assert.EqualValues(t, 3, res.Decision.Limit)
					if c.policy == route.FallbackDeny {
						assert.Equal(t, time.Second, res.Decision.RetryAfter, "fail closed, retry in a second")
					}
				}
				assert.Equal(t, 5*500*time.Millisecond, time.Since(start), "each waited for the call's deadline")
				assert.Equal(t, c.held, n1.held(t, cl.clock.Now(), req))
				assert.Zero(t, cl.members["n2"].held(t, cl.clock.Now(), req), "the owner never heard")
				assert.Equal(t, 5.0, metric(t, n1.reg, "peerlimit_owner_unreachable_total", "policy", c.policy.String()))
				assert.Equal(t, 5.0, metric(t, n1.reg, "peerlimit_forwards_total", "result", "failed"))
				// Answered at 0.5 s, 1 s, … 2.5 s: logged at most once a
				// second, so at 0.5, 1.5 and 2.5 s.
				warned := n1.logs.Find("owner unreachable; answering by fallback policy")
				require.Len(t, warned, 3, "once a second, not once per check")
				assert.Equal(t, "n2", warned[0].Attrs["owner"])
				assert.Equal(t, c.policy.String(), warned[0].Attrs["policy"])

				// The cut is one way and one link: n2 still reaches n1, n1
				// still reaches n3.
				assert.False(t, n1.svc.Check(bg, logReq(cl.key(t, "n3", "k"), 3, time.Minute)).Degraded)
				assert.Equal(t, "n1", cl.members["n2"].svc.Check(bg, logReq(cl.key(t, "n1", "k"), 3, time.Minute)).Owner)
			})
		})
	}
}

// A refused connection (the owner's process is gone, its port closed) is
// answered by the fallback at once, without waiting for a deadline.
func TestFallbackAnswersAtOnceWhenTheOwnerIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		c.net.Remove("n2")
		start := time.Now()
		res := c.members["n1"].svc.Check(bg, logReq(c.key(t, "n2", "k"), 3, time.Minute))
		require.NoError(t, res.Err)
		assert.True(t, res.Degraded)
		assert.Zero(t, time.Since(start))
	})
}

// A caller that gives up first is told so: its own deadline is not the
// owner's unavailability, so nothing is decided by the fallback or
// counted as unreachable.
func TestCallerWhoGivesUpIsToldSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		n1 := c.members["n1"]
		c.net.Cut("n1", "n2")
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond) // shorter than the call's 500 ms
		defer cancel()
		req := logReq(c.key(t, "n2", "k"), 3, time.Minute)
		res := n1.svc.Check(ctx, req)
		assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
		assert.Equal(t, peer.DeadlineExceeded, peer.CodeOf(res.Err))
		assert.Zero(t, n1.held(t, c.clock.Now(), req))
		assert.Zero(t, metric(t, n1.reg, "peerlimit_owner_unreachable_total", "policy", "local"))

		results, err := n1.svc.CheckBatch(ctx, []limiter.Request{req})
		require.NoError(t, err)
		assert.ErrorIs(t, results[0].Err, context.DeadlineExceeded)
	})
}

// Dropped replies are the owner's unavailability too: the check is
// answered by the fallback, while the owner counted it. Every check is
// answered, and each one is counted by the owner, by the fallback, or by
// both, never by neither (docs/design.md: what AP costs).
func TestDroppedRepliesAreAnsweredByTheFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		c.net.SetFaults("n1", "n2", memnet.Faults{DropReplies: 0.3})
		key := c.key(t, "n2", "k")
		req := logReq(key, 1000, time.Minute)
		degraded := 0
		for range 100 {
			res := c.members["n1"].svc.Check(bg, req)
			require.NoError(t, res.Err)
			if res.Degraded {
				degraded++
			}
		}
		owner, here := c.members["n2"].held(t, c.clock.Now(), req), c.members["n1"].held(t, c.clock.Now(), req)
		assert.EqualValues(t, 100, owner, "the owner acted on every check")
		assert.EqualValues(t, degraded, here, "the fallback counted each it answered")
		assert.Positive(t, degraded, "seed %d", c.net.Seed())
		assert.Less(t, degraded, 100)
	})
}

// Over MaxInflightForwards a check is refused at once, RESOURCE_EXHAUSTED
// naming the flag, and counted; a batch's items over the bound get their
// own errors; keys this member owns are still served; once the owner
// answers, the member recovers.
func TestInflightForwardsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three, func(o *clusterOpts) {
			o.timeout = time.Minute
			o.route = func(_ string, rc *route.Config) { rc.MaxInflightForwards = 3 }
		})
		n1 := c.members["n1"]
		slow := logReq(c.key(t, "n2", "slow"), 100, time.Minute)
		c.net.Pause("n2")
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { assert.NoError(t, n1.svc.Check(bg, slow).Err) })
		}
		synctest.Wait() // all three wait on the paused owner
		assert.Equal(t, 3, n1.svc.InflightForwards())

		res := n1.svc.Check(bg, logReq(c.key(t, "n2", "over"), 100, time.Minute))
		assert.ErrorIs(t, res.Err, route.ErrTooManyForwards)
		assert.Equal(t, peer.ResourceExhausted, peer.CodeOf(res.Err))
		assert.ErrorContains(t, res.Err, "--max-inflight-forwards")
		assert.NoError(t, n1.svc.Check(bg, logReq(c.key(t, "n1", "mine"), 100, time.Minute)).Err, "own keys wait on no one")

		results, err := n1.svc.CheckBatch(bg, []limiter.Request{
			logReq(c.key(t, "n1", "mine"), 100, time.Minute), logReq(c.key(t, "n3", "x"), 100, time.Minute), logReq(c.key(t, "n3", "y"), 100, time.Minute)})
		require.NoError(t, err)
		assert.NoError(t, results[0].Err)
		for _, r := range results[1:] {
			assert.ErrorIs(t, r.Err, route.ErrTooManyForwards)
		}
		assert.Equal(t, 3.0, metric(t, n1.reg, "peerlimit_forwards_total", "result", "refused"))
		warned := n1.logs.Find("too many forwarded checks in flight")
		require.NotEmpty(t, warned)
		assert.Equal(t, "3", warned[0].Attrs["max_inflight_forwards"])

		c.net.Resume("n2")
		wg.Wait()
		assert.Zero(t, n1.svc.InflightForwards())
		assert.False(t, n1.svc.Check(bg, slow).Degraded)
	})
}

// A paused owner: the caller gives up on it and answers by its fallback;
// the owner decides the check when it resumes. Both log it under the
// client's request id, and both count it: the over-admission a slow owner
// costs, documented in docs/design.md.
func TestSlowOwnerDecidesLateAndBothSayso(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		n1, n2 := c.members["n1"], c.members["n2"]
		req := logReq(c.key(t, "n2", "slow"), 5, time.Minute)
		c.net.Pause("n2")
		res := n1.svc.Check(peer.WithRequestID(bg, "slow-1"), req)
		require.NoError(t, res.Err)
		assert.True(t, res.Degraded, "answered by the fallback")
		sent := n1.logs.Find("owner unreachable")
		require.Len(t, sent, 1)
		assert.Equal(t, "slow-1", sent[0].Attrs["request_id"])

		c.net.Resume("n2")
		synctest.Wait()
		late := n2.logs.Find("after the caller stopped waiting")
		require.Len(t, late, 1)
		assert.Equal(t, "slow-1", late[0].Attrs["request_id"])
		assert.Equal(t, "1", late[0].Attrs["checks"])
		assert.Equal(t, "1", late[0].Attrs["undone"])
		assert.Zero(t, n2.held(t, c.clock.Now(), req), "the owner took its count back")
		assert.EqualValues(t, 1, n1.held(t, c.clock.Now(), req), "the fallback's is the one count: counted once")
	})
}

// An owner that judges a batch late (its sender's wait, measured from
// arrival by the owner's clock, has passed) takes its counts back and
// answers ErrNotCounted. A sender that is in fact still waiting (its
// clock ran slower) must not pass that on as an admission nobody counted:
// it answers by its fallback, which counts the check once.
func TestCheckTheOwnerTookBackIsAnsweredByTheFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		n1, n2 := c.members["n1"], c.members["n2"]
		req := logReq(c.key(t, "n2", "late"), 5, time.Minute)
		judgedLate := peer.WithSenderWait(bg, time.Now().Add(-time.Second), time.Millisecond)

		direct := n2.svc.Peer.HandleForward(judgedLate, "n1", []limiter.Request{req})
		require.ErrorIs(t, direct[0].Err, peer.ErrNotCounted)
		assert.True(t, peer.NotDecided(direct[0].Err))
		assert.Zero(t, n2.held(t, c.clock.Now(), req), "taken back")

		res := n1.svc.Check(judgedLate, req)
		require.NoError(t, res.Err)
		assert.True(t, res.Decision.Allowed)
		assert.True(t, res.Degraded, "answered by the fallback, and marked so")
		assert.Zero(t, n2.held(t, c.clock.Now(), req), "the owner took its count back")
		assert.EqualValues(t, 1, n1.held(t, c.clock.Now(), req), "the fallback's is the one count: never zero")
	})
}
