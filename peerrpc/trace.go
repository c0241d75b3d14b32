package peerrpc

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Attributes this package adds to the caller's forward span (package
// route starts it): the batch that carried the caller's checks, which
// may hold other callers' checks too. Of several batches, the largest.
const (
	attrBatchSize = attribute.Key("peerlimit.forward.batch_size")
	attrRequestID = attribute.Key("peerlimit.request_id") // the batch's, as both nodes' logs name it
	attrChecks    = attribute.Key("peerlimit.forward.checks")
)

// noteBatch adds the size and request id of the batch that carried the
// caller's checks (none: size 0) to the caller's span, if it records.
func noteBatch(span trace.Span, size int, id string) {
	if size > 0 && span.IsRecording() {
		span.SetAttributes(attrBatchSize.Int(size), attrRequestID.String(id))
	}
}

// sampledParent is the span context a forward carries to the owner for
// the caller's check: its forward span's, when its trace is sampled; nil
// otherwise, so that an unsampled check carries nothing. span is the
// caller's (trace.SpanFromContext: one context lookup per forward, for
// this and noteBatch).
func sampledParent(span trace.Span) *trace.SpanContext {
	sc := span.SpanContext()
	if !sc.IsSampled() {
		return nil
	}
	return &sc
}

// traceParents lists the traced checks of a batch for its ForwardRequest;
// nil when none is.
func traceParents(items []fwdItem) []*pb.TraceParent {
	var out []*pb.TraceParent
	for i, it := range items {
		if it.span == nil {
			continue
		}
		tid, sid := it.span.TraceID(), it.span.SpanID()
		out = append(out, &pb.TraceParent{Check: uint32(i), TraceId: tid[:], SpanId: sid[:], Flags: uint32(it.span.TraceFlags())})
	}
	return out
}

// Attributes of the owner's span.
const (
	attrNode     = attribute.Key("peerlimit.node.id")
	attrOrigin   = attribute.Key("peerlimit.origin")
	attrAllowed  = attribute.Key("peerlimit.allowed")
	attrDegraded = attribute.Key("peerlimit.degraded")
)

// decideSpanName is the owner's span of one forwarded check.
const decideSpanName = "peerlimit.decide"

// startDecideSpans starts, on the owner, a span for each traced check of
// in, a child of the span its sender named, and returns what ends them
// with the checks' answers. A trace parent that names no check of the
// batch, or an invalid span, is ignored: whatever a peer sends, nothing
// fails for it. Without a tracer, or traced checks, it costs a nil check.
func (s *Server) startDecideSpans(ctx context.Context, in *pb.ForwardRequest) func([]*pb.CheckResult) {
	traces := in.GetTraces()
	if s.Tracer == nil || len(traces) == 0 {
		return func([]*pb.CheckResult) {}
	}
	n := len(in.GetChecks())
	spans := make(map[int]trace.Span, min(len(traces), n))
	for _, tp := range traces {
		parent, ok := remoteParent(tp)
		if !ok || int(tp.GetCheck()) >= n || spans[int(tp.GetCheck())] != nil {
			continue
		}
		_, span := s.Tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), decideSpanName,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrNode.String(s.NodeID), attrOrigin.String(in.GetOrigin()), attrChecks.Int(n)))
		spans[int(tp.GetCheck())] = span
	}
	return func(results []*pb.CheckResult) {
		for i, span := range spans {
			if i < len(results) {
				if r := results[i].GetResponse(); r != nil {
					span.SetAttributes(attrAllowed.Bool(r.GetAllowed()), attrDegraded.Bool(r.GetDegraded()))
				} else if e := results[i].GetError(); e != nil {
					span.SetStatus(otelcodes.Error, e.GetMessage())
				}
			}
			span.End()
		}
	}
}

// remoteParent reads a TraceParent as a span context, if it is a valid
// one.
func remoteParent(tp *pb.TraceParent) (trace.SpanContext, bool) {
	var tid trace.TraceID
	var sid trace.SpanID
	if len(tp.GetTraceId()) != len(tid) || len(tp.GetSpanId()) != len(sid) || tp.GetFlags() > 0xff {
		return trace.SpanContext{}, false
	}
	copy(tid[:], tp.GetTraceId())
	copy(sid[:], tp.GetSpanId())
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(tp.GetFlags()), Remote: true})
	return sc, sc.IsValid()
}
