package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A member whose clock is a second behind the owner's once stamped its
// forwarded batches with an absolute deadline (field 5,
// deadline_unix_ms) that the owner read on its own clock: every batch
// looked late, so the owner decided it, took its counts back, and
// answered; the sender, whose deadline had not passed, used the
// admissions. 20 of 20 admitted under a limit of 5, nothing counted.
// Such a batch (an older member's, in a rolling deploy) must now count
// what it admits: the owner reads no time from another clock.
func TestBatchFromAMemberWhoseClockIsBehindCountsWhatItAdmits(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	owner := c.Node(0)
	conn, err := grpc.NewClient(owner.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewPeerClient(conn).ForwardStream(metadata.AppendToOutgoingContext(ctx, "x-peerlimit-origin", "behind"))
	require.NoError(t, err)

	const limit, checks = 5, 20
	msg := &pb.ForwardRequest{Origin: "behind", Seq: 1, RequestId: "0123456789abcdef"}
	for range checks {
		msg.Checks = append(msg.Checks, &pb.CheckRequest{Key: "skewed", Limit: limit, WindowMs: 60_000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
	}
	senderNow := time.Now().Add(-time.Second) // its clock, 1 s behind
	deadline := senderNow.Add(500 * time.Millisecond).UnixMilli()
	msg.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), uint64(deadline)))
	require.NoError(t, stream.Send(msg))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), checks)

	admitted := 0
	for _, r := range resp.GetResults() {
		if r.GetResponse().GetAllowed() {
			admitted++
		}
	}
	iv, err := apiClient(t, owner).Inspect(ctx, &pb.InspectRequest{Key: "skewed"})
	require.NoError(t, err)
	held := int64(0)
	for _, l := range iv.GetLimits() {
		held += l.GetCount()
	}
	assert.EqualValues(t, admitted, held, "the owner holds every admission it answered")
	assert.Equal(t, limit, admitted)
}

// Members whose clocks disagree by seconds (one 2 s behind, one 2 s
// ahead) still hold a key to its limit exactly, whichever member the
// checks arrive at: a check is stamped by its owner's clock alone.
func TestSkewedClocksHoldTheLimitExactly(t *testing.T) {
	offsets := map[string]time.Duration{"node-1": -2 * time.Second, "node-2": 2 * time.Second}
	c := testcluster.New(t, 3, func(cfg *node.Config) {
		cfg.Now = wallclock.Steady(faultclock.New(faultclock.Config{Offset: offsets[cfg.ID]}, wallclock.System()), wallclock.DefaultMaxSlew)
		cfg.Peers.Timeout = time.Second // shorter than the skew: an absolute deadline would fail open
	})
	for _, algo := range []pb.Algorithm{pb.Algorithm_SLIDING_WINDOW_LOG, pb.Algorithm_SLIDING_WINDOW_COUNTER} {
		const limit = 7
		key := fmt.Sprintf("skew:%s", algo)
		admitted := 0
		for i := range 30 {
			resp, err := apiClient(t, c.Live()[i%3]).Check(context.Background(), &pb.CheckRequest{Key: key, Limit: limit, WindowMs: 60_000, Algorithm: algo})
			require.NoError(t, err)
			assert.False(t, resp.GetDegraded(), "check %d", i)
			if resp.GetAllowed() {
				admitted++
			}
		}
		assert.Equal(t, limit, admitted, algo.String())
	}
}
