package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// keyOwnedBy returns the first key "<prefix>:<i>" that n's ring gives to
// owner.
func keyOwnedBy(t *testing.T, n *node.Node, owner, prefix string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("%s:%d", prefix, i); n.Ring().Owner(k).ID == owner {
			return k
		}
	}
	t.Fatalf("no key of %s's", owner)
	return ""
}

// Checks by policy name through a 3-node cluster: the node that receives
// them resolves the name and forwards numbers, so owners without the
// file decide them, exactly, as if the numbers had been sent inline.
func TestPolicyChecksThroughAForwardingCluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("login: {algorithm: SLIDING_WINDOW_LOG, limit: 5, window: 1h}\n"), 0o600))
	c := testcluster.New(t, 3, func(cfg *node.Config) {
		if cfg.ID == "node-0" { // the only node with the file: owners never need it
			cfg.PoliciesFile = path
		}
	})
	ingress := c.Node(0)
	cl := apiClient(t, ingress)
	ctx := context.Background()

	for _, owner := range []string{"node-1", "node-2"} {
		key := keyOwnedBy(t, ingress, owner, "login")
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 5 {
					resp, err := cl.Check(ctx, &pb.CheckRequest{Key: key, Policy: "login"})
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, owner, resp.Owner, "decided by the owner")
					assert.False(t, resp.Degraded)
					assert.EqualValues(t, 5, resp.Limit)
					if resp.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.EqualValues(t, 5, allowed.Load(), "exactly the policy's limit of 20 checks for %s", key)

		// The owner holds the state under the policy's numbers: an inline
		// check with them, sent to the owner itself, sees the same count.
		resp, err := apiClient(t, c.Node(map[string]int{"node-1": 1, "node-2": 2}[owner])).Check(ctx, &pb.CheckRequest{
			Key: key, Limit: 5, WindowMs: 3_600_000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Hits: new(int64)}) // the policy's hour; a log: no boundary to cross
		require.NoError(t, err)
		assert.EqualValues(t, 5, resp.CurrentCount)
	}

	// A node without the file says so; it does not guess.
	_, err := apiClient(t, c.Node(1)).Check(ctx, &pb.CheckRequest{Key: "x", Policy: "login"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "this node has no policies")
}

// A reset reaches the key's owner from any node, and drops the copies
// other members hold (what the local fallback leaves behind), so that no
// handoff brings the count back.
func TestResetThroughTheCluster(t *testing.T) {
	c := testcluster.New(t, 3, func(cfg *node.Config) {
		// The copy planted below must stay on its node until the reset:
		// no periodic handoff (ring changes, none here, would still run it).
		cfg.HandoffInterval = time.Hour
	})
	n0, n1, n2 := c.Node(0), c.Node(1), c.Node(2)
	ctx := context.Background()
	const window = 3_600_000
	req := func(key string, hits int64) *pb.CheckRequest {
		return &pb.CheckRequest{Key: key, Limit: 3, WindowMs: window, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Hits: &hits}
	}
	exhaust := func(via *node.Node, key string) {
		t.Helper()
		for range 3 {
			resp, err := apiClient(t, via).Check(ctx, req(key, 1))
			require.NoError(t, err)
			require.True(t, resp.Allowed)
		}
		resp, err := apiClient(t, via).Check(ctx, req(key, 1))
		require.NoError(t, err)
		require.False(t, resp.Allowed)
	}

	t.Run("via a non-owner, with a copy elsewhere", func(t *testing.T) {
		key := keyOwnedBy(t, n0, "node-2", "blocked")
		exhaust(n0, key)
		// node-1 decided the key itself once, as its local fallback does
		// while the owner is unreachable.
		_, err := n1.Store().Check(time.Now(), limiter.Request{Key: key, Limit: 3, Window: time.Hour, Algorithm: limiter.SlidingWindowLog, Hits: 1})
		require.NoError(t, err)

		got, err := apiClient(t, n0).Reset(ctx, &pb.ResetRequest{Key: key, WindowMs: window, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
		require.NoError(t, err)
		want := &pb.ResetResponse{Owner: "node-2", Existed: true, Cleared: 1, MembersAsked: 2, MembersAcknowledged: 2, CopiesCleared: 1}
		assert.True(t, proto.Equal(want, got), "want %v\ngot  %v", want, got)

		for _, n := range []*node.Node{n0, n1, n2} {
			d, err := n.Store().Check(time.Now(), limiter.Request{Key: key, Limit: 3, Window: time.Hour, Algorithm: limiter.SlidingWindowLog})
			require.NoError(t, err)
			assert.Zero(t, d.CurrentCount, "%s holds nothing for the key", n.ID())
		}
		resp, err := apiClient(t, n1).Check(ctx, req(key, 1))
		require.NoError(t, err)
		assert.True(t, resp.Allowed, "the block is lifted")
		assert.Equal(t, "node-2", resp.Owner)
	})

	t.Run("on the owner, every window", func(t *testing.T) {
		key := keyOwnedBy(t, n0, "node-1", "owned")
		exhaust(n2, key)
		_, err := apiClient(t, n2).Check(ctx, &pb.CheckRequest{Key: key, Limit: 1, WindowMs: 1000})
		require.NoError(t, err)
		got, err := apiClient(t, n1).Reset(ctx, &pb.ResetRequest{Key: key, AllWindows: true})
		require.NoError(t, err)
		assert.Equal(t, "node-1", got.Owner)
		assert.EqualValues(t, 2, got.Cleared, "the log and the counter")
		assert.EqualValues(t, 2, got.MembersAsked)
		assert.EqualValues(t, 2, got.MembersAcknowledged)
		assert.Zero(t, got.CopiesCleared)
	})

	t.Run("owner gone", func(t *testing.T) {
		key := keyOwnedBy(t, n0, "node-2", "gone")
		exhaust(n0, key)
		c.Kill(2)
		// Until gossip declares node-2 dead (hundreds of milliseconds
		// with the local profile) the ring still names it: the reset must
		// fail, not pretend.
		require.Equal(t, "node-2", n0.Ring().Owner(key).ID, "failure detection cannot have run yet")
		resetCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := apiClient(t, n0).Reset(resetCtx, &pb.ResetRequest{Key: key, WindowMs: window, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.ErrorContains(t, err, "owner node-2")
		// Once it is declared dead the key has a live owner, which starts
		// it fresh (a killed node's counts are lost): resetting works again.
		c.WaitConverged()
		got, err := apiClient(t, n0).Reset(resetCtx, &pb.ResetRequest{Key: key, WindowMs: window, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
		require.NoError(t, err)
		assert.NotEqual(t, "node-2", got.Owner)
	})
}
