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
	out := &pb.ForwardResponse{Results: make([]*pb.CheckResult, len(in.GetChecks()))}
	reqs := make([]limiter.Request, 0, len(in.GetChecks()))
	idx := make([]int, 0, len(in.GetChecks()))
	for i, c := range in.GetChecks() {
		req, err := FromProto(c)
		if err != nil {
			out.Results[i] = errorResult(err)
			continue
		}
		reqs = append(reqs, req)
		idx = append(idx, i)
	}
	for j, r := range s.svc.DecideLocal(reqs) {
		out.Results[idx[j]] = ToProtoResult(r)
	}
	return out, nil
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
