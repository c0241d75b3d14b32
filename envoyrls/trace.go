package envoyrls

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/logging"
)

// The server span of a ShouldRateLimit call (ServerDeps.Tracer). It is a
// child of Envoy's span when the call's metadata carries one, and the
// parent of the forward spans of its descriptors' checks (package route),
// which name each owner: a trace shows which node decided what.

// spanName is the call's span name, the RPC's full method name, as
// OpenTelemetry's gRPC instrumentation names a server span.
var spanName = rlspb.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"

// Attributes of the call's span. domain is upstream's key (its
// "ShouldRateLimit Execution" span carries it), so that trace searches
// port; the others are peerlimit's.
const (
	attrDomain      = attribute.Key("domain")
	attrOverallCode = attribute.Key("ratelimit.overall_code")
	attrDescriptors = attribute.Key("ratelimit.descriptors")
	attrDegraded    = attribute.Key("peerlimit.degraded")
)

var spanAttrs = []attribute.KeyValue{semconv.RPCSystemNameGRPC, semconv.RPCMethod(spanName)}

// startSpan starts the call's server span, under the caller's trace
// context if the metadata carries one. Only with a Tracer.
func (s *Server) startSpan(ctx context.Context, req *rlspb.RateLimitRequest) (context.Context, trace.Span) {
	if s.d.Propagator != nil {
		ctx = s.d.Propagator.Extract(ctx, grpcapi.TraceCarrier{Ctx: ctx})
	}
	ctx, span := s.d.Tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() { // an unsampled call builds no attribute
		// The domain is the caller's text: clipped, as in the logs.
		span.SetAttributes(spanAttrs...)
		span.SetAttributes(attrDomain.String(logging.Clip(req.GetDomain())), attrDescriptors.Int(len(req.GetDescriptors())))
	}
	return ctx, span
}

// endSpan ends the call's span with its overall code (OK, OVER_LIMIT,
// ERROR), whether a fallback decided a descriptor, and the error.
func endSpan(span trace.Span, code int, degraded bool, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrOverallCode.String(codeNames[code]))
		if degraded {
			span.SetAttributes(attrDegraded.Bool(true))
		}
		if err != nil {
			st := status.Convert(err)
			span.SetAttributes(semconv.RPCResponseStatusCode(st.Code().String()))
			span.SetStatus(otelcodes.Error, st.Message())
		}
	}
	span.End()
}
