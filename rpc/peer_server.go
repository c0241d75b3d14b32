package rpc

import (
	"context"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// PeerServer serves peerlimit.v1.Peer, the calls other members make
// through Peers, over a route.Handler (the node's route.Service): checks
// forwarded to this node, state handed to it, copies to drop. It only
// converts; what each call does, and its log lines, are the Handler's.
type PeerServer struct {
	pb.UnimplementedPeerServer
	svc *route.Service
}

var _ pb.PeerServer = (*PeerServer)(nil)

// NewPeerServer serves the node-to-node API over svc.
func NewPeerServer(svc *route.Service) *PeerServer {
	return &PeerServer{svc: svc}
}

// Forward implements pb.PeerServer: decide here, never forward again.
func (s *PeerServer) Forward(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	ctx = grpcapi.Incoming(ctx)
	b := fromProtoBatch(in.GetChecks(), FromProto)
	for i, r := range b.results {
		if r != nil { // refused before the store saw it: an algorithm or field this node does not know
			s.svc.RefusedForward(ctx, in.GetOrigin(), in.GetChecks()[i].GetKey(), fromProtoError(r.GetError()))
			break
		}
	}
	return &pb.ForwardResponse{Results: b.answer(s.svc.HandleForward(ctx, in.GetOrigin(), b.reqs))}, nil
}

// Handoff implements pb.PeerServer: merge the states into the store.
func (s *PeerServer) Handoff(ctx context.Context, in *pb.HandoffRequest) (*pb.HandoffResponse, error) {
	states := make([]limiter.KeyState, len(in.GetStates()))
	for i, ks := range in.GetStates() {
		states[i] = FromProtoKeyState(ks)
	}
	merged, rejected := s.svc.HandleHandoff(grpcapi.Incoming(ctx), in.GetOrigin(), states)
	return &pb.HandoffResponse{Merged: uint32(merged), Rejected: rejected}, nil
}

// Reset implements pb.PeerServer: drop this node's state for the key, here,
// never forwarded again. The node that received the public call resolved
// any policy; this one checks the numbers by its own store's rules.
func (s *PeerServer) Reset(ctx context.Context, in *pb.PeerResetRequest) (*pb.PeerResetResponse, error) {
	algo, err := algorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	r, err := s.svc.NewResetRequest(in.GetKey(), in.GetWindowMs(), algo, false, "", in.GetAllWindows())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	cleared, err := s.svc.HandleReset(grpcapi.Incoming(ctx), in.GetOrigin(), r)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.PeerResetResponse{Cleared: uint32(cleared)}, nil
}
