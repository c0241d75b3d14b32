package peerrpc_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peerrpc keeps the peer protocol's contract over real gRPC, as memnet
// does in memory: the request path tested on memnet sees the same.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name     string
		batching bool
		// nodeServer registers the server as a node does (peerrpc.Register,
		// with internal/wire's codec), not with the generated code.
		nodeServer bool
	}{{"stream", true, false}, {"unary", false, false}, {"stream, as a node serves", true, true}} {
		batching := tc.batching
		t.Run(tc.name, func(t *testing.T) {
			peertest.Conformance(t, func(t *testing.T) peertest.Transport {
				return peertest.Transport{
					Serve: func(t *testing.T, id string, h peer.Handler) peer.Route {
						if tc.nodeServer {
							return peer.Route{ID: id, Addr: grpctest.Serve(t, func(gs *grpc.Server) { peerrpc.Register(gs, peerrpc.NewServer(h)) },
								grpc.ForceServerCodecV2(wire.Codec))}
						}
						return peer.Route{ID: id, Addr: grpctest.Serve(t, func(gs *grpc.Server) { pb.RegisterPeerServer(gs, peerrpc.NewServer(h)) })}
					},
					Caller: func(t *testing.T, id string) peer.Peers {
						cfg := peerrpc.DefaultConfig()
						if !batching {
							cfg.BatchLimit = 1
						}
						p, err := peerrpc.NewPeers(cfg, id, nil)
						require.NoError(t, err)
						t.Cleanup(p.Close)
						return p
					},
					Absent: func(t *testing.T) peer.Route { return peer.Route{ID: "gone", Addr: grpctest.DeadAddr(t)} },
				}
			})
		})
	}
}
