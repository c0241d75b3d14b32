package grpcapi

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// TraceCarrier is a server call's incoming metadata as OpenTelemetry's
// propagation.TextMapCarrier, from which a propagator extracts the
// caller's trace context (traceparent, b3, x-b3-*). Get reads one key
// without copying the metadata, as metadata.FromIncomingContext would;
// Set does nothing: incoming metadata is read, never written.
type TraceCarrier struct{ Ctx context.Context }

// Get returns the first value of key, or "".
func (c TraceCarrier) Get(key string) string { return FirstValue(c.Ctx, key) }

// Set does nothing.
func (TraceCarrier) Set(string, string) {}

// Keys returns every key of the incoming metadata.
func (c TraceCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.Ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
