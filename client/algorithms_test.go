package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// wireNode is a node that keeps what it is sent and answers each check
// with answer: what the client puts on the wire, whatever a store would
// decide.
type wireNode struct {
	pb.UnimplementedRateLimiterServer
	answer *pb.CheckResponse
	mu     sync.Mutex
	got    []*pb.CheckRequest
}

func (n *wireNode) Members(context.Context, *pb.MembersRequest) (*pb.MembersResponse, error) {
	return &pb.MembersResponse{}, nil // no ring: the client asks this node
}

func (n *wireNode) Check(_ context.Context, in *pb.CheckRequest) (*pb.CheckResponse, error) {
	n.keep(in)
	return n.answer, nil
}

func (n *wireNode) CheckBatch(_ context.Context, in *pb.CheckBatchRequest) (*pb.CheckBatchResponse, error) {
	out := &pb.CheckBatchResponse{}
	for _, c := range in.GetChecks() {
		n.keep(c)
		out.Results = append(out.Results, &pb.CheckResult{Result: &pb.CheckResult_Response{Response: n.answer}})
	}
	return out, nil
}

func (n *wireNode) keep(in *pb.CheckRequest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, proto.Clone(in).(*pb.CheckRequest))
}

// sent returns what the node was sent since the last call.
func (n *wireNode) sent() []*pb.CheckRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	got := n.got
	n.got = nil
	return got
}

func serveWire(t *testing.T, n *wireNode) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	pb.RegisterRateLimiterServer(gs, n)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	cl := newClient(t, client.Config{Endpoints: []string{lis.Addr().String()}, DisableCoalescing: true})
	t.Cleanup(func() {
		cl.Close()
		gs.Stop()
		assert.NoError(t, <-served)
	})
	return cl
}

func hitsOf(n int64) *int64 { return &n }

// A GCRA limit's burst goes on the wire when given, and only then (0
// is the limit), alone and in a batch.
func TestGCRABurstOnTheWire(t *testing.T) {
	n := &wireNode{answer: &pb.CheckResponse{Allowed: true, Limit: 10}}
	cl := serveWire(t, n)
	ctx := context.Background()
	bucket := client.Limit{Limit: 10, Window: time.Second, Algorithm: client.GCRA, Burst: 50}
	_, err := cl.CheckN(ctx, "u", bucket, 3)
	require.NoError(t, err)
	_, err = cl.Check(ctx, "u", client.Limit{Limit: 10, Window: time.Second, Algorithm: client.GCRA})
	require.NoError(t, err)
	_, err = cl.CheckBatch(ctx, []client.Request{{Key: "a", Limit: bucket}, {Key: "b", Limit: client.Limit{Limit: 1, Window: time.Second}}})
	require.NoError(t, err)
	want := []*pb.CheckRequest{
		{Key: "u", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Burst: hitsOf(50), Hits: hitsOf(3)},
		{Key: "u", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Hits: hitsOf(1)},
		{Key: "a", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Burst: hitsOf(50), Hits: hitsOf(1)},
		{Key: "b", Limit: 1, WindowMs: 1000, Hits: hitsOf(1)},
	}
	got := n.sent()
	require.Len(t, got, len(want))
	for i := range want {
		assert.True(t, proto.Equal(want[i], got[i]), "check %d: got %v", i, got[i])
	}
}

// Acquire sends ACQUIRE of one hit and returns the slot as a
// Reservation; Release sends its token back as RELEASE; a denied slot
// is released without a call.
func TestAcquireAndReleaseOnTheWire(t *testing.T) {
	n := &wireNode{answer: &pb.CheckResponse{Allowed: true, Limit: 5, Remaining: 4, Reservation: "slot-1", ExpiresInMs: 30000, Owner: "n1"}}
	cl := serveWire(t, n)
	ctx := context.Background()
	conns := client.Limit{Limit: 5, Window: 30 * time.Second, Algorithm: client.Concurrency}

	slot, err := cl.Acquire(ctx, "tenant:1", conns)
	require.NoError(t, err)
	assert.True(t, slot.Allowed)
	assert.Equal(t, "slot-1", slot.Token)
	assert.Equal(t, conns, slot.Limit)
	assert.EqualValues(t, 1, slot.Hits)
	assert.WithinDuration(t, time.Now().Add(30*time.Second), slot.Expires, 5*time.Second)

	n.answer = &pb.CheckResponse{Allowed: true, Limit: 5, Remaining: 5, Refunded: 1, Settled: pb.Settled_SETTLED_BEFORE}
	s, err := cl.Release(ctx, slot)
	require.NoError(t, err)
	assert.Equal(t, client.SettledBefore, s.Outcome, "a retried release")

	_, err = cl.AcquirePolicy(ctx, "tenant:2", "conns")
	require.NoError(t, err)

	want := []*pb.CheckRequest{
		{Key: "tenant:1", Limit: 5, WindowMs: 30000, Algorithm: pb.Algorithm_CONCURRENCY, Hits: hitsOf(1), Op: pb.Op_ACQUIRE},
		{Key: "tenant:1", Limit: 5, WindowMs: 30000, Algorithm: pb.Algorithm_CONCURRENCY, Hits: hitsOf(0), Op: pb.Op_RELEASE, Reservation: "slot-1"},
		{Key: "tenant:2", Policy: "conns", Hits: hitsOf(1), Op: pb.Op_ACQUIRE},
	}
	got := n.sent()
	require.Len(t, got, len(want))
	for i := range want {
		assert.True(t, proto.Equal(want[i], got[i]), "call %d: got %v", i, got[i])
	}

	n.answer = &pb.CheckResponse{Allowed: false, Limit: 5, RetryAfterMs: 1000}
	busy, err := cl.Acquire(ctx, "tenant:1", conns)
	require.NoError(t, err, "a denial is an answer")
	assert.False(t, busy.Allowed)
	assert.Empty(t, busy.Token)
	_, err = cl.Release(ctx, busy)
	require.NoError(t, err)
	assert.Len(t, n.sent(), 1, "releasing a denied slot sends nothing")

	_, err = cl.AcquirePolicy(ctx, "k", "")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// Through real nodes, what they refuse before any store decides:
// each error names its field.
func TestGCRAAndConcurrencyRefusalsNameTheField(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Live()...)})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"negative burst", func() error {
			_, err := cl.Check(ctx, "k", client.Limit{Limit: 10, Window: time.Second, Algorithm: client.GCRA, Burst: -1})
			return err
		}, "burst"},
		{"burst on a counter", func() error {
			_, err := cl.Check(ctx, "k", client.Limit{Limit: 10, Window: time.Second, Burst: 5})
			return err
		}, "burst"},
		{"acquire on a counter", func() error {
			_, err := cl.Acquire(ctx, "k", client.Limit{Limit: 10, Window: time.Second})
			return err
		}, "op"},
		{"reserve on concurrency", func() error {
			_, err := cl.Reserve(ctx, "k", client.Limit{Limit: 10, Window: time.Second, Algorithm: client.Concurrency}, 1, 0)
			return err
		}, "op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, err.Error(), "invalid "+tc.field)
		})
	}
}

// A check cannot hold a concurrency slot: the middlewares refuse such a
// limit when they are made, not on every request.
func TestMiddlewareRefusesConcurrency(t *testing.T) {
	cfg := client.MiddlewareConfig{Limit: client.Limit{Limit: 5, Window: time.Minute, Algorithm: client.Concurrency}, Key: client.KeyByIP}
	assert.ErrorContains(t, cfg.Validate(), "Client.Acquire")
	assert.ErrorContains(t, client.ReserveConfig{MiddlewareConfig: cfg}.Validate(), "Client.Acquire")
}
