package tracing

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Provider is a node's tracing: where its spans come from and go. Its
// methods are safe for concurrent use. The exporter's goroutine, the
// batch span processor's, belongs to it: Shutdown stops it.
type Provider struct {
	tp  trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when off
	exp *cancelable              // nil when off

	once sync.Once
	err  error
}

// New returns the Provider cfg describes: with Enabled off, one that
// traces nothing and starts nothing. On, the exporter is built but does
// not connect yet: an unreachable collector fails exports (reported
// through OpenTelemetry's error handler), never New or a request.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled {
		return &Provider{tp: noop.NewTracerProvider()}, nil
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %s exporter: %w", cfg.Protocol, err)
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	c := newCancelable(exp)
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRate))),
		sdktrace.WithBatcher(c),
		sdktrace.WithResource(res),
	)
	return &Provider{tp: sdk, sdk: sdk, exp: c}, nil
}

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// TracerProvider returns the provider spans come from: the SDK's, or
// OpenTelemetry's no-op one when tracing is off.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Tracer returns the tracer called name (the instrumented package's
// import path), or nil when tracing is off: the request path tests for
// nil, so that tracing off costs it no span, not even the no-op tracer's
// context.
func (p *Provider) Tracer(name string) trace.Tracer {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Tracer(name)
}

// Shutdown exports the spans still queued and stops the exporter, within
// ctx. If ctx ends first, the exports under way are cut and the spans not
// yet sent are lost; either way the exporter's goroutines have ended when
// it returns (but for the idle keep-alive connections of the OTLP/HTTP
// exporter's shared transport, which close on their own). Safe to call
// more than once; the first call's error is every call's.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	p.once.Do(func() {
		// The batch processor's last export runs to its own timeout (30
		// s), past ctx, and the SDK skips the processor altogether,
		// leaving its goroutine running, when ctx has ended before it is
		// called. So the SDK is shut down without ctx's end, and ctx's
		// end cuts the exports under way instead: Shutdown's bound holds
		// and nothing outlives it.
		stop := context.AfterFunc(ctx, p.exp.abort)
		defer stop()
		err := p.sdk.Shutdown(context.WithoutCancel(ctx))
		p.exp.abort() // releases its context
		switch {
		case ctx.Err() != nil:
			p.err = fmt.Errorf("tracing shutdown: %w (the spans still queued then are lost)", ctx.Err())
		case err != nil:
			p.err = fmt.Errorf("tracing shutdown: %w", err)
		}
	})
	return p.err
}

// Propagator reads and writes a trace context in both of the formats
// Envoy sends: W3C traceparent/tracestate (Envoy's OpenTelemetry tracer)
// and B3, single "b3" or multiple x-b3-* headers (its Zipkin tracer, and
// envoyproxy/ratelimit's propagator). Extract takes either; when a call
// carries both, B3's wins (they name the same trace when Envoy sends
// both). Inject writes both, W3C and x-b3-*, so that whichever tracer the
// next hop runs continues the trace. A forward to a key's owner does not
// use it: the peer protocol carries sampled checks' span contexts in
// binary (package peerrpc).
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{},
		b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)))
}

// newExporter builds the OTLP exporter of cfg.Protocol. What cfg leaves
// unset, the exporter takes from OTEL_EXPORTER_OTLP_*.
func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	if cfg.Protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		switch {
		case isURL(cfg.Endpoint):
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		case cfg.Endpoint != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	switch {
	case isURL(cfg.Endpoint):
		opts = append(opts, otlptracehttp.WithEndpointURL(withTracesPath(cfg.Endpoint)))
	case cfg.Endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
	}
	if cfg.Insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	return otlptracehttp.New(ctx, opts...)
}

// withTracesPath adds OTLP/HTTP's /v1/traces to a URL without a path:
// WithEndpointURL takes the path as given, where OTEL_EXPORTER_OTLP_ENDPOINT
// is a base the signal's path is added to, and --tracing-endpoint is
// documented as the same.
func withTracesPath(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// newResource names the process to the tracing backend: the telemetry
// SDK, OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, then cfg's service
// attributes, which win.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []resource.Option{resource.WithTelemetrySDK(), resource.WithFromEnv()}
	svc := semconv.ServiceName(cfg.ServiceName)
	attrs = append(attrs, resource.WithAttributes(svc))
	if cfg.ServiceNamespace != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceNamespace(cfg.ServiceNamespace)))
	}
	if cfg.InstanceID != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(cfg.InstanceID)))
	}
	return resource.New(ctx, attrs...)
}

// cancelable is a SpanExporter whose exports, and shutdown, end when
// abort is called.
type cancelable struct {
	sdktrace.SpanExporter
	ctx   context.Context // ends at abort
	abort context.CancelFunc
}

func newCancelable(e sdktrace.SpanExporter) *cancelable {
	ctx, abort := context.WithCancel(context.Background())
	return &cancelable{SpanExporter: e, ctx: ctx, abort: abort}
}

// ExportSpans exports spans within ctx and until abort.
func (c *cancelable) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	ctx, stop := c.bound(ctx)
	defer stop()
	return c.SpanExporter.ExportSpans(ctx, spans)
}

// Shutdown stops the exporter within ctx, or at once once aborted.
func (c *cancelable) Shutdown(ctx context.Context) error {
	ctx, stop := c.bound(ctx)
	defer stop()
	return c.SpanExporter.Shutdown(ctx)
}

// bound returns ctx, ended by abort too, and what releases it.
func (c *cancelable) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}
