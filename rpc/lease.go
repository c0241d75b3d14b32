package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// Budget leases between members (route/lease.go): Lease and Settle.

// maxLeaseUses bounds the leases of one settlement (a holder settles
// those of one owner at a time: a few per hot key).
const maxLeaseUses = 10_000

// Lease implements pb.PeerServer.
func (s *PeerServer) Lease(ctx context.Context, in *pb.LeaseRequest) (*pb.LeaseResponse, error) {
	req, err := FromProto(in.GetCheck())
	if err != nil {
		return &pb.LeaseResponse{Result: ToProtoResult(route.Result{Err: err})}, nil
	}
	res, g := s.svc.HandleLease(grpcapi.Incoming(ctx), in.GetOrigin(), req, max(in.GetWant(), 0))
	return &pb.LeaseResponse{Result: ToProtoResult(res), Id: g.ID, Hits: g.Hits, DurationMs: g.Duration.Milliseconds(),
		ResetAfterMs: g.ResetAfter.Milliseconds(), RefillAfterMs: g.RefillAfter.Milliseconds()}, nil
}

// Settle implements pb.PeerServer.
func (s *PeerServer) Settle(ctx context.Context, in *pb.SettleRequest) (*pb.SettleResponse, error) {
	if len(in.GetUses()) > maxLeaseUses {
		return nil, grpcapi.Status(&limiter.ArgumentError{Field: "uses", Reason: fmt.Sprintf("%d; at most %d", len(in.GetUses()), maxLeaseUses)}).Err()
	}
	uses := make([]route.LeaseUse, len(in.GetUses()))
	for i, u := range in.GetUses() {
		uses[i] = route.LeaseUse{ID: u.GetId(), Used: u.GetUsed(), Offsets: make([]time.Duration, len(u.GetOffsetsMs()))}
		for j, o := range u.GetOffsetsMs() {
			uses[i].Offsets[j] = time.Duration(min(max(o, 0), int64(time.Hour/time.Millisecond))) * time.Millisecond
		}
	}
	return &pb.SettleResponse{Settled: uint32(s.svc.HandleSettle(grpcapi.Incoming(ctx), in.GetOrigin(), uses))}, nil
}

// Lease asks to, req's owner, to decide req and lend this node up to want
// hits of its limit.
func (p *Peers) Lease(ctx context.Context, to route.Route, req limiter.Request, want int64) (route.Result, route.LeaseGrant, error) {
	pr, err := p.get(to)
	if err != nil {
		return route.Result{}, route.LeaseGrant{}, err
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), p.cfg.Timeout)
	defer cancel()
	start := time.Now()
	resp, err := pr.client.Lease(ctx, &pb.LeaseRequest{Origin: p.self, Check: ToProtoRequest(req), Want: want})
	p.metrics.ForwardCall(start, 1, err)
	if err != nil {
		return route.Result{}, route.LeaseGrant{}, &route.CallError{ID: id, Err: fmt.Errorf("lease from %s: %w", to.ID, err)}
	}
	g := route.LeaseGrant{ID: resp.GetId(), Hits: resp.GetHits(), Duration: time.Duration(resp.GetDurationMs()) * time.Millisecond,
		ResetAfter: time.Duration(resp.GetResetAfterMs()) * time.Millisecond, RefillAfter: time.Duration(resp.GetRefillAfterMs()) * time.Millisecond}
	if g.Hits < 0 || g.Duration < 0 || g.Duration > time.Minute { // not what any version lends: take nothing
		g = route.LeaseGrant{}
	}
	return FromProtoResult(resp.GetResult()), g, nil
}

// Settle reports to what this node used of the leases it holds from it.
func (p *Peers) Settle(ctx context.Context, to route.Route, uses []route.LeaseUse) (int, error) {
	pr, err := p.get(to)
	if err != nil {
		return 0, err
	}
	req := &pb.SettleRequest{Origin: p.self, Uses: make([]*pb.LeaseUse, len(uses))}
	for i, u := range uses {
		pu := &pb.LeaseUse{Id: u.ID, Used: u.Used, OffsetsMs: make([]int64, len(u.Offsets))}
		for j, o := range u.Offsets {
			pu.OffsetsMs[j] = o.Milliseconds()
		}
		req.Uses[i] = pu
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), p.cfg.Timeout)
	defer cancel()
	resp, err := pr.client.Settle(ctx, req)
	if err != nil {
		return 0, &route.CallError{ID: id, Err: fmt.Errorf("settle %d leases with %s: %w", len(uses), to.ID, err)}
	}
	return int(resp.GetSettled()), nil
}
