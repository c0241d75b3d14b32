package envoyrls_test

import (
	"context"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/tracing"
)

// BenchmarkInProcessTracing is BenchmarkInProcess's ShouldRateLimit with
// tracing off (no Tracer: what every node without --tracing runs), on
// but the call not sampled (rate 0, no parent), and on with Envoy's
// sampled B3 parent (spans built and handed to an exporter that drops
// them), in one run so that they compare.
func BenchmarkInProcessTracing(b *testing.B) {
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(b, err)
	svc, err := route.NewService(route.DefaultConfig(), route.Deps{NodeID: "n1", Store: store, Now: time.Now})
	require.NoError(b, err)
	cfg, err := envoyrls.Parse("bench.yaml", []byte(benchConfig), envoyrls.LoadOptions{Check: store.Validate})
	require.NoError(b, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())),
		sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b3 := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-b3-traceid", "463ac35c9f6413ad48485a3953bb6124",
		"x-b3-spanid", "a2fb4a1d1a96d312", "x-b3-sampled", "1"))
	for _, c := range []struct {
		name   string
		traced bool
		ctx    context.Context
	}{
		{"off", false, context.Background()},
		{"on/unsampled", true, context.Background()},
		{"on/sampled", true, b3},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := envoyrls.ServerDeps{Rules: envoyrls.StaticRegistry(cfg), Checker: svc, Validate: store.Validate, MaxKeyBytes: 1024}
			if c.traced {
				d.Tracer, d.Propagator = tp.Tracer("bench"), tracing.Propagator()
			}
			srv, err := envoyrls.NewServer(envoyrls.DefaultConfig(), d)
			require.NoError(b, err)
			req := benchRequest()
			b.ReportAllocs()
			for b.Loop() {
				if resp, err := srv.ShouldRateLimit(c.ctx, req); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
