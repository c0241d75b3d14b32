package rpc

import (
	"context"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// The console's calls on the public API: Top and Inspect.

// Top implements pb.RateLimiterServer.
func (s *Server) Top(ctx context.Context, in *pb.TopRequest) (*pb.TopResponse, error) {
	n := int(in.GetN())
	if n == 0 {
		n = 10
	}
	if s.Console == nil {
		return s.UnimplementedRateLimiterServer.Top(ctx, in)
	}
	t, err := s.Console.Top(grpcapi.Incoming(ctx), n)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.TopResponse{SinceUnixMs: t.Since.UnixMilli(), Checks: protoconv.ToProtoHotKeys(t.Checks), Denials: protoconv.ToProtoHotKeys(t.Denials),
		MembersAsked: uint32(t.MembersAsked), MembersAnswered: uint32(t.MembersAnswered)}, nil
}

// Inspect implements pb.RateLimiterServer.
func (s *Server) Inspect(ctx context.Context, in *pb.InspectRequest) (*pb.InspectResponse, error) {
	res, err := s.svc.Queries.Inspect(grpcapi.Incoming(ctx), route.InspectRequest{Key: in.GetKey(), Limit: in.GetLimit(), Hits: in.Hits,
		Policy: in.GetPolicy()})
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return ToProtoInspect(res), nil
}

// ToProtoInspect converts an inspection for the public API.
func ToProtoInspect(r route.InspectResult) *pb.InspectResponse {
	return &pb.InspectResponse{Key: r.Key, Owner: r.Owner, Replica: r.Replica, Partition: uint32(r.Partition),
		Limit: r.Limit, Hits: r.Hits, Limits: protoconv.ToProtoViews(r.Limits), Leases: protoconv.ToProtoLeases(r.Leases),
		Reservations: protoconv.ToProtoReservations(r.Reservations)}
}

// FromProtoInspect converts a public API inspection back (the CLI's).
func FromProtoInspect(r *pb.InspectResponse) route.InspectResult {
	return route.InspectResult{Key: r.GetKey(), Owner: r.GetOwner(), Replica: r.GetReplica(), Partition: int(r.GetPartition()),
		Limit: r.GetLimit(), Hits: r.GetHits(), Limits: protoconv.FromProtoViews(r.GetLimits()), Leases: protoconv.FromProtoLeases(r.GetLeases()),
		Reservations: protoconv.FromProtoReservations(r.GetReservations())}
}
