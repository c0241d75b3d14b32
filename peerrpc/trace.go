package peerrpc

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attributes this package adds to the caller's forward span (package
// route starts it): the batch that carried the caller's checks, which
// may hold other callers' checks too. Of several batches, the largest.
const (
	attrBatchSize = attribute.Key("peerlimit.forward.batch_size")
	attrRequestID = attribute.Key("peerlimit.request_id") // the batch's, as both nodes' logs name it
)

// noteBatch adds the size and request id of the batch that carried the
// caller's checks (none: size 0) to ctx's span, if it records: an
// untraced forward costs a context lookup.
func noteBatch(ctx context.Context, size int, id string) {
	if size == 0 {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrBatchSize.Int(size), attrRequestID.String(id))
	}
}
