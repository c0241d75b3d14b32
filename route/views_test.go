package route_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
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
	res := n2.svc.HandleRelay(bg, "n1", []limiter.Request{req})
	require.NoError(t, res[0].Err)
	assert.Equal(t, "n2", res[0].Owner)
	assert.True(t, res[0].Degraded, "n2's ring gives the key to n1, which asked")
}
