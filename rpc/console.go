package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/topk"
)

// The console's calls: Top and Inspect on the public API, Report and
// Inspect between members.

// Top implements pb.RateLimiterServer.
func (s *Server) Top(ctx context.Context, in *pb.TopRequest) (*pb.TopResponse, error) {
	n := int(in.GetN())
	if n == 0 {
		n = 10
	}
	t, err := s.svc.Top(grpcapi.Incoming(ctx), n)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.TopResponse{SinceUnixMs: t.Since.UnixMilli(), Checks: toProtoHotKeys(t.Checks), Denials: toProtoHotKeys(t.Denials),
		MembersAsked: uint32(t.MembersAsked), MembersAnswered: uint32(t.MembersAnswered)}, nil
}

// Inspect implements pb.RateLimiterServer.
func (s *Server) Inspect(ctx context.Context, in *pb.InspectRequest) (*pb.InspectResponse, error) {
	res, err := s.svc.Inspect(grpcapi.Incoming(ctx), route.InspectRequest{Key: in.GetKey(), Limit: in.GetLimit(), Hits: in.Hits,
		Policy: in.GetPolicy()})
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return ToProtoInspect(res), nil
}

// Report implements pb.PeerServer.
func (s *PeerServer) Report(ctx context.Context, in *pb.ReportRequest) (*pb.ReportResponse, error) {
	var since time.Time
	if in.GetSinceUnixMs() > 0 {
		since = time.UnixMilli(in.GetSinceUnixMs())
	}
	r := s.svc.HandleReport(grpcapi.Incoming(ctx), in.GetOrigin(), route.ReportRequest{Since: since, Top: int(min(in.GetTop(), route.MaxTop))})
	out := &pb.ReportResponse{Samples: make([]*pb.Sample, len(r.Samples)), HotSinceUnixMs: r.HotKeys.Since.UnixMilli(),
		Checks: toProtoHotKeys(r.HotKeys.Checks), Denials: toProtoHotKeys(r.HotKeys.Denials)}
	for i, smp := range r.Samples {
		out.Samples[i] = toProtoSample(smp)
	}
	return out, nil
}

// Inspect implements pb.PeerServer.
func (s *PeerServer) Inspect(ctx context.Context, in *pb.PeerInspectRequest) (*pb.InspectResponse, error) {
	ov, err := s.svc.HandleInspect(grpcapi.Incoming(ctx), in.GetOrigin(), route.PeerInspect{Key: in.GetKey(),
		Limit: in.GetLimit(), Hits: in.GetHits()})
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	return &pb.InspectResponse{Key: in.GetKey(), Limits: toProtoViews(ov.Limits), Leases: toProtoLeases(ov.Leases)}, nil
}

// Report asks to for its console report.
func (p *Peers) Report(ctx context.Context, to route.Route, r route.ReportRequest) (route.Report, error) {
	pr, err := p.get(to)
	if err != nil {
		return route.Report{}, err
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), p.cfg.Timeout)
	defer cancel()
	req := &pb.ReportRequest{Origin: p.self, Top: uint32(max(r.Top, 0))}
	if !r.Since.IsZero() {
		req.SinceUnixMs = r.Since.UnixMilli()
	}
	resp, err := pr.client.Report(ctx, req)
	if err != nil {
		return route.Report{}, &route.CallError{ID: id, Err: fmt.Errorf("report from %s: %w", to.ID, err)}
	}
	return fromProtoReport(resp), nil
}

// Inspect asks to for a key's state.
func (p *Peers) Inspect(ctx context.Context, to route.Route, q route.PeerInspect) (route.OwnerView, error) {
	pr, err := p.get(to)
	if err != nil {
		return route.OwnerView{}, err
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), p.cfg.Timeout)
	defer cancel()
	resp, err := pr.client.Inspect(ctx, &pb.PeerInspectRequest{Origin: p.self, Key: q.Key, Limit: q.Limit, Hits: q.Hits})
	if err != nil {
		return route.OwnerView{}, &route.CallError{ID: id, Err: fmt.Errorf("inspect on %s: %w", to.ID, refusal(err))}
	}
	return route.OwnerView{Limits: fromProtoViews(resp.GetLimits()), Leases: fromProtoLeases(resp.GetLeases())}, nil
}

// ToProtoInspect converts an inspection for the public API.
func ToProtoInspect(r route.InspectResult) *pb.InspectResponse {
	return &pb.InspectResponse{Key: r.Key, Owner: r.Owner, Replica: r.Replica, Partition: uint32(r.Partition),
		Limit: r.Limit, Hits: r.Hits, Limits: toProtoViews(r.Limits), Leases: toProtoLeases(r.Leases)}
}

func toProtoLeases(ls []route.LeaseInfo) []*pb.LeaseView {
	out := make([]*pb.LeaseView, len(ls))
	for i, l := range ls {
		out[i] = &pb.LeaseView{Holder: l.Holder, Hits: l.Hits, ExpiresInMs: l.ExpiresIn.Milliseconds()}
	}
	return out
}

func fromProtoLeases(ls []*pb.LeaseView) []route.LeaseInfo {
	out := make([]route.LeaseInfo, len(ls))
	for i, l := range ls {
		out[i] = route.LeaseInfo{Holder: l.GetHolder(), Hits: l.GetHits(), ExpiresIn: time.Duration(l.GetExpiresInMs()) * time.Millisecond}
	}
	return out
}

// FromProtoInspect converts a public API inspection back (the CLI's).
func FromProtoInspect(r *pb.InspectResponse) route.InspectResult {
	return route.InspectResult{Key: r.GetKey(), Owner: r.GetOwner(), Replica: r.GetReplica(), Partition: int(r.GetPartition()),
		Limit: r.GetLimit(), Hits: r.GetHits(), Limits: fromProtoViews(r.GetLimits()), Leases: fromProtoLeases(r.GetLeases())}
}

func toProtoViews(views []limiter.KeyView) []*pb.KeyView {
	out := make([]*pb.KeyView, len(views))
	for i, v := range views {
		pv := &pb.KeyView{Algorithm: pb.Algorithm(v.Algorithm), WindowMs: v.Window.Milliseconds(), Count: v.Count,
			ResetAfterMs: v.ResetAfter.Milliseconds(), NextAllowMs: v.NextAllow.Milliseconds()}
		if v.Algorithm == limiter.SlidingWindowCounter {
			pv.WindowStartUnixMs, pv.Previous, pv.Current = v.WindowStart.UnixMilli(), v.Previous, v.Current
		}
		for _, e := range v.Entries {
			pv.EntriesUnixMs = append(pv.EntriesUnixMs, e.UnixMilli())
		}
		out[i] = pv
	}
	return out
}

// fromProtoViews converts an owner's views; an algorithm this node does
// not know is shown as it came, never dropped.
func fromProtoViews(views []*pb.KeyView) []limiter.KeyView {
	out := make([]limiter.KeyView, len(views))
	for i, pv := range views {
		v := limiter.KeyView{Algorithm: limiter.Algorithm(pv.GetAlgorithm()), Window: time.Duration(pv.GetWindowMs()) * time.Millisecond,
			Count: pv.GetCount(), ResetAfter: time.Duration(pv.GetResetAfterMs()) * time.Millisecond,
			NextAllow: time.Duration(pv.GetNextAllowMs()) * time.Millisecond, Previous: pv.GetPrevious(), Current: pv.GetCurrent()}
		if v.Algorithm == limiter.SlidingWindowCounter {
			v.WindowStart = time.UnixMilli(pv.GetWindowStartUnixMs())
		}
		for _, e := range pv.GetEntriesUnixMs() {
			v.Entries = append(v.Entries, time.UnixMilli(e))
		}
		out[i] = v
	}
	return out
}

func toProtoHotKeys(es []topk.Entry) []*pb.HotKey {
	out := make([]*pb.HotKey, len(es))
	for i, e := range es {
		out[i] = &pb.HotKey{Key: e.Key, Count: e.Count, Error: e.Err}
	}
	return out
}

// FromProtoHotKeys converts hot keys from the wire.
func FromProtoHotKeys(ks []*pb.HotKey) []topk.Entry {
	out := make([]topk.Entry, len(ks))
	for i, k := range ks {
		out[i] = topk.Entry{Key: k.GetKey(), Count: k.GetCount(), Err: k.GetError()}
	}
	return out
}

func toProtoSample(s route.Sample) *pb.Sample {
	out := &pb.Sample{TimeUnixMs: s.Time.UnixMilli(), LocalAllowed: s.LocalAllowed, LocalDenied: s.LocalDenied,
		ForwardedAllowed: s.ForwardedAllowed, ForwardedDenied: s.ForwardedDenied, FallbackAllowed: s.FallbackAllowed,
		FallbackDenied: s.FallbackDenied, Errors: s.Errors, PeerChecks: s.PeerChecks, Degraded: s.Degraded, HandoffKeys: s.HandoffKeys}
	if s.ForwardP99 >= 0 {
		out.ForwardP99Ms = ptr(msOf(s.ForwardP99))
	}
	if s.ReplicationLagP99 >= 0 {
		out.ReplicationLagP99Ms = ptr(msOf(s.ReplicationLagP99))
	}
	return out
}

func fromProtoReport(r *pb.ReportResponse) route.Report {
	out := route.Report{Samples: make([]route.Sample, len(r.GetSamples())), HotKeys: limiter.HotKeys{
		Since: time.UnixMilli(r.GetHotSinceUnixMs()), Checks: FromProtoHotKeys(r.GetChecks()), Denials: FromProtoHotKeys(r.GetDenials())}}
	for i, s := range r.GetSamples() {
		out.Samples[i] = route.Sample{Time: time.UnixMilli(s.GetTimeUnixMs()), LocalAllowed: s.GetLocalAllowed(),
			LocalDenied: s.GetLocalDenied(), ForwardedAllowed: s.GetForwardedAllowed(), ForwardedDenied: s.GetForwardedDenied(),
			FallbackAllowed: s.GetFallbackAllowed(), FallbackDenied: s.GetFallbackDenied(), Errors: s.GetErrors(),
			PeerChecks: s.GetPeerChecks(), Degraded: s.GetDegraded(), HandoffKeys: s.GetHandoffKeys(), ForwardP99: -1, ReplicationLagP99: -1}
		if s.ForwardP99Ms != nil {
			out.Samples[i].ForwardP99 = fromMS(s.GetForwardP99Ms())
		}
		if s.ReplicationLagP99Ms != nil {
			out.Samples[i].ReplicationLagP99 = fromMS(s.GetReplicationLagP99Ms())
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMS(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
