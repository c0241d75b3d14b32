package rpc

import (
	"context"

	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/security/scope"
)

// Server serves peerlimit.v1.RateLimiter over a route.Service.
type Server struct {
	pb.UnimplementedRateLimiterServer
	svc *route.Service
	// MembersFunc answers Members; nil leaves it unimplemented.
	MembersFunc func() *pb.MembersResponse
	// Console answers Top (console.Cluster); nil leaves it unimplemented.
	Console interface {
		Top(ctx context.Context, n int) (console.TopKeys, error)
	}
	// Drain, if set, ends CheckStreams when the node shuts down.
	Drain *grpcapi.Drain
}

var _ pb.RateLimiterServer = (*Server)(nil)

// NewServer adapts svc to the gRPC API.
func NewServer(svc *route.Service) *Server { return &Server{svc: svc} }

// Check implements pb.RateLimiterServer.
func (s *Server) Check(ctx context.Context, in *pb.CheckRequest) (*pb.CheckResponse, error) {
	req, err := s.requestIn(ctx)(in)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	res := s.svc.Check(grpcapi.Incoming(ctx), req)
	if res.Err != nil {
		return nil, grpcapi.Status(res.Err).Err()
	}
	return protoconv.ToProto(res), nil
}

// CheckBatch implements pb.RateLimiterServer: every item gets its own result.
func (s *Server) CheckBatch(ctx context.Context, in *pb.CheckBatchRequest) (*pb.CheckBatchResponse, error) {
	if err := s.svc.BatchTooLarge("checks", len(in.GetChecks())); err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	if in.GetAllOrNothing() {
		return s.checkAll(ctx, in.GetChecks())
	}
	b := protoconv.FromProtoBatch(in.GetChecks(), s.requestIn(ctx))
	results, err := s.svc.CheckBatch(grpcapi.Incoming(ctx), b.Reqs)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.CheckBatchResponse{Results: b.Answer(results)}, nil
}

// checkAll answers an all-or-nothing batch: an item that does not convert
// refuses the whole call, naming it (checks[i].field), since nothing of
// the batch may count then.
func (s *Server) checkAll(ctx context.Context, checks []*pb.CheckRequest) (*pb.CheckBatchResponse, error) {
	reqs := make([]limiter.Request, len(checks))
	conv := s.requestIn(ctx)
	for i, c := range checks {
		r, err := conv(c)
		if err != nil {
			return nil, grpcapi.Status(route.ItemError(i, err)).Err()
		}
		reqs[i] = r
	}
	results, err := s.svc.CheckAll(grpcapi.Incoming(ctx), reqs)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	out := make([]*pb.CheckResult, len(results))
	slab := protoconv.NewResultSlab(len(results))
	for i, r := range results {
		out[i] = slab.Put(i, r)
	}
	return &pb.CheckBatchResponse{Results: out}, nil
}

// CheckStream implements pb.RateLimiterServer: CheckBatch for every batch
// of a long-lived stream, answered in order with its seq. A batch over
// the maximum is answered with that error, and the stream goes on.
func (s *Server) CheckStream(stream pb.RateLimiter_CheckStreamServer) error {
	ctx := grpcapi.Incoming(stream.Context())
	for {
		in, err := stream.Recv()
		if err != nil {
			return grpcapi.EndOfStream(err)
		}
		if !s.Drain.Enter() {
			return grpcapi.ErrDraining // not decided: the client retries it elsewhere
		}
		err = stream.Send(s.checkStreamBatch(ctx, in))
		s.Drain.Leave()
		if err != nil || s.Drain.Draining() {
			return err
		}
	}
}

// checkStreamBatch decides one batch of a CheckStream.
func (s *Server) checkStreamBatch(ctx context.Context, in *pb.CheckStreamRequest) *pb.CheckStreamResponse {
	out := &pb.CheckStreamResponse{Seq: in.GetSeq()}
	if err := s.svc.BatchTooLarge("checks", len(in.GetChecks())); err != nil {
		out.Error = protoconv.ErrorProto(err)
		return out
	}
	b := protoconv.FromProtoBatch(in.GetChecks(), s.requestIn(ctx))
	results, err := s.svc.CheckBatch(ctx, b.Reqs)
	if err != nil {
		out.Error = protoconv.ErrorProto(err)
	} else {
		out.Results = b.Answer(results)
	}
	return out
}

// Members implements pb.RateLimiterServer.
func (s *Server) Members(ctx context.Context, _ *pb.MembersRequest) (*pb.MembersResponse, error) {
	if s.MembersFunc == nil {
		return s.UnimplementedRateLimiterServer.Members(ctx, nil)
	}
	return s.MembersFunc(), nil
}

// Reset implements pb.RateLimiterServer.
func (s *Server) Reset(ctx context.Context, in *pb.ResetRequest) (*pb.ResetResponse, error) {
	algo, err := protoconv.AlgorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	cal, err := protoconv.CalendarFromProto(in.GetCalendar(), in.GetTimeZone())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	r, err := s.svc.NewResetRequest(in.GetKey(), in.GetWindowMs(), algo, in.GetAlgorithm() != pb.Algorithm_SLIDING_WINDOW_COUNTER,
		cal, in.GetPolicy(), in.GetAllWindows())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	res, err := s.svc.Reset(grpcapi.Incoming(ctx), r)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.ResetResponse{Owner: res.Owner, Existed: res.Existed(), Cleared: uint32(res.Cleared),
		MembersAsked: uint32(res.MembersAsked), MembersAcknowledged: uint32(res.MembersAcknowledged),
		CopiesCleared: uint32(res.CopiesCleared)}, nil
}

// request converts a public API check: a policy name is resolved here, on
// the node that received it; anything else is FromProto's. A check without
// a policy pays one string-length test for the feature.
// requestIn returns request for a call whose context is ctx: an op the
// caller's scopes (scope.FromContext) do not allow is refused
// PermissionDenied, on field op.
func (s *Server) requestIn(ctx context.Context) func(*pb.CheckRequest) (limiter.Request, error) {
	scopes := scope.FromContext(ctx)
	if scopes == scope.All {
		return s.request
	}
	return func(in *pb.CheckRequest) (limiter.Request, error) {
		req, err := s.request(in)
		if err == nil {
			err = scopes.AllowOp(req.Op)
		}
		return req, err
	}
}

func (s *Server) request(in *pb.CheckRequest) (limiter.Request, error) {
	if in.GetPolicy() == "" {
		return protoconv.FromProto(in)
	}
	if _, err := protoconv.AlgorithmFromProto(in.GetAlgorithm()); err != nil {
		return limiter.Request{}, err
	}
	given := route.InlineField(in.GetLimit(), in.GetWindowMs(), in.GetAlgorithm() != pb.Algorithm_SLIDING_WINDOW_COUNTER)
	switch {
	case given != "":
	case in.GetCalendar() != pb.CalendarUnit_CALENDAR_NONE:
		given = "calendar"
	case in.GetTimeZone() != "":
		given = "time_zone"
	case in.Burst != nil:
		given = "burst"
	}
	r, err := s.svc.PolicyRequest(in.GetPolicy(), in.GetKey(), in.Hits, given)
	if err != nil {
		return r, err
	}
	return r, protoconv.SetOp(&r, in)
}
