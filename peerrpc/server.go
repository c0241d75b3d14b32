package peerrpc

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Server serves peerlimit.v1.Peer, the calls other members make through
// Peers, over a peer.Handler: it converts each call, hands it to the
// Handler and converts the answer back. What each call does, and its log
// lines, are the Handler's, exactly as over memnet.
type Server struct {
	pb.UnimplementedPeerServer
	h peer.Handler
	// Admit, if set, checks each batch of a ForwardStream as the guard
	// checks a call: from a current member, with good credentials. Nil
	// admits every batch (peer authentication off).
	Admit func(ctx context.Context, origin string) error
	// Drain, if set, ends ForwardStreams when the node shuts down.
	Drain *grpcapi.Drain
	// Tracer, if set, records the owner's span of each forwarded check,
	// and the relay's span of each relayed one, whose sender traces it
	// (ForwardRequest.traces), named by NodeID.
	Tracer trace.Tracer
	NodeID string
}

var _ pb.PeerServer = (*Server)(nil)

// NewServer serves the node-to-node API over h.
func NewServer(h peer.Handler) *Server { return &Server{h: h} }

// Forward implements pb.PeerServer: decide here, never forward again.
func (s *Server) Forward(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	return &pb.ForwardResponse{Results: s.forward(grpcapi.Incoming(ctx), in)}, nil
}

// forward decides a batch of forwarded checks and returns their answers.
func (s *Server) forward(ctx context.Context, in *pb.ForwardRequest) []*pb.CheckResult {
	_, end := s.startSpans(ctx, in, decideSpanName)
	b := protoconv.FromProtoBatch(in.GetChecks(), protoconv.FromForwarded)
	results := b.Answer(s.h.HandleForward(ctx, in.GetOrigin(), b.Reqs))
	end(results)
	return results
}

// Relay implements pb.PeerServer: take the checks to their owner, or
// decide them as the owner's heir; never relayed further. A traced
// check's relay span is in the context the Handler forwards with, so the
// owner's span joins the sender's trace as a forward's does.
func (s *Server) Relay(ctx context.Context, in *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	ctx, end := s.startSpans(grpcapi.Incoming(ctx), in, relaySpanName)
	b := protoconv.FromProtoBatch(in.GetChecks(), protoconv.FromForwarded)
	results := b.Answer(s.h.HandleRelay(ctx, in.GetOrigin(), b.Reqs))
	end(results)
	return &pb.ForwardResponse{Results: results}, nil
}

// Handoff implements pb.PeerServer: merge the states into the store
// (the Handler rebases them onto this node's clock first).
func (s *Server) Handoff(ctx context.Context, in *pb.HandoffRequest) (*pb.HandoffResponse, error) {
	if err := checkSent(in.GetSentUnixMs()); err != nil {
		return nil, err
	}
	merged, rejected, err := s.h.HandleHandoff(grpcapi.Incoming(ctx), in.GetOrigin(), protoconv.FromProtoHandoff(in))
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.HandoffResponse{Merged: uint32(merged), Rejected: rejected}, nil
}

// checkSent refuses a sent stamp no clock of a member reads (negative:
// before 1970), naming the field; 0 is a sender without one.
func checkSent(ms int64) error {
	if ms < 0 {
		return grpcapi.Status(&limiter.ArgumentError{Field: "sent_unix_ms", Reason: fmt.Sprintf("%d is before 1970: the sender's clock is wrong", ms)}).Err()
	}
	return nil
}

// HandoffDone implements pb.PeerServer: note that the caller holds
// nothing more of these partitions.
func (s *Server) HandoffDone(ctx context.Context, in *pb.HandoffDoneRequest) (*pb.HandoffDoneResponse, error) {
	parts := make([]int, len(in.GetPartitions()))
	for i, q := range in.GetPartitions() {
		parts[i] = int(q)
	}
	s.h.HandleHandoffDone(grpcapi.Incoming(ctx), in.GetOrigin(), parts)
	return &pb.HandoffDoneResponse{}, nil
}

// Replicate implements pb.PeerServer: keep the owner's states as this
// node's replicas of them, apart from its own; FAILED_PRECONDITION if it
// keeps none.
// (Register's servers decode the request with DecodeReplicate instead,
// and go on in keepReplicas as this does.)
func (s *Server) Replicate(ctx context.Context, in *pb.ReplicateRequest) (*pb.ReplicateResponse, error) {
	return s.keepReplicas(ctx, in.GetOrigin(), protoconv.FromProtoReplicate(in))
}

// keepReplicas hands a received replication to the Handler.
func (s *Server) keepReplicas(ctx context.Context, origin string, r peer.Replication) (*pb.ReplicateResponse, error) {
	if err := checkSent(protoconv.SentToProto(r.Sent)); err != nil {
		return nil, err
	}
	done, err := s.h.HandleReplicate(grpcapi.Incoming(ctx), origin, r)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return protoconv.ToProtoReplicated(done), nil
}

// Reset implements pb.PeerServer: drop this node's state for the key, here,
// never forwarded again. The node that received the public call resolved
// any policy; the Handler checks the numbers by this node's rules.
func (s *Server) Reset(ctx context.Context, in *pb.PeerResetRequest) (*pb.PeerResetResponse, error) {
	algo, err := protoconv.AlgorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	cal, err := protoconv.CalendarFromProto(in.GetCalendar(), in.GetTimeZone())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	r := peer.ResetRequest{Key: in.GetKey(), Window: limiter.WindowFromMS(in.GetWindowMs()), Algorithm: algo, Calendar: cal,
		AllWindows: in.GetAllWindows()}
	cleared, err := s.h.HandleReset(grpcapi.Incoming(ctx), in.GetOrigin(), r)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.PeerResetResponse{Cleared: uint32(cleared)}, nil
}

// Report implements pb.PeerServer.
func (s *Server) Report(ctx context.Context, in *pb.ReportRequest) (*pb.ReportResponse, error) {
	r := s.h.HandleReport(grpcapi.Incoming(ctx), in.GetOrigin(), protoconv.FromProtoReportRequest(in, peer.MaxTop))
	return protoconv.ToProtoReport(r), nil
}

// Inspect implements pb.PeerServer.
func (s *Server) Inspect(ctx context.Context, in *pb.PeerInspectRequest) (*pb.InspectResponse, error) {
	ov, err := s.h.HandleInspect(grpcapi.Incoming(ctx), in.GetOrigin(), peer.InspectQuery{Key: in.GetKey(),
		Limit: in.GetLimit(), Hits: in.GetHits()})
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return protoconv.ToProtoOwnerView(in.GetKey(), ov), nil
}

// maxLeaseUses bounds the leases of one settlement (a holder settles
// those of one owner at a time: a few per hot key).
const maxLeaseUses = 10_000

// Lease implements pb.PeerServer.
func (s *Server) Lease(ctx context.Context, in *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	req, err := protoconv.FromForwarded(in.GetCheck())
	if err != nil {
		return protoconv.ToProtoLease(peer.Result{Err: err}, peer.LeaseGrant{}), nil
	}
	res, g := s.h.HandleLease(grpcapi.Incoming(ctx), in.GetOrigin(), req, protoconv.FromProtoLeaseWant(in))
	return protoconv.ToProtoLease(res, g), nil
}

// Settle implements pb.PeerServer.
func (s *Server) Settle(ctx context.Context, in *pb.SettleRequest) (*pb.SettleResponse, error) {
	if len(in.GetUses()) > maxLeaseUses {
		return nil, grpcapi.Status(&limiter.ArgumentError{Field: "uses", Reason: fmt.Sprintf("%d; at most %d", len(in.GetUses()), maxLeaseUses)}).Err()
	}
	settled := s.h.HandleSettle(grpcapi.Incoming(ctx), in.GetOrigin(), protoconv.FromProtoLeaseUses(in.GetUses()))
	return &pb.SettleResponse{Settled: uint32(settled)}, nil
}

// ForwardStream implements pb.PeerServer: Forward for every batch of a
// long-lived stream, answered in order with its seq. The stream's origin
// (x-peerlimit-origin) was checked when it opened (the guard's Stream);
// each batch must name the same origin, and is checked again with Admit,
// so that a member that left or was refused since cannot go on
// forwarding.
func (s *Server) ForwardStream(stream pb.Peer_ForwardStreamServer) error {
	ctx := stream.Context()
	origin := grpcapi.FirstValue(ctx, grpcapi.OriginKey)
	for {
		in, err := stream.Recv()
		if err != nil {
			return grpcapi.EndOfStream(err)
		}
		arrived := time.Now()
		if !s.Drain.Enter() {
			return grpcapi.ErrDraining // not decided: its sender falls back for it
		}
		err = s.forwardBatch(ctx, stream, origin, arrived, in)
		s.Drain.Leave()
		if err != nil || s.Drain.Draining() {
			return err
		}
	}
}

// forwardBatch checks, decides and answers one batch of a ForwardStream.
func (s *Server) forwardBatch(ctx context.Context, stream pb.Peer_ForwardStreamServer, origin string, arrived time.Time, in *pb.ForwardRequest) error {
	if in.GetOrigin() != origin {
		return status.Errorf(codes.InvalidArgument, "peerlimit: origin %q differs from the stream's %q", logging.Clip(in.GetOrigin()), logging.Clip(origin))
	}
	if s.Admit != nil {
		if err := s.Admit(ctx, origin); err != nil {
			return err
		}
	}
	return stream.Send(&pb.ForwardResponse{Seq: in.GetSeq(), Results: s.forward(batchContext(ctx, arrived, in), in)})
}

// batchContext is the context a batch of a ForwardStream, which arrived
// at arrived, is decided in: the stream's, with the batch's request id
// and how long its sender waits (peer.WithSenderWait: the Handler takes
// back what it decided after that, and says so).
func batchContext(ctx context.Context, arrived time.Time, in *pb.ForwardRequest) context.Context {
	ctx = peer.WithRequestID(ctx, in.GetRequestId())
	return peer.WithSenderWait(ctx, arrived, time.Duration(in.GetWaitMs())*time.Millisecond)
}
