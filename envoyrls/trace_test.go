package envoyrls

import (
	"context"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/tracing"
)

// tracedHarness is a harness whose server records its spans into rec.
func tracedHarness(t *testing.T) (*harness, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	h := newHarness(t, func(o *serverOpts) { o.Tracer, o.Propagator = tp.Tracer("envoyrls"), tracing.Propagator() })
	return h, rec
}

// Envoy's B3 headers, in the call's metadata, make the call's span a
// child of Envoy's; the span says the domain and the overall code.
func TestServerSpanJoinsEnvoysTrace(t *testing.T) {
	h, rec := tracedHarness(t)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-b3-traceid", "463ac35c9f6413ad48485a3953bb6124",
		"x-b3-spanid", "a2fb4a1d1a96d312", "x-b3-sampled", "1"))
	for range 2 {
		_, err := h.srv.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlscommon.RateLimitDescriptor{desc("burst=x")}, HitsAddend: 2})
		require.NoError(t, err)
	}
	spans := rec.Ended()
	require.Len(t, spans, 2)
	s := spans[1]
	assert.Equal(t, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", s.Name())
	assert.Equal(t, trace.SpanKindServer, s.SpanKind())
	assert.Equal(t, "463ac35c9f6413ad48485a3953bb6124", s.SpanContext().TraceID().String())
	assert.Equal(t, "a2fb4a1d1a96d312", s.Parent().SpanID().String())
	assert.True(t, s.Parent().IsRemote())
	at := map[string]string{}
	for _, kv := range s.Attributes() {
		at[string(kv.Key)] = kv.Value.Emit()
	}
	assert.Equal(t, "edge", at["domain"])
	assert.Equal(t, "OVER_LIMIT", at["ratelimit.overall_code"], "3 per 30 s: the second call's 2 hits are over")
	assert.Equal(t, "1", at["ratelimit.descriptors"])
	assert.Equal(t, "grpc", at["rpc.system.name"])
	assert.Equal(t, 2.0, h.metric(t, "ratelimit_service_response_time_seconds", "grpc_method", "ShouldRateLimit"))
}

// A call refused is an ERROR span with the status; a call without
// trace headers starts a trace of its own.
func TestServerSpanOfARefusedCall(t *testing.T) {
	h, rec := tracedHarness(t)
	_, err := h.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	spans := rec.Ended()
	require.Len(t, spans, 1)
	assert.False(t, spans[0].Parent().IsValid(), "a root")
	assert.Equal(t, otelcodes.Error, spans[0].Status().Code)
	assert.Contains(t, spans[0].Status().Description, "descriptors")
	var code string
	for _, kv := range spans[0].Attributes() {
		if kv.Key == "ratelimit.overall_code" {
			code = kv.Value.AsString()
		}
	}
	assert.Equal(t, "ERROR", code)
	assert.Equal(t, 1.0, h.metric(t, "ratelimit_service_response_time_seconds"), "errors are timed too")
}
