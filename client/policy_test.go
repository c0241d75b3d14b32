package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

func TestCheckPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\n"), 0o600))
	// Owner routing makes the owner the node that resolves the name: every
	// node has the file, as the docs ask.
	c := testcluster.New(t, 3, func(cfg *node.Config) { cfg.PoliciesFile = path })
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()

	for i := range 3 {
		d, err := cl.CheckPolicy(ctx, "user:1", "login")
		require.NoError(t, err)
		assert.True(t, d.Allowed, "check %d", i)
		assert.EqualValues(t, 3, d.Limit)
		assert.Equal(t, c.Node(0).Ring().Owner("user:1").ID, d.Owner)
	}
	d, err := cl.CheckPolicy(ctx, "user:1", "login")
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Positive(t, d.RetryAfter)

	// The same state as the policy's numbers inline.
	d, err = cl.CheckN(ctx, "user:1", client.Limit{Limit: 3, Window: time.Hour, Algorithm: client.SlidingWindowLog}, 0)
	require.NoError(t, err)
	assert.EqualValues(t, 3, d.CurrentCount)
	d, err = cl.CheckPolicyN(ctx, "user:2", "login", 0)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Zero(t, d.CurrentCount, "a peek")

	_, err = cl.CheckPolicy(ctx, "user:1", "nope")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, `unknown policy "nope"`)
	_, err = cl.CheckPolicy(ctx, "user:1", "")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	res, err := cl.CheckBatch(ctx, []client.Request{
		{Key: "user:1", Policy: "login"},
		{Key: "user:3", Policy: "login", Hits: 2},
		{Key: "user:3", Policy: "absent"},
		{Key: "user:3", Policy: "login", Limit: client.Limit{Limit: 9}},
	})
	require.NoError(t, err)
	require.Len(t, res, 4)
	require.NoError(t, res[0].Err)
	assert.False(t, res[0].Allowed)
	require.NoError(t, res[1].Err)
	assert.True(t, res[1].Allowed)
	assert.EqualValues(t, 1, res[1].Remaining)
	assert.Equal(t, codes.InvalidArgument, status.Code(res[2].Err))
	assert.Equal(t, codes.InvalidArgument, status.Code(res[3].Err))
	assert.ErrorContains(t, res[3].Err, "invalid limit: must not be given with policy")
}

// OwnerOf reads the Members answer exactly as the nodes' rings decide.
func TestOwnerOfMatchesTheNodes(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	conn, err := grpc.NewClient(c.Node(1).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	m, err := pb.NewRateLimiterClient(conn).Members(context.Background(), &pb.MembersRequest{})
	require.NoError(t, err)
	seen := map[string]bool{}
	for i := range 2000 {
		key := fmt.Sprintf("user:%d", i)
		p, owner, err := client.OwnerOf(m, key)
		require.NoError(t, err)
		want := c.Node(0).Ring().Owner(key)
		assert.Equal(t, want.ID, owner.GetId(), key)
		assert.Equal(t, want.Addr, owner.GetGrpcAddr(), key)
		assert.Equal(t, c.Node(0).Store().Transfer().PartitionOf(key), p, "a partition is a shard")
		seen[owner.GetId()] = true
	}
	assert.Len(t, seen, 3)

	_, _, err = client.OwnerOf(&pb.MembersResponse{Self: "x"}, "k")
	assert.ErrorContains(t, err, "sent no ring")
	_, _, err = client.OwnerOf(&pb.MembersResponse{PartitionCount: 1, PartitionOwners: []uint32{3}}, "k")
	assert.ErrorContains(t, err, "names member 3 of 0")
}
