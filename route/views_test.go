package route_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

// contesting is a view in which this member decides every key it owns on
// its own evidence alone (route.Cluster.Contested).
type contesting struct{ route.Cluster }

func (contesting) Contested(string) bool { return true }

// n2's ring is one in which it owns nothing (n1 and n3 only), while
// n1's says n2 owns the key. n2 decides the check n1 forwards, as it must (a forwarded check is never forwarded
// again), and says that it was decided where the views disagree.
func TestAnswerDecidedWhereTheViewsDisagreeIsDegraded(t *testing.T) {
	c := newCluster(t, three, func(o *clusterOpts) {
		o.view = func(id string, base route.Cluster) route.Cluster {
			if id == "n2" {
				return route.FixedCluster(testring.New(t, "n1", "n3"))
			}
			return base
		}
	})
	n1 := c.members["n1"]
	res := n1.svc.Check(bg, logReq(c.key(t, "n2", "split"), 5, time.Minute))
	require.NoError(t, res.Err)
	assert.Equal(t, "n2", res.Owner, "decided where n1 sent it")
	assert.True(t, res.Degraded, "n2's ring gives the key to another member")

	agreed := n1.svc.Check(bg, logReq(c.key(t, "n3", "agreed"), 5, time.Minute))
	require.NoError(t, agreed.Err)
	assert.False(t, agreed.Degraded, "n1 and n3 agree on n3's keys")
}

// A member deciding partitions it took over from a member nobody else
// confirmed gone answers their keys Degraded, wherever the check arrived.
func TestContestedKeysAreAnsweredDegraded(t *testing.T) {
	c := newCluster(t, three, func(o *clusterOpts) {
		o.view = func(id string, base route.Cluster) route.Cluster {
			if id == "n1" {
				return contesting{base}
			}
			return base
		}
	})
	key := c.key(t, "n1", "contested")
	for _, via := range three {
		res := c.members[via].svc.Check(bg, logReq(key, 5, time.Minute))
		require.NoError(t, res.Err)
		assert.Equal(t, "n1", res.Owner)
		assert.True(t, res.Degraded, "checked through %s", via)
	}
	res := c.members["n2"].svc.Check(bg, logReq(c.key(t, "n2", "mine"), 5, time.Minute))
	require.NoError(t, res.Err)
	assert.False(t, res.Degraded)
}

// A relay whose ring gives the key to the very member that asked (its
// view is older) decides it from what it holds, and says so.
func TestRelayDecidedForItsOwnerIsDegraded(t *testing.T) {
	c := newCluster(t, three)
	n2 := c.members["n2"]
	req := logReq(c.key(t, "n1", "asked"), 5, time.Minute)
	res := n2.svc.Peer.HandleRelay(bg, "n1", []limiter.Request{req})
	require.NoError(t, res[0].Err)
	assert.Equal(t, "n2", res[0].Owner)
	assert.True(t, res[0].Degraded, "n2's ring gives the key to n1, which asked")
}

// healing is n1's view at a heal: a partition has just come to n1 (the
// members were out of its ring) and its state is on its way (Settling);
// while a check waits for it, the members come back and the ring gives
// the partition to its owner again.
type healing struct {
	before, after route.Cluster
	moved         atomic.Bool
	waiting       chan struct{} // closed when a check waits on settled
	settled       chan struct{}
	once          sync.Once
}

func (h *healing) now() route.Cluster {
	if h.moved.Load() {
		return h.after
	}
	return h.before
}
func (h *healing) Owner(key string) peer.Route        { return h.now().Owner(key) }
func (h *healing) Heir(key string) (peer.Route, bool) { return h.now().Heir(key) }
func (h *healing) Members() []peer.Route              { return h.now().Members() }
func (h *healing) Share() (live, known int)           { return h.now().Share() }
func (h *healing) Contested(key string) bool          { return h.now().Contested(key) }
func (h *healing) HandoffDone(string, []int)          {}
func (h *healing) Settling(key string) <-chan struct{} {
	if h.moved.Load() {
		return nil
	}
	h.once.Do(func() { close(h.waiting) })
	return h.settled
}

// A check that waited for a partition to settle asks for its owner again:
// at a heal, the ring that gave the partition to this node while the
// others were out gives it back a moment later, and a check decided here
// after that, undegraded, made two deciders (jepsen-lite partition-share,
// 11 of 10 admitted in a window after the heal, none degraded). It goes
// to the owner instead, batched or not.
func TestACheckThatWaitedAsksForTheOwnerAgain(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "Check", true: "CheckBatch"}[batch], func(t *testing.T) {
			h := &healing{waiting: make(chan struct{}), settled: make(chan struct{})}
			c := newCluster(t, three, func(o *clusterOpts) {
				o.view = func(id string, base route.Cluster) route.Cluster {
					if id != "n1" {
						return base
					}
					h.before, h.after = route.FixedCluster(testring.New(t, "n1", "n3")), base
					return h
				}
			})
			var key string
			for i := range 10_000 { // n2's in the whole ring, n1's without n2
				if k := fmt.Sprintf("heal:%d", i); c.ring.Owner(k).ID == "n2" && h.before.Owner(k).ID == "n1" {
					key = k
					break
				}
			}
			require.NotEmpty(t, key)
			req := logReq(key, 5, time.Minute)
			done := make(chan peer.Result, 1)
			go func() {
				if batch {
					res, err := c.members["n1"].svc.CheckBatch(bg, []limiter.Request{req})
					require.NoError(t, err)
					done <- res[0]
					return
				}
				done <- c.members["n1"].svc.Check(bg, req)
			}()
			<-h.waiting // the check waits for the partition n1 owns
			h.moved.Store(true)
			close(h.settled)
			res := <-done
			require.NoError(t, res.Err)
			assert.Equal(t, "n2", res.Owner, "decided by the owner the ring names now")
			assert.False(t, res.Degraded)
			assert.EqualValues(t, 1, c.members["n2"].held(t, c.clock.Now(), req))
			assert.EqualValues(t, 0, c.members["n1"].held(t, c.clock.Now(), req), "n1 decided nothing")
		})
	}
}
