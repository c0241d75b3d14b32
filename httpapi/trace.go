package httpapi

import (
	"net/http"
	"strings"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// traced wraps next, the handler of route ("POST /v1/check"), in a server
// span, a child of the caller's when its headers carry a trace context:
// the checks' forward spans (package route) hang under it. Without
// Deps.Tracer, next itself.
func (h *handler) traced(route string, next http.Handler) http.Handler {
	if h.deps.Tracer == nil {
		return next
	}
	method, path, _ := strings.Cut(route, " ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if h.deps.Propagator != nil {
			ctx = h.deps.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		ctx, span := h.deps.Tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		if span.IsRecording() {
			span.SetAttributes(semconv.HTTPRequestMethodKey.String(method), semconv.HTTPRoute(path), semconv.HTTPResponseStatusCode(sw.code))
			if sw.code >= 500 { // a server span's 4xx is the client's error, not the span's
				span.SetStatus(otelcodes.Error, http.StatusText(sw.code))
			}
		}
	})
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
