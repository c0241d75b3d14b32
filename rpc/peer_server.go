package rpc

import (
	"context"

	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// PeerServer serves peerlimit.v1.Peer: checks forwarded by other members,
// and state handed over by them.
type PeerServer struct {
	pb.UnimplementedPeerServer
	svc *Service
	// OnHandoff, if set, is told how many states each handoff merged and
	// refused, for metrics and logs.
	OnHandoff func(origin string, merged int, rejected []string)
}

var _ pb.PeerServer = (*PeerServer)(nil)

// NewPeerServer serves the node-to-node API over svc.
func NewPeerServer(svc *Service) *PeerServer { return &PeerServer{svc: svc} }

// Forward implements pb.PeerServer: decide here, never forward again.
func (s *PeerServer) Forward(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	b := fromProtoBatch(in.GetChecks(), FromProto)
	return &pb.ForwardResponse{Results: b.answer(s.svc.DecideLocal(b.reqs))}, nil
}

// Handoff implements pb.PeerServer: merge the states into the store.
func (s *PeerServer) Handoff(ctx context.Context, in *pb.HandoffRequest) (*pb.HandoffResponse, error) {
	states := make([]limiter.KeyState, len(in.GetStates()))
	for i, ks := range in.GetStates() {
		states[i] = FromProtoKeyState(ks)
	}
	merged, errs := s.svc.Store().Merge(s.svc.cfg.Now(), states)
	resp := &pb.HandoffResponse{Merged: uint32(merged)}
	for _, err := range errs {
		resp.Rejected = append(resp.Rejected, err.Error())
	}
	if s.OnHandoff != nil {
		s.OnHandoff(in.GetOrigin(), merged, resp.Rejected)
	}
	return resp, nil
}

// Reset implements pb.PeerServer: drop this node's state for the key, here,
// never forwarded again. The node that received the public call resolved
// any policy; this one checks the numbers by its own store's rules.
func (s *PeerServer) Reset(ctx context.Context, in *pb.PeerResetRequest) (*pb.PeerResetResponse, error) {
	algo, err := algorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return nil, Status(err).Err()
	}
	r, err := s.svc.NewResetRequest(in.GetKey(), in.GetWindowMs(), algo, false, "", in.GetAllWindows())
	if err != nil {
		return nil, Status(err).Err()
	}
	return &pb.PeerResetResponse{Cleared: uint32(s.svc.ResetLocal(r))}, nil
}
