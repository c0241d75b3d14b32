package envoyrls_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/partition"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// Two descriptors, one plain and one nested, with limits high enough that
// every check is allowed: the cost of the adapter, not of denials.
const benchConfig = `domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: route
    value: /api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 4000000000}
`

func benchRequest() *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{
		descriptor("remote_address=10.0.0.1"), descriptor("route=/api", "user=u1")}}
}

// The same two checks as the peerlimit API would send them.
func benchChecks() []limiter.Request {
	r := benchRequest()
	return []limiter.Request{
		{Key: envoyrls.Key("bench", r.Descriptors[0].Entries, 1024), Limit: 4_000_000_000, Window: time.Second, Hits: 1},
		{Key: envoyrls.Key("bench", r.Descriptors[1].Entries, 1024), Limit: 4_000_000_000, Window: time.Minute, Hits: 1},
	}
}

// BenchmarkInProcess compares ShouldRateLimit with two descriptors to
// route.Service.CheckBatch of the same two checks, on one node's request
// path, without gRPC: what the Envoy adapter adds.
func BenchmarkInProcess(b *testing.B) {
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(b, err)
	svc, err := route.NewService(route.DefaultConfig(), route.Deps{NodeID: "n1", Store: store, Now: time.Now})
	require.NoError(b, err)
	cfg, err := envoyrls.Parse("bench.yaml", []byte(benchConfig), envoyrls.LoadOptions{Check: store.Validate})
	require.NoError(b, err)
	srv, err := envoyrls.NewServer(envoyrls.DefaultConfig(), envoyrls.ServerDeps{Rules: envoyrls.StaticRegistry(cfg), Checker: svc, Validate: store.Validate, MaxKeyBytes: 1024})
	require.NoError(b, err)
	ctx := context.Background()

	b.Run("ShouldRateLimit", func(b *testing.B) {
		req := benchRequest()
		b.ReportAllocs()
		for b.Loop() {
			if resp, err := srv.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
		}
	})
	b.Run("CheckBatch", func(b *testing.B) {
		reqs := benchChecks()
		b.ReportAllocs()
		for b.Loop() {
			if res, err := svc.CheckBatch(ctx, reqs); err != nil || !res[0].Decision.Allowed || !res[1].Decision.Allowed {
				b.Fatal(res, err)
			}
		}
	})
}

// BenchmarkGRPC is the same comparison through a real node over loopback
// gRPC: the generated Envoy client against RateLimiter.CheckBatch.
func BenchmarkGRPC(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.yaml")
	require.NoError(b, os.WriteFile(path, []byte(benchConfig), 0o600))
	cfg := node.DefaultLocalConfig("bench")
	cfg.EnvoyRLSConfig = path
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := node.Start(cfg)
	require.NoError(b, err)
	b.Cleanup(func() { n.Kill() })
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	ctx := context.Background()

	b.Run("ShouldRateLimit", func(b *testing.B) {
		cl := rlspb.NewRateLimitServiceClient(conn)
		req := benchRequest()
		b.ReportAllocs()
		for b.Loop() {
			if resp, err := cl.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
		}
	})
	b.Run("CheckBatch", func(b *testing.B) {
		cl := pb.NewRateLimiterClient(conn)
		req := &pb.CheckBatchRequest{}
		for _, c := range benchChecks() {
			req.Checks = append(req.Checks, protoconv.ToProtoRequest(c))
		}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := cl.CheckBatch(ctx, req)
			if err != nil || !resp.Results[0].GetResponse().GetAllowed() || !resp.Results[1].GetResponse().GetAllowed() {
				b.Fatal(resp, err)
			}
		}
	})
}
