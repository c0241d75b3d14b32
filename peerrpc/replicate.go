package peerrpc

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A replication round carries thousands of key states. Both ends of a
// Replicate call encode and decode them straight from and into the
// limiter.KeyStates the stores keep (protoconv.AppendReplicate,
// DecodeReplicate), with no message object per state; on the wire it is
// the same ReplicateRequest, so members of either kind interoperate.

// replicateMessage is a ReplicateRequest as the caller sends it, marshalled
// by internal/wire's codec through the two methods it asks of a message
// it sends.
type replicateMessage struct {
	origin string
	r      peer.Replication
}

func (m *replicateMessage) SizeVT() int { return protoconv.SizeReplicate(m.origin, m.r) }

func (m *replicateMessage) MarshalToSizedBufferVT(b []byte) (int, error) {
	if out := protoconv.AppendReplicate(b[:0], m.origin, m.r); len(out) != len(b) {
		return 0, fmt.Errorf("replicate: marshalled %d bytes of %d", len(out), len(b))
	}
	return len(b), nil
}

// replicateRequest is a ReplicateRequest as Register's server receives it.
// A malformed one is kept as its error, which the call answers with
// (INVALID_ARGUMENT naming the field), rather than returned to the codec,
// which gRPC would turn into INTERNAL.
type replicateRequest struct {
	origin string
	r      peer.Replication
	err    error
}

func (m *replicateRequest) UnmarshalVT(b []byte) error {
	m.origin, m.r, m.err = protoconv.DecodeReplicate(b)
	return nil
}

// GetOrigin is the origin the request claims, which the peer guard checks
// (rpc.Guard) as it does every Peer call's.
func (m *replicateRequest) GetOrigin() string { return m.origin }

// Register registers s on gs as peerlimit.v1.Peer, its Replicate calls
// decoded by DecodeReplicate. gs must decode with internal/wire's codec
// (grpc.ForceServerCodecV2(wire.Codec), or rpc.StrictCodec over it), as a
// node's server does; on any other server use pb.RegisterPeerServer.
func Register(gs *grpc.Server, s *Server) {
	desc := pb.Peer_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Replicate" {
			desc.Methods[i].Handler = replicateHandler
		}
	}
	gs.RegisterService(&desc, s)
}

// replicateHandler is the generated Replicate handler with the request
// decoded into a replicateRequest.
func replicateHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(replicateRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if interceptor == nil {
		return s.replicate(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: pb.Peer_Replicate_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.replicate(ctx, req.(*replicateRequest))
	})
}

// replicate is Replicate for a request DecodeReplicate read.
func (s *Server) replicate(ctx context.Context, in *replicateRequest) (*pb.ReplicateResponse, error) {
	if in.err != nil {
		return nil, grpcapi.Status(in.err).Err()
	}
	return s.keepReplicas(ctx, in.origin, in.r)
}
