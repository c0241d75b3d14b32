package route

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/peerlimit/peerlimit/peer"
)

// The forward span: a check this node sends to its key's owner is a
// client span, a child of the caller's span (an Envoy call's, an HTTP
// check's), from the moment the check leaves for the owner to the
// moment its answer, or the failure to get one, is back. Checks are
// batched across callers (peerrpc), so the span is the caller's wait for
// its own checks, not the shared batch's call; peerrpc adds the size of
// the batch that carried them.
//
// The peer protocol's batches mix many callers' checks, so a forward
// carries a trace context per check, and only for a sampled one
// (package peerrpc): the owner records its decision as a child of this
// span, and an unsampled forward costs nothing more.

// forwardSpanName is the span of one hop to an owner.
const forwardSpanName = "peerlimit.forward"

// Attributes of a forward span.
const (
	attrOwnerID    = attribute.Key("peerlimit.owner.id")
	attrOwnerAddr  = attribute.Key("peerlimit.owner.addr")
	attrChecks     = attribute.Key("peerlimit.forward.checks")      // this caller's checks on the hop
	attrLease      = attribute.Key("peerlimit.forward.lease")       // the hop asks for a budget lease
	attrNotDecided = attribute.Key("peerlimit.forward.not_decided") // checks the fallback answers
)

// startForward starts the span of a hop carrying n of the caller's checks
// to owner, if the caller's span records (Deps.Tracer set, the trace
// sampled); else it returns ctx and nil, having built nothing. A check
// with no traced caller (a peer's relay, a client's untraced call)
// starts no trace of its own.
func (s chain) startForward(ctx context.Context, owner peer.Route, n int, lease bool) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attrOwnerID.String(owner.ID), attrOwnerAddr.String(owner.Addr), attrChecks.Int(n)}
	if lease {
		attrs = append(attrs, attrLease.Bool(true))
	}
	return s.deps.Tracer.Start(ctx, forwardSpanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endForward ends a forward span (nil: none) with the hop's outcome: err
// when the owner could not be asked, or how many of the checks it did not
// decide (handed back, or their batch failed), which the fallback then
// answers.
func endForward(span trace.Span, err error, notDecided int) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	case notDecided > 0:
		span.SetAttributes(attrNotDecided.Int(notDecided))
		span.SetStatus(otelcodes.Error, fmt.Sprintf("the owner did not decide %d checks", notDecided))
	}
	span.End()
}
