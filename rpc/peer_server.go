package rpc

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// PeerServer serves peerlimit.v1.Peer: checks forwarded by other members,
// and state handed over by them. Its log lines carry the request id of
// the call (RequestIDKey), which the calling node logs too.
type PeerServer struct {
	pb.UnimplementedPeerServer
	svc *Service
	// OnHandoff, if set, is told how many states each handoff merged and
	// refused, for metrics and logs; ctx is the call's (RequestIDFrom
	// names it).
	OnHandoff func(ctx context.Context, origin string, merged int, rejected []string)

	refusedLog, lateLog every
}

var _ pb.PeerServer = (*PeerServer)(nil)

// NewPeerServer serves the node-to-node API over svc.
func NewPeerServer(svc *Service) *PeerServer {
	return &PeerServer{svc: svc}
}

// Forward implements pb.PeerServer: decide here, never forward again.
func (s *PeerServer) Forward(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	b := fromProtoBatch(in.GetChecks(), FromProto)
	results := b.answer(s.svc.DecideLocal(b.reqs))
	s.logRefused(ctx, in, results)
	// Decided, but the caller has stopped waiting (its forward deadline
	// passed): it answered these checks by its fallback, and they count
	// here as well. Worth a trace on both sides.
	if err := ctx.Err(); err != nil && s.lateLog.allow() {
		s.svc.log.Warn("decided forwarded checks after the caller stopped waiting; if it answered them by its fallback, they count twice",
			append([]any{"origin", clip(in.GetOrigin()), "checks", len(in.GetChecks()), "err", err}, idAttrs(ctx, "")...)...)
	}
	return &pb.ForwardResponse{Results: results}, nil
}

// logRefused warns, at most once a second, about forwarded checks this
// node refused as invalid: the sender validated them by its own limits, so
// the two nodes are configured differently.
func (s *PeerServer) logRefused(ctx context.Context, in *pb.ForwardRequest, results []*pb.CheckResult) {
	for i, r := range results {
		e := r.GetError()
		if e == nil || codes.Code(e.GetCode()) != codes.InvalidArgument {
			continue
		}
		if s.refusedLog.allow() {
			s.svc.log.Warn("refused a forwarded check the sender accepted: the nodes' settings differ",
				append([]any{"origin", clip(in.GetOrigin()), "key", clip(in.GetChecks()[i].GetKey()), "field", e.GetField(),
					"err", e.GetMessage()}, idAttrs(ctx, "")...)...)
		}
		return
	}
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
		s.OnHandoff(ctx, in.GetOrigin(), merged, resp.Rejected)
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
	cleared := s.svc.ResetLocal(r)
	// Debug: applications may reset on every successful login; the node
	// that received the reset logs it at Info, with the same request_id.
	s.svc.log.Debug("dropped a key's state at a member's request", append([]any{"origin", clip(in.GetOrigin()), "key", clip(r.Key),
		"cleared", cleared}, idAttrs(ctx, "")...)...)
	return &pb.PeerResetResponse{Cleared: uint32(cleared)}, nil
}
