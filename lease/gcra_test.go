package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
)

// A GCRA bucket is never leased (Book.Leasable says why): the owner lends
// nothing, takes nothing from the bucket, and a holder never asks, however
// hot the key; the same limit as a counter is lent.
func TestAGCRABucketIsNeverLeased(t *testing.T) {
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	net := memnet.New(1, time.Second)
	t.Cleanup(net.Close)
	b, err := lease.New(lease.DefaultConfig(), lease.Deps{Store: store, Peers: net.Join("n1")})
	require.NoError(t, err)

	now := time.UnixMilli(1_750_000_000_000)
	req := limiter.Request{Key: "hot", Limit: 1000, Window: time.Second, Algorithm: limiter.GCRA, Hits: 1}
	assert.False(t, b.Leasable(req))
	assert.Zero(t, b.Lend(now, "n2", req, peer.LeaseWant{Hits: 100}, 999).ID, "no grant")
	assert.Zero(t, b.Lent())
	d, err := store.Check(now, limiter.Request{Key: "hot", Limit: 1000, Window: time.Second, Algorithm: limiter.GCRA})
	require.NoError(t, err)
	assert.Equal(t, int64(1000), d.Remaining, "nothing was taken from the bucket")
	for i := range 1000 {
		_, _, _, ask := b.Take(now.Add(time.Duration(i)*time.Microsecond), req, true)
		require.False(t, ask, "a holder never asks for a GCRA lease")
	}

	counter := req
	counter.Algorithm = limiter.SlidingWindowCounter
	assert.True(t, b.Leasable(counter))
}
