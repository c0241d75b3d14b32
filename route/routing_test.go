package route_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

var three = []string{"n1", "n2", "n3"}

// Whichever member a check reaches, the key's owner decides it, and only
// the owner holds its state.
func TestEveryCheckIsDecidedByItsOwner(t *testing.T) {
	c := newCluster(t, three)
	for _, owner := range three {
		key := c.key(t, owner, "k")
		req := logReq(key, 10, time.Minute)
		for i, via := range three {
			res := c.members[via].svc.Check(bg, req)
			require.NoError(t, res.Err)
			assert.Equal(t, owner, res.Owner, "checked via %s", via)
			assert.False(t, res.Degraded)
			assert.EqualValues(t, i, res.Decision.CurrentCount, "the owner counts every check, whichever member it reached")
		}
		for _, id := range three {
			want := int64(0)
			if id == owner {
				want = 3
			}
			assert.Equal(t, want, c.members[id].held(t, c.clock.Now(), req), "%s's store, key of %s", id, owner)
		}
	}
}

// Concurrent checks of one key through every member admit exactly the
// limit: one owner decides them all, one at a time.
func TestLimitIsExactThroughEveryMember(t *testing.T) {
	c := newCluster(t, three)
	req := logReq(c.key(t, "n2", "hot"), 50, time.Minute)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, via := range three {
		for range 4 {
			wg.Go(func() {
				for range 25 {
					res := c.members[via].svc.Check(bg, req)
					if assert.NoError(t, res.Err) && res.Decision.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	assert.EqualValues(t, 50, admitted.Load(), "300 checks of a limit of 50")
}

// A batch is split by owner: the local part decided here at one arrival
// time, one call to each other owner, the answers in the request's order.
func TestBatchGoesAsOneCallPerOwner(t *testing.T) {
	c := newCluster(t, three)
	n1 := c.members["n1"]
	reqs := []limiter.Request{
		logReq(c.key(t, "n2", "a"), 5, time.Minute),
		logReq(c.key(t, "n1", "b"), 5, time.Minute),
		logReq(c.key(t, "n3", "c"), 5, time.Minute),
		logReq(c.key(t, "n2", "d"), 5, time.Minute),
		{Key: c.key(t, "n3", "bad"), Limit: 0, Window: time.Minute, Hits: 1}, // refused here, never sent
		logReq(c.key(t, "n1", "e"), 5, time.Minute),
	}
	results, err := n1.svc.CheckBatch(bg, reqs)
	require.NoError(t, err)
	require.Len(t, results, len(reqs))
	for i, want := range []string{"n2", "n1", "n3", "n2", "", "n1"} {
		if want == "" {
			assert.Equal(t, "limit", peer.FieldOf(results[i].Err), "item %d", i)
			continue
		}
		require.NoError(t, results[i].Err, "item %d", i)
		assert.Equal(t, want, results[i].Owner, "item %d", i)
	}
	assert.Equal(t, 1, c.net.Calls("n1", "n2"), "two checks for n2, one call")
	assert.Equal(t, 1, c.net.Calls("n1", "n3"))

	_, err = n1.svc.CheckBatch(bg, make([]limiter.Request, route.DefaultConfig().MaxBatch+1))
	assert.ErrorIs(t, err, route.ErrBatchTooLarge)
	assert.Equal(t, peer.ResourceExhausted, peer.CodeOf(err))
}

// A forwarded check is decided where it lands, whatever that member's
// ring says: it is never forwarded again (while gossip converges, the
// receiver may not think itself the owner).
func TestForwardedChecksAreNeverForwardedAgain(t *testing.T) {
	c := newCluster(t, three)
	key := c.key(t, "n3", "k")
	results := c.members["n2"].svc.Peer.HandleForward(bg, "n1", []limiter.Request{logReq(key, 5, time.Minute)})
	require.NoError(t, results[0].Err)
	assert.Equal(t, "n2", results[0].Owner)
	assert.Zero(t, c.net.Calls("n2", "n3"))
	assert.EqualValues(t, 1, c.members["n2"].held(t, c.clock.Now(), logReq(key, 5, time.Minute)))
}

// A bad request is refused where it arrived, naming the field, and never
// sent; one the owner refuses (the members' caps differ) comes back with
// its field, and both members say so in their logs, under one request id.
func TestInvalidChecksNameTheirField(t *testing.T) {
	c := newCluster(t, three, func(o *clusterOpts) {
		o.limiter = func(id string, l *limiter.Config) {
			if id == "n2" {
				l.MaxKeyBytes = 8 // a misconfigured owner
			}
		}
	})
	n1 := c.members["n1"]
	res := n1.svc.Check(bg, limiter.Request{Key: c.key(t, "n2", "k"), Limit: 5, Window: -time.Second, Hits: 1})
	assert.Equal(t, "window_ms", peer.FieldOf(res.Err))
	assert.Zero(t, c.net.Calls("n1", "n2"), "refused before the hop")

	long := c.key(t, "n2", "a-key-longer-than-eight-bytes")
	res = n1.svc.Check(peer.WithRequestID(bg, "client-1"), logReq(long, 5, time.Minute))
	assert.Equal(t, peer.InvalidArgument, peer.CodeOf(res.Err))
	assert.Equal(t, "key", peer.FieldOf(res.Err))
	sent, got := n1.logs.Find("the owner refused a forwarded check"), c.members["n2"].logs.Find("refused a forwarded check the sender accepted")
	require.Len(t, sent, 1)
	require.Len(t, got, 1)
	assert.Equal(t, "client-1", sent[0].Attrs["request_id"])
	assert.Equal(t, "client-1", got[0].Attrs["request_id"])
	assert.Equal(t, "n1", got[0].Attrs["origin"])
}

// checks_total counts every client check once, on the member it reached,
// by route; the owner counts what it decided for others apart.
func TestMetricsByRoute(t *testing.T) {
	c := newCluster(t, three)
	n1, n2 := c.members["n1"], c.members["n2"]
	mine, theirs := c.key(t, "n1", "a"), c.key(t, "n2", "b")
	for range 3 {
		n1.svc.Check(bg, counterReq(mine, 2, time.Minute))
	}
	for range 2 {
		n1.svc.Check(bg, logReq(theirs, 1, time.Minute))
	}
	n1.svc.Check(bg, limiter.Request{Key: theirs, Limit: 0, Window: time.Second, Hits: 1})

	checks := func(algo, route, outcome string) float64 {
		return metric(t, n1.reg, "peerlimit_checks_total", "algorithm", algo, "route", route, "outcome", outcome)
	}
	const ctr, log = "SLIDING_WINDOW_COUNTER", "SLIDING_WINDOW_LOG"
	assert.Equal(t, 2.0, checks(ctr, "local", "allowed"))
	assert.Equal(t, 1.0, checks(ctr, "local", "denied"))
	assert.Equal(t, 1.0, checks(log, "forwarded", "allowed"))
	assert.Equal(t, 1.0, checks(log, "forwarded", "denied"))
	assert.Equal(t, 1.0, checks(ctr, "forwarded", "error"))
	assert.Equal(t, 2.0, metric(t, n1.reg, "peerlimit_forwards_total", "result", "ok"))
	assert.Equal(t, 1.0, metric(t, n2.reg, "peerlimit_peer_checks_total", "algorithm", log, "outcome", "allowed"))
	assert.Equal(t, 1.0, metric(t, n2.reg, "peerlimit_peer_checks_total", "algorithm", log, "outcome", "denied"))
	assert.Zero(t, metric(t, n2.reg, "peerlimit_checks_total", "algorithm", log, "route", "local", "outcome", "allowed"))

	_, err := n1.svc.CheckBatch(bg, []limiter.Request{counterReq(mine, 9, time.Hour), counterReq(theirs, 9, time.Hour)})
	require.NoError(t, err)
	assert.Equal(t, 1.0, metric(t, n1.reg, "peerlimit_check_batch_size"), "one observation per batch")
}
