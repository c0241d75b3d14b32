package rpc

import (
	"context"
	"fmt"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// Server serves peerlimit.v1.RateLimiter over a route.Service.
type Server struct {
	pb.UnimplementedRateLimiterServer
	svc *route.Service
	// MembersFunc answers Members; nil leaves it unimplemented.
	MembersFunc func() *pb.MembersResponse
	// Drain, if set, ends CheckStreams when the node shuts down.
	Drain *Drain
}

var _ pb.RateLimiterServer = (*Server)(nil)

// NewServer adapts svc to the gRPC API.
func NewServer(svc *route.Service) *Server { return &Server{svc: svc} }

// Check implements pb.RateLimiterServer.
func (s *Server) Check(ctx context.Context, in *pb.CheckRequest) (*pb.CheckResponse, error) {
	req, err := s.request(in)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	res := s.svc.Check(grpcapi.Incoming(ctx), req)
	if res.Err != nil {
		return nil, grpcapi.Status(res.Err).Err()
	}
	return ToProto(res), nil
}

// CheckBatch implements pb.RateLimiterServer: every item gets its own result.
func (s *Server) CheckBatch(ctx context.Context, in *pb.CheckBatchRequest) (*pb.CheckBatchResponse, error) {
	if n := len(in.GetChecks()); n > s.svc.MaxBatch() {
		return nil, grpcapi.Status(fmt.Errorf("checks: %d items; the maximum is %d: %w", n, s.svc.MaxBatch(), route.ErrBatchTooLarge)).Err()
	}
	b := fromProtoBatch(in.GetChecks(), s.request)
	results, err := s.svc.CheckBatch(grpcapi.Incoming(ctx), b.reqs)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.CheckBatchResponse{Results: b.answer(results)}, nil
}

// CheckStream implements pb.RateLimiterServer: CheckBatch for every batch
// of a long-lived stream, answered in order with its seq. A batch over
// the maximum is answered with that error, and the stream goes on.
func (s *Server) CheckStream(stream pb.RateLimiter_CheckStreamServer) error {
	ctx := grpcapi.Incoming(stream.Context())
	for {
		in, err := stream.Recv()
		if err != nil {
			return endOfStream(err)
		}
		if !s.Drain.enter() {
			return errDraining // not decided: the client retries it elsewhere
		}
		err = stream.Send(s.checkStreamBatch(ctx, in))
		s.Drain.leave()
		if err != nil || s.Drain.draining() {
			return err
		}
	}
}

// checkStreamBatch decides one batch of a CheckStream.
func (s *Server) checkStreamBatch(ctx context.Context, in *pb.CheckStreamRequest) *pb.CheckStreamResponse {
	out := &pb.CheckStreamResponse{Seq: in.GetSeq()}
	if n := len(in.GetChecks()); n > s.svc.MaxBatch() {
		out.Error = errorProto(fmt.Errorf("checks: %d items; the maximum is %d: %w", n, s.svc.MaxBatch(), route.ErrBatchTooLarge))
		return out
	}
	b := fromProtoBatch(in.GetChecks(), s.request)
	results, err := s.svc.CheckBatch(ctx, b.reqs)
	if err != nil {
		out.Error = errorProto(err)
	} else {
		out.Results = b.answer(results)
	}
	return out
}

// protoBatch is a batch of wire checks converted for the Service: the
// valid ones as requests, the invalid ones already answered.
type protoBatch struct {
	reqs    []limiter.Request
	idx     []int // result slot of each request
	results []*pb.CheckResult
}

// fromProtoBatch converts checks with conv: the public API resolves
// policies, the forwarding API takes numbers only.
func fromProtoBatch(checks []*pb.CheckRequest, conv func(*pb.CheckRequest) (limiter.Request, error)) protoBatch {
	b := protoBatch{reqs: make([]limiter.Request, 0, len(checks)), idx: make([]int, 0, len(checks)),
		results: make([]*pb.CheckResult, len(checks))}
	for i, c := range checks {
		req, err := conv(c)
		if err != nil {
			b.results[i] = errorResult(err)
			continue
		}
		b.reqs = append(b.reqs, req)
		b.idx = append(b.idx, i)
	}
	return b
}

// answer fills in the decided requests' results, one per request, and
// returns every result in the batch's order.
func (b protoBatch) answer(results []route.Result) []*pb.CheckResult {
	slab := newResultSlab(len(results))
	for j, r := range results {
		b.results[b.idx[j]] = slab.put(j, r)
	}
	return b.results
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
	algo, err := algorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	r, err := s.svc.NewResetRequest(in.GetKey(), in.GetWindowMs(), algo, in.GetAlgorithm() != pb.Algorithm_SLIDING_WINDOW_COUNTER,
		in.GetPolicy(), in.GetAllWindows())
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
func (s *Server) request(in *pb.CheckRequest) (limiter.Request, error) {
	if in.GetPolicy() == "" {
		return FromProto(in)
	}
	if _, err := algorithmFromProto(in.GetAlgorithm()); err != nil {
		return limiter.Request{}, err
	}
	given := route.InlineField(in.GetLimit(), in.GetWindowMs(), in.GetAlgorithm() != pb.Algorithm_SLIDING_WINDOW_COUNTER)
	return s.svc.PolicyRequest(in.GetPolicy(), in.GetKey(), in.Hits, given)
}

func errorResult(err error) *pb.CheckResult {
	return &pb.CheckResult{Result: &pb.CheckResult_Error{Error: errorProto(err)}}
}

func errorProto(err error) *pb.Error {
	return &pb.Error{Code: uint32(grpcapi.Code(err)), Field: route.Field(err), Message: err.Error()}
}

// FromProto converts and range-checks a wire request that carries its
// numbers; the store checks the rest. A policy name is refused: only the
// public API's Server resolves policies (on the node that received the
// request), and a forwarded check always carries numbers.
func FromProto(in *pb.CheckRequest) (limiter.Request, error) {
	algo, err := algorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return limiter.Request{}, err
	}
	if in.GetPolicy() != "" {
		return limiter.Request{}, &limiter.ArgumentError{Field: "policy",
			Reason: "not accepted on this path: a forwarded check carries limit, window_ms and algorithm, resolved by the node that received it"}
	}
	var hits *int64
	if in != nil && in.Hits != nil {
		hits = in.Hits
	}
	return route.NewRequest(in.GetKey(), in.GetLimit(), in.GetWindowMs(), algo, hits)
}

func algorithmFromProto(a pb.Algorithm) (limiter.Algorithm, error) {
	switch a {
	case pb.Algorithm_SLIDING_WINDOW_COUNTER:
		return limiter.SlidingWindowCounter, nil
	case pb.Algorithm_SLIDING_WINDOW_LOG:
		return limiter.SlidingWindowLog, nil
	}
	return 0, &limiter.ArgumentError{Field: "algorithm", Reason: fmt.Sprintf("unknown value %d; want SLIDING_WINDOW_COUNTER (0) or SLIDING_WINDOW_LOG (1)", a)}
}

// ToProto converts a decided result to the wire response.
func ToProto(r route.Result) *pb.CheckResponse {
	out := new(pb.CheckResponse)
	fillProto(out, r)
	return out
}

// fillProto sets the fields of a fresh out from r.
func fillProto(out *pb.CheckResponse, r route.Result) {
	d := r.Decision
	out.Allowed = d.Allowed
	out.Limit = d.Limit
	out.Remaining = d.Remaining
	out.CurrentCount = d.CurrentCount
	out.RetryAfterMs = d.RetryAfter.Milliseconds()
	out.ResetAfterMs = d.ResetAfter.Milliseconds()
	out.RefillAfterMs = d.RefillAfter.Milliseconds()
	out.Owner = r.Owner
	out.Degraded = r.Degraded
}
