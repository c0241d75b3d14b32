package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A bucket and a concurrency limit, each asked through the nodes in turn.
var (
	bucket = func(key string, hits int64) *pb.CheckRequest {
		burst := int64(10)
		return &pb.CheckRequest{Key: key, Limit: 10, WindowMs: time.Hour.Milliseconds(), Algorithm: pb.Algorithm_GCRA, Burst: &burst, Hits: &hits}
	}
	slot = func(key string) *pb.CheckRequest {
		return &pb.CheckRequest{Key: key, Limit: 3, WindowMs: time.Hour.Milliseconds(), Algorithm: pb.Algorithm_CONCURRENCY, Op: pb.Op_ACQUIRE}
	}
)

// A crash of an owner loses neither a bucket's level nor a slot: its
// heirs continue from the replicas, with every bucket as full and every
// slot held, and a slot taken before the crash is freed on the heir by its
// token: authentic, as the members share a cluster secret (without one the
// heir frees nothing before the slot's window ends).
func TestKillKeepsBucketsAndSlotsThroughTheReplicas(t *testing.T) {
	c := testcluster.New(t, 3, func(cfg *node.Config) { cfg.Security.ClusterSecrets = [][]byte{[]byte("cluster-secret-0123456789")} })
	ctx := context.Background()
	keys := manyKeys(60)
	tokens := make(map[string][]string)
	for i, k := range keys {
		cl := apiClient(t, c.Live()[i%3])
		if i%2 == 0 {
			resp, err := cl.Check(ctx, bucket(k, 7))
			require.NoError(t, err)
			require.True(t, resp.Allowed)
			continue
		}
		for range 2 {
			resp, err := cl.Check(ctx, slot(k))
			require.NoError(t, err)
			require.True(t, resp.Allowed)
			tokens[k] = append(tokens[k], resp.Reservation)
		}
	}
	victim := c.Node(2)
	st := victim.Store().Stats()
	require.Positive(t, st.GCRAKeys, "the victim owns buckets")
	require.Positive(t, st.ConcurrencyKeys, "the victim owns slots")
	waitReplicated(t, c)

	c.Kill(2)
	c.WaitConverged()
	cl := apiClient(t, c.Node(0))
	c.Eventually(10*time.Second, func() (bool, string) {
		for i, k := range keys {
			req := bucket(k, 0)
			want := int64(7) // a bucket of 10 per hour drains 7 hits in 42 minutes: still 7 here
			if i%2 == 1 {
				req, want = slot(k), 2
				req.Op, req.Hits = pb.Op_CHECK, new(int64)
			}
			resp, err := cl.Check(ctx, req)
			if err != nil {
				return false, err.Error()
			}
			require.LessOrEqual(t, resp.CurrentCount, want, "key %s counted twice", k)
			if resp.CurrentCount != want || resp.Degraded {
				return false, fmt.Sprintf("key %s: count %d (owner %s, degraded %v), want %d", k, resp.CurrentCount, resp.Owner, resp.Degraded, want)
			}
		}
		return true, ""
	})
	for i, k := range keys {
		if i%2 == 0 {
			resp, err := cl.Check(ctx, bucket(k, 4))
			require.NoError(t, err)
			assert.False(t, resp.Allowed, "key %s: 7 + 4 > the burst of 10", k)
			continue
		}
		resp, err := cl.Check(ctx, slot(k))
		require.NoError(t, err)
		require.True(t, resp.Allowed, "key %s: the third slot", k)
		resp, err = cl.Check(ctx, slot(k))
		require.NoError(t, err)
		require.False(t, resp.Allowed, "key %s: a fourth slot", k)
		rel := slot(k)
		rel.Op, rel.Reservation = pb.Op_RELEASE, tokens[k][0]
		resp, err = cl.Check(ctx, rel)
		require.NoError(t, err)
		assert.EqualValues(t, 1, resp.Refunded, "key %s: the slot taken before the crash is freed", k)
		resp, err = cl.Check(ctx, slot(k))
		require.NoError(t, err)
		assert.True(t, resp.Allowed, "key %s: its slot again", k)
	}
}
