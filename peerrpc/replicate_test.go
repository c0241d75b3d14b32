package peerrpc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// keeper is a backup that keeps what it is sent.
type keeper struct {
	peertest.Recorder
	origin string
	got    peer.Replication
}

func (k *keeper) HandleReplicate(_ context.Context, origin string, r peer.Replication) (peer.Replicated, error) {
	k.origin, k.got = origin, r
	return peer.Replicated{Kept: len(r.States), Unsynced: []int{3}, Boot: "backup-boot"}, nil
}

// A round's states reach a node's server (peerrpc.Register) as they were
// sent, encoded and decoded with no message per state, and so do they a
// server of the generated code: the wire format is the same.
func TestReplicateCarriesEveryKindOfState(t *testing.T) {
	states := []limiter.KeyState{
		{Key: "counter", Window: time.Minute, Algorithm: limiter.SlidingWindowCounter, WindowID: 29_166_666, Prev: 7, Curr: 3},
		{Key: "log", Window: time.Second, Algorithm: limiter.SlidingWindowLog, Log: []int64{1_750_000_000_000, 1_750_000_000_250}},
		{Key: "day", Algorithm: limiter.SlidingWindowCounter, Calendar: limiter.CalendarOf(limiter.CalendarDay, "Europe/Paris"),
			WindowID: 1_750_000_000_000, Curr: 9},
		{Key: "gcra", Window: time.Second, Algorithm: limiter.GCRA, TAT: 1_750_000_000_123_456_789},
		{Key: "slots", Window: time.Minute, Algorithm: limiter.Concurrency, Log: []int64{1_750_000_000_000}, Tags: []uint32{42}},
	}
	sent := peer.Replication{Sent: time.UnixMilli(1_750_000_001_000), Whole: []int{5, 9}, Boot: "owner-boot", States: states}
	for _, node := range []bool{true, false} {
		t.Run(fmt.Sprintf("node server %v", node), func(t *testing.T) {
			k := &keeper{Recorder: peertest.Recorder{ID: "b"}}
			register := func(gs *grpc.Server) { pb.RegisterPeerServer(gs, peerrpc.NewServer(k)) }
			var opts []grpc.ServerOption
			if node {
				register = func(gs *grpc.Server) { peerrpc.Register(gs, peerrpc.NewServer(k)) }
				opts = append(opts, grpc.ForceServerCodecV2(wire.Codec))
			}
			to := peer.Route{ID: "b", Addr: grpctest.Serve(t, register, opts...)}
			p, err := peerrpc.NewPeers(peerrpc.DefaultConfig(), "a", nil)
			require.NoError(t, err)
			defer p.Close()
			done, err := p.Replicate(context.Background(), to, sent)
			require.NoError(t, err)
			assert.Equal(t, peer.Replicated{Kept: 5, Unsynced: []int{3}, Boot: "backup-boot"}, done)
			assert.Equal(t, "a", k.origin)
			assert.True(t, sent.Sent.Equal(k.got.Sent))
			assert.Equal(t, sent.Whole, k.got.Whole)
			assert.Equal(t, sent.Boot, k.got.Boot)
			assert.Equal(t, states, k.got.States)
		})
	}
}

// rawMessage is bytes sent as they are, through internal/wire's codec.
type rawMessage []byte

func (m rawMessage) SizeVT() int                                  { return len(m) }
func (m rawMessage) MarshalToSizedBufferVT(b []byte) (int, error) { return copy(b, m), nil }
func (m rawMessage) UnmarshalVT([]byte) error                     { return nil }

// A malformed replication is refused with INVALID_ARGUMENT naming the
// field, and nothing reaches the Handler.
func TestAMalformedReplicationIsRefusedNamingTheField(t *testing.T) {
	k := &keeper{Recorder: peertest.Recorder{ID: "b"}}
	addr := grpctest.Serve(t, func(gs *grpc.Server) { peerrpc.Register(gs, peerrpc.NewServer(k)) }, grpc.ForceServerCodecV2(wire.Codec))
	cc, err := grpc.NewClient(addr, append(wire.Dial(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer cc.Close()
	// states[0].curr sent as bytes
	err = cc.Invoke(context.Background(), pb.Peer_Replicate_FullMethodName, rawMessage{2<<3 | 2, 3, 6<<3 | 2, 1, 0}, new(pb.ReplicateResponse))
	st, _ := status.FromError(err)
	assert.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	assert.Equal(t, "curr", grpcapi.Field(st))
	assert.Empty(t, k.got.States)
	assert.Empty(t, k.origin)
}
