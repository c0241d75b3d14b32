package envoyrls_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/otlpcollector"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/tracing"
)

const shouldRateLimitSpan = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// tracedRLSCluster starts two nodes serving clusterConfig, exporting
// their spans to col as trace says: node-0 over OTLP/gRPC, node-1 over
// OTLP/HTTP.
func tracedRLSCluster(t *testing.T, col *otlpcollector.Collector, trace func(id string, c *tracing.Config)) *testcluster.Cluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rls.yaml")
	require.NoError(t, os.WriteFile(path, []byte(clusterConfig), 0o600))
	return testcluster.New(t, 2, func(cfg *node.Config) {
		cfg.EnvoyRLSConfig = path
		cfg.Tracing.Insecure = true
		if cfg.ID == "node-0" {
			cfg.Tracing.Protocol, cfg.Tracing.Endpoint = tracing.ProtocolGRPC, col.GRPCAddr
		} else {
			cfg.Tracing.Protocol, cfg.Tracing.Endpoint = tracing.ProtocolHTTP, col.HTTPURL
		}
		trace(cfg.ID, &cfg.Tracing)
	})
}

// otherKey returns a descriptor of domain edge whose key node from's
// ring gives to node to.
func otherKey(t *testing.T, c *testcluster.Cluster, from, to int) *rlscommon.RateLimitDescriptor {
	t.Helper()
	for i := range 1000 {
		d := descriptor("user=u" + strconv.Itoa(i))
		if c.Node(from).Ring().Owner(envoyrls.Key("edge", d.GetEntries(), 1024)).ID == c.Node(to).ID() {
			return d
		}
	}
	t.Fatalf("no key of %s's", c.Node(to).ID())
	return nil
}

// callWith calls ShouldRateLimit on node i with the metadata pairs kv,
// as Envoy's tracer sends them.
func callWith(t *testing.T, c *testcluster.Cluster, i int, d *rlscommon.RateLimitDescriptor, kv ...string) {
	t.Helper()
	conn, err := grpc.NewClient(c.Node(i).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlscommon.RateLimitDescriptor{d}})
	require.NoError(t, err)
	require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
}

// A call sent to a node that does not own its key, with Envoy's trace
// context, reaches the collector as the server span of that node, in
// Envoy's trace, its child forward span naming the owner, and the owner's
// own span deciding the check, a child of the forward, exported by the
// owner: over B3 (Envoy's Zipkin tracer) to the node exporting over
// OTLP/gRPC, over W3C traceparent to the one exporting over OTLP/HTTP.
func TestTracingForwardedCallShowsTheOwner(t *testing.T) {
	col := otlpcollector.New(t)
	c := tracedRLSCluster(t, col, func(_ string, tc *tracing.Config) { tc.Enabled = true })
	calls := []struct {
		from, to          int
		traceID, spanID   string
		metadata          []string
		protocol, service string
	}{
		{0, 1, "463ac35c9f6413ad48485a3953bb6124", "a2fb4a1d1a96d312",
			[]string{"x-b3-traceid", "463ac35c9f6413ad48485a3953bb6124", "x-b3-spanid", "a2fb4a1d1a96d312", "x-b3-sampled", "1"}, "grpc", "node-0"},
		{1, 0, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331",
			[]string{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "http", "node-1"},
	}
	for _, call := range calls {
		callWith(t, c, call.from, otherKey(t, c, call.from, call.to), call.metadata...)
		assert.Equal(t, 1.0, metrictest.Value(t, metrictest.Scrape("http://"+c.Node(call.from).HTTPAddr()+"/metrics"),
			"ratelimit_service_response_time_seconds", "grpc_method", "ShouldRateLimit"))
	}
	// A graceful shutdown exports what is queued: the spans are in the
	// collector once the nodes are gone.
	c.Leave(0)
	c.Leave(1)

	for _, call := range calls {
		var server, forward, decide []otlpcollector.Span
		for _, s := range col.Spans() {
			switch {
			case s.TraceID != call.traceID:
			case s.Name == shouldRateLimitSpan:
				server = append(server, s)
			case s.Name == "peerlimit.forward":
				forward = append(forward, s)
			case s.Name == "peerlimit.decide":
				decide = append(decide, s)
			default:
				t.Errorf("unexpected span %q in trace %s", s.Name, call.traceID)
			}
		}
		require.Len(t, server, 1, "trace %s", call.traceID)
		s := server[0]
		assert.Equal(t, call.spanID, s.ParentSpanID, "the caller's span is the parent")
		assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.Kind)
		assert.Equal(t, "edge", s.Attributes["domain"])
		assert.Equal(t, "OK", s.Attributes["ratelimit.overall_code"])
		assert.Equal(t, call.service, s.Resource["service.instance.id"], "the node that received the call")
		assert.Equal(t, "peerlimit", s.Resource["service.name"])
		assert.Equal(t, call.protocol, s.Via)

		require.Len(t, forward, 1, "trace %s", call.traceID)
		f := forward[0]
		assert.Equal(t, s.SpanID, f.ParentSpanID)
		assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, f.Kind)
		assert.Equal(t, fmt.Sprintf("node-%d", call.to), f.Attributes["peerlimit.owner.id"])
		assert.Equal(t, c.Node(call.to).GRPCAddr(), f.Attributes["peerlimit.owner.addr"])
		assert.Equal(t, "1", f.Attributes["peerlimit.forward.checks"])
		assert.NotEmpty(t, f.Attributes["peerlimit.forward.batch_size"])
		assert.NotEmpty(t, f.Attributes["peerlimit.request_id"])
		assert.Equal(t, tracepb.Status_STATUS_CODE_UNSET, f.StatusCode)

		require.Len(t, decide, 1, "trace %s: the owner's span", call.traceID)
		d := decide[0]
		assert.Equal(t, f.SpanID, d.ParentSpanID, "the owner's span is the forward's child")
		assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, d.Kind)
		assert.Equal(t, fmt.Sprintf("node-%d", call.to), d.Resource["service.instance.id"], "exported by the owner")
		assert.Equal(t, fmt.Sprintf("node-%d", call.to), d.Attributes["peerlimit.node.id"])
		assert.Equal(t, fmt.Sprintf("node-%d", call.from), d.Attributes["peerlimit.origin"])
		assert.Equal(t, "true", d.Attributes["peerlimit.allowed"])
	}
}

// Tracing off, a traced call exports nothing, not even to a collector
// the configuration names: no exporter exists.
func TestTracingDisabledRecordsNothing(t *testing.T) {
	col := otlpcollector.New(t)
	c := tracedRLSCluster(t, col, func(string, *tracing.Config) {})
	callWith(t, c, 0, otherKey(t, c, 0, 1), "x-b3-traceid", "463ac35c9f6413ad48485a3953bb6124", "x-b3-spanid", "a2fb4a1d1a96d312", "x-b3-sampled", "1")
	callWith(t, c, 1, otherKey(t, c, 1, 0), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	c.Leave(0)
	c.Leave(1)
	assert.Zero(t, col.Requests())
}
