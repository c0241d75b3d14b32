package protoconv

import (
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/topk"
)

// The console's messages: inspections, hot keys, members' reports.

// ToProtoReservations converts the reservations open on a key.
func ToProtoReservations(rs []limiter.OpenReservation) []*pb.ReservationView {
	out := make([]*pb.ReservationView, len(rs))
	for i, r := range rs {
		out[i] = &pb.ReservationView{Algorithm: pb.Algorithm(r.Algorithm), WindowMs: r.Window.Milliseconds(), Hits: r.Hits,
			Hold: r.Hold, AgeMs: r.Age.Milliseconds(), ExpiresInMs: r.ExpiresIn.Milliseconds()}
		out[i].Calendar, out[i].TimeZone = CalendarToProto(r.Calendar)
	}
	return out
}

// FromProtoReservations converts them back, at most
// peer.MaxReservationsShown.
func FromProtoReservations(rs []*pb.ReservationView) []limiter.OpenReservation {
	rs = rs[:min(len(rs), peer.MaxReservationsShown)]
	out := make([]limiter.OpenReservation, len(rs))
	for i, r := range rs {
		out[i] = limiter.OpenReservation{Algorithm: limiter.Algorithm(min(max(r.GetAlgorithm(), 0), 255)),
			Window: limiter.WindowFromMS(r.GetWindowMs()), Hits: r.GetHits(), Hold: r.GetHold(),
			Age: limiter.WindowFromMS(r.GetAgeMs()), ExpiresIn: limiter.WindowFromMS(r.GetExpiresInMs()),
			Calendar: calendarFromMember(r.GetCalendar(), r.GetTimeZone())}
	}
	return out
}

// ToProtoLeases converts the leases lent on a key.
func ToProtoLeases(ls []peer.LeaseInfo) []*pb.LeaseView {
	out := make([]*pb.LeaseView, len(ls))
	for i, l := range ls {
		out[i] = &pb.LeaseView{Holder: l.Holder, Hits: l.Hits, ExpiresInMs: l.ExpiresIn.Milliseconds()}
	}
	return out
}

// FromProtoLeases converts them back.
func FromProtoLeases(ls []*pb.LeaseView) []peer.LeaseInfo {
	out := make([]peer.LeaseInfo, len(ls))
	for i, l := range ls {
		out[i] = peer.LeaseInfo{Holder: l.GetHolder(), Hits: l.GetHits(), ExpiresIn: time.Duration(l.GetExpiresInMs()) * time.Millisecond}
	}
	return out
}

// ToProtoViews converts a key's views.
func ToProtoViews(views []limiter.KeyView) []*pb.KeyView {
	out := make([]*pb.KeyView, len(views))
	for i, v := range views {
		pv := &pb.KeyView{Algorithm: pb.Algorithm(v.Algorithm), WindowMs: v.Window.Milliseconds(), Count: v.Count,
			ResetAfterMs: v.ResetAfter.Milliseconds(), NextAllowMs: v.NextAllow.Milliseconds()}
		pv.Calendar, pv.TimeZone = CalendarToProto(v.Calendar)
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

// FromProtoViews converts an owner's views; an algorithm this node does
// not know is shown as it came, never dropped.
func FromProtoViews(views []*pb.KeyView) []limiter.KeyView {
	out := make([]limiter.KeyView, len(views))
	for i, pv := range views {
		v := limiter.KeyView{Algorithm: limiter.Algorithm(pv.GetAlgorithm()), Window: time.Duration(pv.GetWindowMs()) * time.Millisecond,
			Count: pv.GetCount(), ResetAfter: time.Duration(pv.GetResetAfterMs()) * time.Millisecond,
			NextAllow: time.Duration(pv.GetNextAllowMs()) * time.Millisecond, Previous: pv.GetPrevious(), Current: pv.GetCurrent(),
			Calendar: calendarFromMember(pv.GetCalendar(), pv.GetTimeZone())}
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

// ToProtoHotKeys converts hot keys for the wire.
func ToProtoHotKeys(es []topk.Entry) []*pb.HotKey {
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

// ToProtoSample converts one second of a member's rates.
func ToProtoSample(s peer.Sample) *pb.Sample {
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

// FromProtoReport converts a member's report.
func FromProtoReport(r *pb.ReportResponse) peer.Report {
	out := peer.Report{Samples: make([]peer.Sample, len(r.GetSamples())), HotKeys: limiter.HotKeys{
		Since: time.UnixMilli(r.GetHotSinceUnixMs()), Checks: FromProtoHotKeys(r.GetChecks()), Denials: FromProtoHotKeys(r.GetDenials())}}
	for i, s := range r.GetSamples() {
		out.Samples[i] = peer.Sample{Time: time.UnixMilli(s.GetTimeUnixMs()), LocalAllowed: s.GetLocalAllowed(),
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

// ToProtoReport converts a member's report for the wire.
func ToProtoReport(r peer.Report) *pb.ReportResponse {
	out := &pb.ReportResponse{Samples: make([]*pb.Sample, len(r.Samples)), HotSinceUnixMs: r.HotKeys.Since.UnixMilli(),
		Checks: ToProtoHotKeys(r.HotKeys.Checks), Denials: ToProtoHotKeys(r.HotKeys.Denials)}
	for i, smp := range r.Samples {
		out.Samples[i] = ToProtoSample(smp)
	}
	return out
}

// ToProtoReportRequest converts a report request from origin.
func ToProtoReportRequest(origin string, r peer.ReportRequest) *pb.ReportRequest {
	req := &pb.ReportRequest{Origin: origin, Top: uint32(max(r.Top, 0))}
	if !r.Since.IsZero() {
		req.SinceUnixMs = r.Since.UnixMilli()
	}
	return req
}

// FromProtoReportRequest converts a received report request, its list
// length capped at maxTop.
func FromProtoReportRequest(in *pb.ReportRequest, maxTop int) peer.ReportRequest {
	var since time.Time
	if in.GetSinceUnixMs() > 0 {
		since = time.UnixMilli(in.GetSinceUnixMs())
	}
	return peer.ReportRequest{Since: since, Top: int(min(in.GetTop(), uint32(maxTop)))}
}

// ToProtoOwnerView converts what an owner read of a key.
func ToProtoOwnerView(key string, ov peer.OwnerView) *pb.InspectResponse {
	return &pb.InspectResponse{Key: key, Limits: ToProtoViews(ov.Limits), Leases: ToProtoLeases(ov.Leases),
		Reservations: ToProtoReservations(ov.Reservations)}
}

// FromProtoOwnerView converts it back.
func FromProtoOwnerView(resp *pb.InspectResponse) peer.OwnerView {
	return peer.OwnerView{Limits: FromProtoViews(resp.GetLimits()), Leases: FromProtoLeases(resp.GetLeases()),
		Reservations: FromProtoReservations(resp.GetReservations())}
}
