package rpc

import (
	"context"
	"fmt"

	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Server serves peerlimit.v1.RateLimiter over a Service.
type Server struct {
	pb.UnimplementedRateLimiterServer
	svc *Service
	// MembersFunc answers Members; nil leaves it unimplemented.
	MembersFunc func() *pb.MembersResponse
}

var _ pb.RateLimiterServer = (*Server)(nil)

// NewServer adapts svc to the gRPC API.
func NewServer(svc *Service) *Server { return &Server{svc: svc} }

// Check implements pb.RateLimiterServer.
func (s *Server) Check(ctx context.Context, in *pb.CheckRequest) (*pb.CheckResponse, error) {
	req, err := FromProto(in)
	if err != nil {
		return nil, Status(err).Err()
	}
	res := s.svc.Check(ctx, req)
	if res.Err != nil {
		return nil, Status(res.Err).Err()
	}
	return ToProto(res), nil
}

// CheckBatch implements pb.RateLimiterServer: every item gets its own result.
func (s *Server) CheckBatch(ctx context.Context, in *pb.CheckBatchRequest) (*pb.CheckBatchResponse, error) {
	if n := len(in.GetChecks()); n > s.svc.MaxBatch() {
		return nil, Status(fmt.Errorf("checks: %d items; the maximum is %d: %w", n, s.svc.MaxBatch(), ErrBatchTooLarge)).Err()
	}
	b := fromProtoBatch(in.GetChecks())
	results, err := s.svc.CheckBatch(ctx, b.reqs)
	if err != nil {
		return nil, Status(err).Err()
	}
	return &pb.CheckBatchResponse{Results: b.answer(results)}, nil
}

// protoBatch is a batch of wire checks converted for the Service: the
// valid ones as requests, the invalid ones already answered.
type protoBatch struct {
	reqs    []limiter.Request
	idx     []int // result slot of each request
	results []*pb.CheckResult
}

func fromProtoBatch(checks []*pb.CheckRequest) protoBatch {
	b := protoBatch{reqs: make([]limiter.Request, 0, len(checks)), idx: make([]int, 0, len(checks)),
		results: make([]*pb.CheckResult, len(checks))}
	for i, c := range checks {
		req, err := FromProto(c)
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
func (b protoBatch) answer(results []Result) []*pb.CheckResult {
	for j, r := range results {
		b.results[b.idx[j]] = ToProtoResult(r)
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

func errorResult(err error) *pb.CheckResult {
	return &pb.CheckResult{Result: &pb.CheckResult_Error{Error: &pb.Error{
		Code: uint32(Code(err)), Field: Field(err), Message: err.Error(),
	}}}
}

// FromProto converts and range-checks the wire request; the store checks the
// rest.
func FromProto(in *pb.CheckRequest) (limiter.Request, error) {
	var algo limiter.Algorithm
	switch in.GetAlgorithm() {
	case pb.Algorithm_SLIDING_WINDOW_COUNTER:
		algo = limiter.SlidingWindowCounter
	case pb.Algorithm_SLIDING_WINDOW_LOG:
		algo = limiter.SlidingWindowLog
	default:
		return limiter.Request{}, &limiter.ArgumentError{Field: "algorithm", Reason: fmt.Sprintf("unknown value %d; want SLIDING_WINDOW_COUNTER (0) or SLIDING_WINDOW_LOG (1)", in.GetAlgorithm())}
	}
	var hits *int64
	if in != nil && in.Hits != nil {
		hits = in.Hits
	}
	return NewRequest(in.GetKey(), in.GetLimit(), in.GetWindowMs(), algo, hits)
}

// ToProto converts a decided result to the wire response.
func ToProto(r Result) *pb.CheckResponse {
	d := r.Decision
	return &pb.CheckResponse{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		CurrentCount: d.CurrentCount,
		RetryAfterMs: d.RetryAfter.Milliseconds(),
		ResetAfterMs: d.ResetAfter.Milliseconds(),
		Owner:        r.Owner,
		Degraded:     r.Degraded,
	}
}
