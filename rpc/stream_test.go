package rpc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/rpc"
)

// Concurrent forwards to one owner share its ForwardStream: they are
// answered exactly (one owner decides them all), in batches.
func TestForwardStreamCarriesConcurrentForwardsExactly(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	a := startIngress(t, b.route, nil)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for w := range 16 {
		wg.Go(func() {
			for i := range 25 {
				got, err := a.srv.Check(context.Background(), logReq(fmt.Sprintf("b:%d", i%5), 30, 60_000))
				if assert.NoError(t, err, "worker %d", w) && got.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 5*30, allowed.Load(), "400 checks of 5 keys, limit 30 each")
	batches := metric(t, a.reg, "peerlimit_forward_batch_size")
	assert.Positive(t, batches)
	assert.LessOrEqual(t, batches, 400.0)
	// Every check took a hop, or was admitted from a budget lease the owner
	// lent over the Lease call (hot keys: 80 checks each from one node).
	leased := metric(t, a.reg, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_LOG", "route", "leased", "outcome", "allowed")
	assert.Equal(t, 400.0, metric(t, a.reg, "peerlimit_forwards_total", "result", "ok")+leased)
}

// A forwarded check's answer is the owner's whole decision, as if the
// client had asked the owner: RefillAfterMs too, running down with time.
func TestForwardedCheckCarriesTheOwnersDecision(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	a := startIngress(t, b.route, nil)
	req := logReq("b:refill", 2, 1000)
	for i, want := range []*pb.CheckResponse{
		{Allowed: true, Limit: 2, Remaining: 1, ResetAfterMs: 1000, RefillAfterMs: 1000, Owner: "n2"},
		{Allowed: true, Limit: 2, CurrentCount: 1, ResetAfterMs: 1000, RefillAfterMs: 600, Owner: "n2"},
		{Limit: 2, CurrentCount: 2, RetryAfterMs: 200, ResetAfterMs: 600, RefillAfterMs: 200, Owner: "n2"},
	} {
		got, err := a.srv.Check(context.Background(), req)
		require.NoError(t, err)
		assertProtoEqual(t, want, got, "check ", i)
		a.clock.Advance(400 * time.Millisecond)
		b.clock.Advance(400 * time.Millisecond)
	}
}

// oldPeer is a node of a version without ForwardStream: Forward only.
type oldPeer struct {
	pb.UnimplementedPeerServer
	inner *peerrpc.Server
	calls atomic.Int64
}

func (o *oldPeer) Forward(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	o.calls.Add(1)
	return o.inner.Forward(ctx, in)
}

// A peer that does not serve ForwardStream (an older node, mid-upgrade)
// is sent Forward calls instead, and nothing is answered by the fallback.
func TestForwardFallsBackToCallsForOlderPeers(t *testing.T) {
	logs := testlog.NewCapture()
	owner := newEnv(t, func(o *envOpts) { o.rpc = func(c *svcConfig) { c.NodeID, c.Logger = "n2", slog.New(logs) } })
	old := &oldPeer{inner: peerrpc.NewServer(owner.svc.Peer)}
	addr := grpctest.Serve(t, func(gs *grpc.Server) { pb.RegisterPeerServer(gs, old) }, rpc.NewStrictCodec().ServerOptions()...)
	a := startIngress(t, peer.Route{ID: "n2", Addr: addr}, nil)
	for i := range 3 {
		got, err := a.srv.Check(context.Background(), logReq(fmt.Sprintf("b:%d", i), 5, 60_000))
		require.NoError(t, err)
		assert.False(t, got.Degraded, "check %d", i)
		assert.Equal(t, "n2", got.Owner)
	}
	assert.Equal(t, int64(3), old.calls.Load())
}

// Every batch of a stream must name the stream's origin; one that names
// another ends the stream, INVALID_ARGUMENT, and decides nothing.
func TestForwardStreamRefusesAnotherOrigin(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	stream := openForwardStream(t, b.route.Addr, "n1")
	require.NoError(t, stream.Send(&pb.ForwardRequest{Origin: "n1", Seq: 1, Checks: []*pb.CheckRequest{logReq("k", 5, 60_000)}}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	assert.EqualValues(t, 1, resp.GetSeq())
	assert.True(t, resp.GetResults()[0].GetResponse().GetAllowed())

	require.NoError(t, stream.Send(&pb.ForwardRequest{Origin: "n3", Seq: 2, Checks: []*pb.CheckRequest{logReq("k", 5, 60_000)}}))
	_, err = stream.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	d, err := b.store.Check(b.clock.Now(), limiter.Request{Key: "k", Limit: 5, Window: 60_000_000_000, Algorithm: limiter.SlidingWindowLog})
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.CurrentCount, "the refused batch decided nothing")
}

// CheckStream answers each batch in order with its seq; a batch over the
// maximum is answered with its error, and the stream goes on.
func TestCheckStreamAnswersEveryBatch(t *testing.T) {
	e := newEnv(t, withMaxBatch(2))
	conn := e.serveGRPC(t)
	stream, err := pb.NewRateLimiterClient(conn).CheckStream(context.Background())
	require.NoError(t, err)
	batches := [][]*pb.CheckRequest{
		{logReq("a", 1, 1000), logReq("a", 1, 1000)},
		{logReq("b", 1, 1000), logReq("c", 1, 1000), logReq("d", 1, 1000)}, // over the maximum
		{{Key: "e", Limit: 0, WindowMs: 1000}},                             // an invalid item
	}
	for i, checks := range batches {
		require.NoError(t, stream.Send(&pb.CheckStreamRequest{Seq: uint64(10 + i), Checks: checks}))
	}
	got := make([]*pb.CheckStreamResponse, len(batches))
	for i := range batches {
		got[i], err = stream.Recv()
		require.NoError(t, err)
		assert.EqualValues(t, 10+i, got[i].GetSeq(), "answered in order")
	}
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.ErrorIs(t, err, io.EOF)

	require.Len(t, got[0].GetResults(), 2)
	assert.True(t, got[0].GetResults()[0].GetResponse().GetAllowed())
	assert.False(t, got[0].GetResults()[1].GetResponse().GetAllowed(), "one state: the second is over the limit")
	assert.EqualValues(t, codes.ResourceExhausted, got[1].GetError().GetCode())
	assert.Empty(t, got[1].GetResults())
	assert.Equal(t, "limit", got[2].GetResults()[0].GetError().GetField())
}

func openForwardStream(t *testing.T, addr, origin string) pb.Peer_ForwardStreamClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, wire.Dial()...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), grpcapi.OriginKey, origin))
	t.Cleanup(cancel)
	stream, err := pb.NewPeerClient(conn).ForwardStream(ctx)
	require.NoError(t, err)
	return stream
}
