package rpc

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	// Admit, if set, checks each batch of a ForwardStream as Guard checks
	// a call: from a current member, with good credentials. Nil admits
	// every batch (peer authentication off).
	Admit func(ctx context.Context, origin string) error
	// Drain, if set, ends ForwardStreams when the node shuts down.
	Drain *Drain
}

var _ pb.PeerServer = (*PeerServer)(nil)

// NewPeerServer serves the node-to-node API over svc.
func NewPeerServer(svc *route.Service) *PeerServer {
	return &PeerServer{svc: svc}
}

// Forward implements pb.PeerServer: decide here, never forward again.
func (s *PeerServer) Forward(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	return &pb.ForwardResponse{Results: s.forward(grpcapi.Incoming(ctx), in)}, nil
}

// forward decides a batch of forwarded checks and returns their answers.
func (s *PeerServer) forward(ctx context.Context, in *pb.ForwardRequest) []*pb.CheckResult {
	b := fromProtoBatch(in.GetChecks(), FromProto)
	for i, r := range b.results {
		if r != nil { // refused before the store saw it: an algorithm or field this node does not know
			s.svc.RefusedForward(ctx, in.GetOrigin(), in.GetChecks()[i].GetKey(), fromProtoError(r.GetError()))
			break
		}
	}
	return b.answer(s.svc.HandleForward(ctx, in.GetOrigin(), b.reqs))
}

// Relay implements pb.PeerServer: take the checks to their owner, or
// decide them as the owner's heir; never relayed further.
func (s *PeerServer) Relay(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	ctx = grpcapi.Incoming(ctx)
	b := fromProtoBatch(in.GetChecks(), FromProto)
	return &pb.ForwardResponse{Results: b.answer(s.svc.HandleRelay(ctx, in.GetOrigin(), b.reqs))}, nil
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

// Replicate implements pb.PeerServer: keep the owner's states as this
// node's replicas of them, apart from its own; FAILED_PRECONDITION if it
// keeps none.
func (s *PeerServer) Replicate(ctx context.Context, in *pb.ReplicateRequest) (*pb.ReplicateResponse, error) {
	r := route.Replication{States: make([]limiter.KeyState, len(in.GetStates())), Whole: make([]int, len(in.GetWhole()))}
	for i, ks := range in.GetStates() {
		r.States[i] = FromProtoKeyState(ks)
	}
	for i, w := range in.GetWhole() {
		r.Whole[i] = int(w)
	}
	kept, err := s.svc.HandleReplicate(grpcapi.Incoming(ctx), in.GetOrigin(), r)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.ReplicateResponse{Kept: uint32(kept)}, nil
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

// ForwardStream implements pb.PeerServer: Forward for every batch of a
// long-lived stream, answered in order with its seq. The stream's origin
// (x-peerlimit-origin) was checked when it opened (Guard.Stream); each
// batch must name the same origin, and is checked again with Admit, so
// that a member that left or was refused since cannot go on forwarding.
func (s *PeerServer) ForwardStream(stream pb.Peer_ForwardStreamServer) error {
	ctx := stream.Context()
	origin := grpcapi.FirstValue(ctx, grpcapi.OriginKey)
	for {
		in, err := stream.Recv()
		if err != nil {
			return endOfStream(err)
		}
		if !s.Drain.enter() {
			return errDraining // not decided: its sender falls back for it
		}
		err = s.forwardBatch(ctx, stream, origin, in)
		s.Drain.leave()
		if err != nil || s.Drain.draining() {
			return err
		}
	}
}

// forwardBatch checks, decides and answers one batch of a ForwardStream.
func (s *PeerServer) forwardBatch(ctx context.Context, stream pb.Peer_ForwardStreamServer, origin string, in *pb.ForwardRequest) error {
	if in.GetOrigin() != origin {
		return status.Errorf(codes.InvalidArgument, "peerlimit: origin %q differs from the stream's %q", route.Clip(in.GetOrigin()), route.Clip(origin))
	}
	if s.Admit != nil {
		if err := s.Admit(ctx, origin); err != nil {
			return err
		}
	}
	return stream.Send(&pb.ForwardResponse{Seq: in.GetSeq(), Results: s.forward(batchContext(ctx, in), in)})
}

// batchContext is the context a batch of a ForwardStream is decided in:
// the stream's, with the batch's request id, and already ended if the
// sender has stopped waiting for it (it then answered the checks by its
// fallback, and HandleForward says so).
func batchContext(ctx context.Context, in *pb.ForwardRequest) context.Context {
	ctx = route.WithRequestID(ctx, in.GetRequestId())
	if dl := in.GetDeadlineUnixMs(); dl > 0 && time.Now().UnixMilli() > dl {
		late, cancel := context.WithCancelCause(ctx)
		cancel(context.DeadlineExceeded)
		return late
	}
	return ctx
}

// endOfStream is what a stream handler returns when Recv fails: nothing
// when the caller closed its side, else the error.
func endOfStream(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
