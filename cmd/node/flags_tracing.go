package main

import (
	"flag"

	"github.com/peerlimit/peerlimit/tracing"
)

// defineTracingFlags defines OpenTelemetry tracing, each upstream setting
// it mirrors named (TRACING_*; the ratelimit mode translates them).
func defineTracingFlags(fs *flag.FlagSet, t *tracing.Config) {
	fs.BoolVar(&t.Enabled, "tracing", t.Enabled, "export OpenTelemetry spans over OTLP: one per Envoy ShouldRateLimit call and HTTP check, joined to the caller's trace (traceparent or B3), and one per forward to a key's owner, naming it (TRACING_ENABLED)")
	fs.StringVar(&t.Protocol, "tracing-protocol", t.Protocol, "OTLP exporter protocol: http or grpc (TRACING_EXPORTER_PROTOCOL)")
	fs.StringVar(&t.Endpoint, "tracing-endpoint", t.Endpoint, "collector as host:port or URL (an http URL without a path gets /v1/traces); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4318 (http) or :4317 (grpc)")
	fs.BoolVar(&t.Insecure, "tracing-insecure", t.Insecure, "send spans without TLS (OTEL_EXPORTER_OTLP_INSECURE)")
	fs.StringVar(&t.ServiceName, "tracing-service-name", t.ServiceName, "the spans' service.name (TRACING_SERVICE_NAME, whose default is RateLimit)")
	fs.StringVar(&t.ServiceNamespace, "tracing-service-namespace", t.ServiceNamespace, "the spans' service.namespace (TRACING_SERVICE_NAMESPACE)")
	fs.StringVar(&t.InstanceID, "tracing-service-instance-id", t.InstanceID, "the spans' service.instance.id (TRACING_SERVICE_INSTANCE_ID); default: --id")
	fs.Float64Var(&t.SamplingRate, "tracing-sampling-rate", t.SamplingRate, "share of traces kept, in [0, 1], when the caller did not decide; a caller's sampled or not-sampled flag is followed (TRACING_SAMPLING_RATE)")
}
