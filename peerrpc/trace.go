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
	p := new(trace.SpanContext) // not &sc: that moved sc to the heap for every check, sampled or not
	*p = sc
	return p
}

// traceParents lists the traced checks of a batch for its ForwardRequest;
// nil when none is.
func traceParents(items []fwdItem) []*pb.TraceParent {
	var out []*pb.TraceParent
	for i, it := range items {
		if it.span != nil {
			out = append(out, traceParent(i, it.span))
		}
	}
	return out
}

// sharedParents lists n checks of one caller, whose span is sc (nil: not
// sampled), for a ForwardRequest: a relay's checks; nil when sc is.
func sharedParents(n int, sc *trace.SpanContext) []*pb.TraceParent {
	if sc == nil {
		return nil
	}
	out := make([]*pb.TraceParent, n)
	for i := range out {
		out[i] = traceParent(i, sc)
	}
	return out
}

// traceParent names sc as the parent of check i of a batch.
func traceParent(i int, sc *trace.SpanContext) *pb.TraceParent {
	tid, sid := sc.TraceID(), sc.SpanID()
	return &pb.TraceParent{Check: uint32(i), TraceId: tid[:], SpanId: sid[:], Flags: uint32(sc.TraceFlags())}
}

// Attributes of the owner's span.
const (
	attrNode     = attribute.Key("peerlimit.node.id")
	attrOrigin   = attribute.Key("peerlimit.origin")
	attrAllowed  = attribute.Key("peerlimit.allowed")
	attrDegraded = attribute.Key("peerlimit.degraded")
)

// The span of one check on the node a peer sent it to: its owner's
// decision (Forward, ForwardStream), or a relay's work (Relay): taking it
// to its owner, whose decision is then a child of this span, or deciding
// it here as the owner's heir.
const (
	decideSpanName = "peerlimit.decide"
	relaySpanName  = "peerlimit.relay"
)

// startSpans starts a span called name for each traced check of in, a
// child of the span its sender named, and returns what ends them with the
// checks' answers, and ctx with the span of the first traced check: the
// calls made for the checks (a relay's forward to the owner) carry it, so
// that the owner's span joins the trace. A relay's checks come from one
// caller, so that span stands for all. A trace parent that names no
// check of the batch, or an invalid span, is ignored: whatever a peer
// sends, nothing fails for it. Without a tracer, or traced checks, it
// costs a nil check.
func (s *Server) startSpans(ctx context.Context, in *pb.ForwardRequest, name string) (context.Context, func([]*pb.CheckResult)) {
	traces := in.GetTraces()
	if s.Tracer == nil || len(traces) == 0 {
		return ctx, func([]*pb.CheckResult) {}
	}
	n := len(in.GetChecks())
	spans := make(map[int]trace.Span, min(len(traces), n))
	spanCtx, first := ctx, n
	for _, tp := range traces {
		parent, ok := remoteParent(tp)
		i := int(tp.GetCheck())
		if !ok || i >= n || spans[i] != nil {
			continue
		}
		sctx, span := s.Tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), name,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrNode.String(s.NodeID), attrOrigin.String(in.GetOrigin()), attrChecks.Int(n)))
		spans[i] = span
		if i < first {
			spanCtx, first = sctx, i
		}
	}
	return spanCtx, func(results []*pb.CheckResult) { endSpans(spans, results) }
}

// endSpans ends each check's span with its answer.
func endSpans(spans map[int]trace.Span, results []*pb.CheckResult) {
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
