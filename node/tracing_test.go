package node_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/otlpcollector"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/tracing"
)

// An HTTP check under a caller's traceparent is a server span in the
// caller's trace, exported when the node shuts down; the node names
// itself by its id.
func TestTracingHTTPCheck(t *testing.T) {
	col := otlpcollector.New(t)
	cfg := node.DefaultLocalConfig("traced")
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Tracing.Enabled, cfg.Tracing.Protocol, cfg.Tracing.Endpoint, cfg.Tracing.Insecure = true, tracing.ProtocolGRPC, col.GRPCAddr, true
	n, err := node.Start(cfg)
	require.NoError(t, err)
	code, _, _ := postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check", `{"key":"k","limit":10,"window_ms":60000}`,
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	require.Equal(t, 200, code)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, n.Shutdown(ctx))

	spans := col.Named("POST /v1/check")
	require.Len(t, spans, 1)
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", spans[0].TraceID)
	assert.Equal(t, "b7ad6b7169203331", spans[0].ParentSpanID)
	assert.Equal(t, "200", spans[0].Attributes["http.response.status_code"])
	assert.Equal(t, "traced", spans[0].Resource["service.instance.id"])
}

// A node whose collector is unreachable is killed at once, and leaves no
// goroutine of its exporter behind (TestMain's goleak); a bad tracing
// setting fails Start naming the field.
func TestTracingUnreachableCollectorAndBadConfig(t *testing.T) {
	cfg := node.DefaultLocalConfig("traced")
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Tracing.Enabled, cfg.Tracing.Protocol, cfg.Tracing.Endpoint, cfg.Tracing.Insecure = true, tracing.ProtocolGRPC, grpctest.DeadAddr(t), true
	n, err := node.Start(cfg)
	require.NoError(t, err)
	postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check", `{"key":"k","limit":10,"window_ms":60000}`,
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	start := time.Now()
	n.Kill()
	assert.Less(t, time.Since(start), 3*time.Second)

	cfg.Tracing.SamplingRate = 2
	_, err = node.Start(cfg)
	assert.ErrorContains(t, err, "Tracing.SamplingRate must be in [0, 1], got 2")
}
