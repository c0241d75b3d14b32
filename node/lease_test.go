package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A hot key hammered through the two nodes that do not own it, over real
// gRPC: they get budget leases and admit most checks without a hop, and
// the key still admits exactly its limit, no more while leases are out,
// all of it once they are settled.
func TestLeasesOnRealNodesKeepAHotKeyExact(t *testing.T) {
	c := testcluster.New(t, 3, func(cfg *node.Config) { cfg.Lease.MinRate = 50 })
	key := keyOwnedBy(t, c.Node(0), "node-1", "hot")
	ctx := context.Background()
	const limit = 3000
	req := &pb.CheckRequest{Key: key, Limit: limit, WindowMs: hourish.Milliseconds(), Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}
	var allowed atomic.Int64
	hammer := func(n int) {
		var wg sync.WaitGroup
		for w := range 8 {
			via := apiClient(t, c.Node([]int{0, 2}[w%2]))
			wg.Go(func() {
				for range n {
					resp, err := via.Check(ctx, req)
					if !assert.NoError(t, err) {
						return
					}
					assert.False(t, resp.Degraded)
					if resp.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	hammer(250) // 2000 checks, all under the limit
	require.EqualValues(t, 2000, allowed.Load())
	leased := 0.0
	for _, i := range []int{0, 2} {
		leased += metrictest.Value(t, metrictest.Scrape("http://"+c.Node(i).HTTPAddr()+"/metrics"), "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_LOG", "route", "leased", "outcome", "allowed")
	}
	assert.Positive(t, leased, "the forwarding nodes admitted from leases")
	t.Logf("admitted from leases: %.0f of 2000", leased)

	hammer(250) // 2000 more: over the limit
	assert.LessOrEqual(t, allowed.Load(), int64(limit), "never over the limit while leases are out")
	zero := int64(0)
	c.Eventually(5*time.Second, func() (bool, string) {
		lent := metrictest.Value(t, metrictest.Scrape("http://"+c.Node(1).HTTPAddr()+"/metrics"), "peerlimit_leases_lent")
		resp, err := apiClient(t, c.Node(1)).Check(ctx, &pb.CheckRequest{Key: key, Limit: limit, WindowMs: hourish.Milliseconds(),
			Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Hits: &zero})
		require.NoError(t, err)
		return lent == 0 && resp.CurrentCount == allowed.Load(), fmt.Sprintf("%.0f leases out; the owner counts %d of %d admitted; %s",
			lent, resp.CurrentCount, allowed.Load(), leaseEvents(t, c))
	})
	hammer(100) // the rest of the limit, now that every lease is settled
	assert.EqualValues(t, limit, allowed.Load(), "exactly the limit once settled")
}

// leaseEvents sums, over c's nodes, the leases by event, their hits, and
// the log's allowed checks by route, for a failure's message: with every
// lease settled, lent − returned = leased, and the owner's count is
// forwarded + leased (local counts the probes, which take nothing).
func leaseEvents(t *testing.T, c *testcluster.Cluster) string {
	sums := map[string]float64{}
	for _, n := range c.Live() {
		scrape := metrictest.Scrape("http://" + n.HTTPAddr() + "/metrics")
		for _, ev := range []string{"asked", "received", "granted", "settled", "expired", "settle_failed"} {
			sums[ev] += metrictest.Value(t, scrape, "peerlimit_leases_total", "event", ev)
		}
	}
	for _, n := range c.Live() {
		scrape := metrictest.Scrape("http://" + n.HTTPAddr() + "/metrics")
		sums["lent"] += metrictest.Value(t, scrape, "peerlimit_lease_hits_total", "direction", "lent")
		sums["returned"] += metrictest.Value(t, scrape, "peerlimit_lease_hits_total", "direction", "returned")
		for _, r := range []string{"local", "forwarded", "fallback", "leased"} {
			sums["route "+r] += metrictest.Value(t, scrape, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_LOG", "route", r, "outcome", "allowed")
		}
	}
	return fmt.Sprintf("leases asked %.0f, received %.0f, granted %.0f, settled %.0f, expired %.0f, settlements failed %.0f; "+
		"hits lent %.0f, returned %.0f; allowed by route: local %.0f, forwarded %.0f, fallback %.0f, leased %.0f",
		sums["asked"], sums["received"], sums["granted"], sums["settled"], sums["expired"], sums["settle_failed"], sums["lent"], sums["returned"],
		sums["route local"], sums["route forwarded"], sums["route fallback"], sums["route leased"])
}
