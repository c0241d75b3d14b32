package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// These benchmarks measure one real node over loopback, client and server on
// the same machine. Compare them with BenchmarkInProcessBaseline of the same
// run, not with numbers from another day: the machine is shared and noisy.
// Run: go test ./node -run '^$' -bench . -benchmem

func benchNode(b *testing.B, edit ...func(*Config)) (*Node, *grpc.ClientConn) {
	b.Helper()
	cfg := DefaultLocalConfig("bench")
	for _, e := range edit {
		e(&cfg)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n, conn
}

const benchKeys = 10_000

func benchKey(i uint64) string { return fmt.Sprintf("tenant:7:user:%d", i%benchKeys) }

// The store alone, same keys and parallelism: what the network costs is
// the difference.
func BenchmarkInProcessBaseline(b *testing.B) {
	s, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			if _, err := s.Check(time.Now(), limiter.Request{Key: benchKey(i), Limit: 1 << 30, Window: time.Minute, Hits: 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Unary gRPC checks from 64 concurrent callers on one connection.
func BenchmarkGRPCCheck(b *testing.B) {
	_, conn := benchNode(b)
	benchGRPCChecks(b, conn)
}

// BenchmarkGRPCCheckHotKeys is BenchmarkGRPCCheck with the hot-key
// summaries off and on (the default), in one run: what they cost a check
// that reaches a node.
func BenchmarkGRPCCheckHotKeys(b *testing.B) {
	for _, k := range []int{0, limiter.DefaultConfig().HotKeys} {
		b.Run(fmt.Sprintf("hot-keys=%d", k), func(b *testing.B) {
			_, conn := benchNode(b, func(c *Config) { c.Limiter.HotKeys = k })
			benchGRPCChecks(b, conn)
		})
	}
}

// benchGRPCChecks sends unary checks over conn from 64 concurrent callers.
func benchGRPCChecks(b *testing.B, conn *grpc.ClientConn) {
	c := pb.NewRateLimiterClient(conn)
	var seq atomic.Uint64
	b.SetParallelism(32) // × GOMAXPROCS (2) = 64 callers
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			i := seq.Add(1)
			if _, err := c.Check(context.Background(), &pb.CheckRequest{Key: benchKey(i), Limit: 1 << 30, WindowMs: 60_000}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Batches of 100 checks; ns/op and the checks/s metric are per check.
func BenchmarkGRPCCheckBatch100(b *testing.B) {
	_, conn := benchNode(b)
	c := pb.NewRateLimiterClient(conn)
	var seq atomic.Uint64
	const size = 100
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var checks atomic.Int64
	b.RunParallel(func(p *testing.PB) {
		req := &pb.CheckBatchRequest{Checks: make([]*pb.CheckRequest, size)}
		for j := range req.Checks {
			req.Checks[j] = &pb.CheckRequest{Limit: 1 << 30, WindowMs: 60_000}
		}
		// Each iteration is one check; a batch goes out every size iterations.
		n := 0
		for p.Next() {
			if n++; n < size {
				continue
			}
			n = 0
			for _, r := range req.Checks {
				r.Key = benchKey(seq.Add(1))
			}
			if _, err := c.CheckBatch(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
			checks.Add(size)
		}
	})
	b.ReportMetric(float64(checks.Load())/time.Since(start).Seconds(), "checks/s")
}

// The HTTP/JSON API, 64 concurrent callers with keep-alive.
func BenchmarkHTTPCheck(b *testing.B) {
	n, _ := benchNode(b)
	url := "http://" + n.HTTPAddr() + "/v1/check"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var seq atomic.Uint64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			body := fmt.Sprintf(`{"key":%q,"limit":1073741824,"window_ms":60000}`, benchKey(seq.Add(1)))
			resp, err := client.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
