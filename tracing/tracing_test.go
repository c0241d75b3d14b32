package tracing_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/otlpcollector"
	"github.com/peerlimit/peerlimit/tracing"
)

// The exporter's goroutines end at Shutdown. The OTLP/HTTP exporter's
// shared transport keeps its idle connections to a collector until the
// collector closes them, which every test's collector does at cleanup:
// goleak's retries wait for that.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		edit func(*tracing.Config)
		path string
		want string
	}{
		{func(c *tracing.Config) { c.Protocol = "zipkin" }, "Protocol", `must be "grpc" or "http", got "zipkin"`},
		{func(c *tracing.Config) { c.Protocol = "" }, "Protocol", `got ""`},
		{func(c *tracing.Config) { c.SamplingRate = 1.5 }, "SamplingRate", "must be in [0, 1], got 1.5"},
		{func(c *tracing.Config) { c.SamplingRate = -0.1 }, "SamplingRate", "got -0.1"},
		{func(c *tracing.Config) { c.SamplingRate = math.NaN() }, "SamplingRate", "got NaN"},
		{func(c *tracing.Config) { c.ServiceName = "" }, "ServiceName", "must not be empty"},
		{func(c *tracing.Config) { c.Endpoint = "collector" }, "Endpoint", "must be host:port or an http:// or https:// URL"},
		{func(c *tracing.Config) { c.Endpoint = "collector:4317/x" }, "Endpoint", "must be host:port"},
		{func(c *tracing.Config) { c.Endpoint = "ftp://collector:21" }, "Endpoint", `got scheme "ftp"`},
		{func(c *tracing.Config) { c.Endpoint = "http://" }, "Endpoint", "has no host"},
		{func(c *tracing.Config) { c.Endpoint, c.Insecure = "https://collector:4318", true }, "Insecure", "contradicts the https:// Endpoint"},
	} {
		cfg := tracing.DefaultConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		var fe *field.Error
		if assert.ErrorAs(t, err, &fe, "%+v", cfg) {
			assert.Equal(t, c.path, fe.Path)
			assert.ErrorContains(t, err, c.want)
		}
		_, err = tracing.New(context.Background(), cfg)
		assert.Error(t, err, "New validates")
	}
	for _, ok := range []string{"", "collector:4317", "[::1]:4317", "http://collector:4318", "https://collector/otlp/v1/traces"} {
		cfg := tracing.DefaultConfig()
		cfg.Endpoint = ok
		assert.NoError(t, cfg.Validate(), ok)
	}
}

// Off, the provider is OpenTelemetry's no-op one, the request path gets
// no tracer at all, and nothing is started or exported.
func TestDisabledTracesNothing(t *testing.T) {
	p, err := tracing.New(context.Background(), tracing.DefaultConfig())
	require.NoError(t, err)
	assert.False(t, p.Enabled())
	assert.Nil(t, p.Tracer("x"))
	assert.IsType(t, noop.TracerProvider{}, p.TracerProvider())
	assert.NoError(t, p.Shutdown(context.Background()))
}

// A span started under a B3 parent reaches a collector over either
// protocol, in the parent's trace, with the configured resource.
func TestExportsOverBothProtocols(t *testing.T) {
	col := otlpcollector.New(t)
	for _, c := range []struct {
		name     string
		protocol string
		endpoint string
		insecure bool
	}{
		{"grpc", tracing.ProtocolGRPC, col.GRPCAddr, true},
		{"http host:port", tracing.ProtocolHTTP, col.HTTPURL[len("http://"):], true},
		{"http URL, /v1/traces added", tracing.ProtocolHTTP, col.HTTPURL, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tracing.DefaultConfig()
			cfg.Enabled, cfg.Protocol, cfg.Endpoint, cfg.Insecure = true, c.protocol, c.endpoint, c.insecure
			cfg.ServiceName, cfg.ServiceNamespace, cfg.InstanceID = "rls", "edge", c.name
			p, err := tracing.New(context.Background(), cfg)
			require.NoError(t, err)
			assert.True(t, p.Enabled())

			traceID := "463ac35c9f6413ad48485a3953bb6124"
			parent := tracing.Propagator().Extract(context.Background(), propagation.MapCarrier{
				"x-b3-traceid": traceID, "x-b3-spanid": "a2fb4a1d1a96d312", "x-b3-sampled": "1"})
			_, span := p.Tracer("test").Start(parent, "op")
			span.End()
			require.NoError(t, p.Shutdown(context.Background()), "Shutdown flushes")
			require.NoError(t, p.Shutdown(context.Background()), "twice")

			var got []otlpcollector.Span
			for _, s := range col.Named("op") {
				if s.Resource["service.instance.id"] == c.name {
					got = append(got, s)
				}
			}
			require.Len(t, got, 1)
			assert.Equal(t, traceID, got[0].TraceID)
			assert.Equal(t, "a2fb4a1d1a96d312", got[0].ParentSpanID)
			assert.Equal(t, "rls", got[0].Resource["service.name"])
			assert.Equal(t, "edge", got[0].Resource["service.namespace"])
			assert.Equal(t, map[bool]string{true: "grpc", false: "http"}[c.protocol == tracing.ProtocolGRPC], got[0].Via)
		})
	}
}

// Sampling is parent-based: a caller's decision holds whatever the rate,
// and the rate decides only for calls that come without one.
func TestSamplingFollowsTheParent(t *testing.T) {
	col := otlpcollector.New(t)
	cfg := tracing.DefaultConfig()
	cfg.Enabled, cfg.Protocol, cfg.Endpoint, cfg.Insecure, cfg.SamplingRate = true, tracing.ProtocolGRPC, col.GRPCAddr, true, 0
	p, err := tracing.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Shutdown(context.Background())) })
	tr := p.Tracer("test")
	start := func(h map[string]string) bool {
		ctx := tracing.Propagator().Extract(context.Background(), propagation.MapCarrier(h))
		_, span := tr.Start(ctx, "op")
		defer span.End()
		return span.IsRecording()
	}
	assert.False(t, start(nil), "no parent: the rate, 0")
	assert.True(t, start(map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}), "W3C sampled")
	assert.False(t, start(map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}), "W3C not sampled")
	assert.True(t, start(map[string]string{"b3": "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"}), "B3 single, sampled")
	assert.False(t, start(map[string]string{"x-b3-traceid": "80f198ee56343ba864fe8b2a57d3eff7", "x-b3-spanid": "e457b5a2e4d86bd1",
		"x-b3-sampled": "0"}), "B3 multi, not sampled")
}

// Both formats are read; both are written.
func TestPropagatorReadsAndWritesBoth(t *testing.T) {
	prop := tracing.Propagator()
	for name, h := range map[string]map[string]string{
		"w3c":      {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"b3 multi": {"x-b3-traceid": "0af7651916cd43dd8448eb211c80319c", "x-b3-spanid": "b7ad6b7169203331", "x-b3-sampled": "1"},
		"b3":       {"b3": "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1"},
	} {
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(h)))
		assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String(), name)
		assert.True(t, sc.IsSampled(), name)

		out := propagation.MapCarrier{}
		prop.Inject(trace.ContextWithSpanContext(context.Background(), sc), out)
		assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", out.Get("traceparent"), name)
		assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", out.Get("x-b3-traceid"), name)
	}
	h := http.Header{}
	h.Set("X-B3-TraceId", "0af7651916cd43dd8448eb211c80319c")
	h.Set("X-B3-SpanId", "b7ad6b7169203331")
	sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.HeaderCarrier(h)))
	assert.True(t, sc.IsValid(), "HTTP headers, any case")
}

// A collector that cannot be reached (gRPC: the exporter retries) or
// never answers (HTTP) does not hold Shutdown past its context, and
// leaves no goroutine behind (TestMain's goleak).
func TestShutdownIsBoundedByItsContext(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // else the server does not watch the connection, and its context never ends
		<-r.Context().Done()
	}))
	t.Cleanup(hung.Close)
	for protocol, endpoint := range map[string]string{tracing.ProtocolGRPC: grpctest.DeadAddr(t), tracing.ProtocolHTTP: hung.URL} {
		cfg := tracing.DefaultConfig()
		cfg.Enabled, cfg.Protocol, cfg.Endpoint, cfg.Insecure = true, protocol, endpoint, protocol == tracing.ProtocolGRPC
		p, err := tracing.New(context.Background(), cfg)
		require.NoError(t, err)
		_, span := p.Tracer("test").Start(context.Background(), "op")
		span.End()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err = p.Shutdown(ctx)
		cancel()
		assert.Less(t, time.Since(start), 5*time.Second, protocol)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", protocol, err)
	}
}

// The SDK's export errors reach the node's log, one line a second at most.
func TestLogErrorsIsGated(t *testing.T) {
	var buf strings.Builder
	h := tracing.LogErrors(slog.New(slog.NewTextHandler(&buf, nil)))
	h.Handle(errors.New("collector down"))
	h.Handle(errors.New("collector down again"))
	assert.Equal(t, 1, strings.Count(buf.String(), "exporting spans failed"), buf.String())
	assert.Contains(t, buf.String(), "collector down")
}
