// Package tracing sets up OpenTelemetry tracing for a node: the
// TracerProvider its spans come from, exported over OTLP (gRPC or HTTP),
// sampled parent-based with a trace id ratio, and the propagator that
// reads a caller's trace context, W3C traceparent or B3.
//
// Off, nothing is set up: Provider.Tracer is nil, and the request path
// tests for nil before it builds a span or an attribute, so tracing off
// costs one comparison per call.
package tracing

import (
	"errors"
	"net/url"
	"strings"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Protocols an exporter speaks (Config.Protocol).
const (
	ProtocolGRPC = "grpc" // OTLP/gRPC, port 4317 by default
	ProtocolHTTP = "http" // OTLP/HTTP with protobuf bodies, port 4318 by default
)

// Config says whether a node traces, where its spans go and which it
// keeps. Start from DefaultConfig. The fields mirror envoyproxy/ratelimit's
// TRACING_* settings; like its exporters, ours read the standard
// OTEL_EXPORTER_OTLP_* environment variables (endpoint, headers,
// certificates, timeout, compression) for whatever Config leaves unset:
// the exporter library reads them, not this package.
type Config struct {
	// Enabled turns tracing on. Off (the default), no exporter is built
	// and no span is started.
	Enabled bool
	// Protocol is the exporter's: "grpc" or "http" (the default, as
	// upstream's TRACING_EXPORTER_PROTOCOL).
	Protocol string
	// Endpoint is the collector: host:port, or a URL. Empty: the
	// exporter's own default, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT when set, else localhost:4317 (grpc) or
	// localhost:4318 (http). Over http a URL without a path gets
	// /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT does; a http:// URL is
	// plaintext, https:// TLS.
	Endpoint string
	// Insecure sends spans without TLS (a collector beside the node, or a
	// sidecar). Off, TLS against the system's roots, or
	// OTEL_EXPORTER_OTLP_CERTIFICATE.
	Insecure bool
	// ServiceName, ServiceNamespace and InstanceID are the resource's
	// service.name, service.namespace and service.instance.id: how a
	// tracing backend names the process. Default service name
	// "peerlimit" (upstream's is "RateLimit"; the ratelimit mode of
	// cmd/node keeps upstream's). An empty InstanceID is filled by the
	// node with its id. OTEL_RESOURCE_ATTRIBUTES adds attributes; these
	// win over it.
	ServiceName      string
	ServiceNamespace string
	InstanceID       string
	// SamplingRate is the share of traces kept, in [0, 1], for calls
	// whose caller did not decide: a call whose parent context says
	// sampled (or not) follows its parent (parent-based), so that Envoy's
	// sampling decision holds through the node. Default 1, upstream's.
	SamplingRate float64
}

// DefaultConfig is tracing off; enabled, over OTLP/HTTP to the endpoint
// the OTEL_EXPORTER_OTLP_* variables name, every trace kept.
func DefaultConfig() Config {
	return Config{Protocol: ProtocolHTTP, ServiceName: "peerlimit", SamplingRate: 1}
}

// Validate reports every unusable field, each a *field.Error naming it.
// The fields are checked whether or not Enabled is set, so that a setting
// is not found wrong only on the day tracing is turned on.
func (c Config) Validate() error {
	var errs []error
	if c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTP {
		errs = append(errs, field.Errorf("Protocol", "must be %q or %q, got %q", ProtocolGRPC, ProtocolHTTP, c.Protocol))
	}
	if !(c.SamplingRate >= 0 && c.SamplingRate <= 1) { // NaN too
		errs = append(errs, field.Errorf("SamplingRate", "must be in [0, 1], got %v", c.SamplingRate))
	}
	if c.ServiceName == "" {
		errs = append(errs, field.Errorf("ServiceName", "must not be empty"))
	}
	if err := c.validateEndpoint(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateEndpoint checks that Endpoint is host:port or an http(s) URL
// with a host, and that Insecure does not contradict an https URL.
func (c Config) validateEndpoint() error {
	if c.Endpoint == "" {
		return nil
	}
	if !isURL(c.Endpoint) {
		if strings.ContainsAny(c.Endpoint, "/ ") || !strings.Contains(c.Endpoint, ":") {
			return field.Errorf("Endpoint", "must be host:port or an http:// or https:// URL, got %q", c.Endpoint)
		}
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	switch {
	case err != nil:
		return field.Wrap("Endpoint", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return field.Errorf("Endpoint", "must be an http:// or https:// URL, got scheme %q", u.Scheme)
	case u.Host == "":
		return field.Errorf("Endpoint", "has no host: %q", c.Endpoint)
	case u.Scheme == "https" && c.Insecure:
		return field.Errorf("Insecure", "contradicts the https:// %s; use http:// for plaintext", field.Ref("Endpoint"))
	}
	return nil
}

func isURL(endpoint string) bool { return strings.Contains(endpoint, "://") }
