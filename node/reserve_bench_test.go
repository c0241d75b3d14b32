package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/internal/proccpu"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// BenchmarkGRPCReserveSettle compares, on one real node over loopback
// with 64 concurrent callers, a unary check with what a token budget pays
// instead: a RESERVE of an estimate and a SETTLE of the real cost, two
// calls. cpu-ns/op is the process's CPU time (client and server, both
// here) per operation; compare the two sub-benchmarks of one run.
// Run: go test ./node -run '^$' -bench GRPCReserveSettle -count 5
func BenchmarkGRPCReserveSettle(b *testing.B) {
	b.Run("check", func(b *testing.B) {
		_, conn := benchNode(b)
		c := pb.NewRateLimiterClient(conn)
		benchCPU(b, func(i uint64) error {
			_, err := c.Check(context.Background(), &pb.CheckRequest{Key: benchKey(i), Limit: 1 << 30, WindowMs: 60_000, Hits: ptr(int64(100))})
			return err
		})
	})
	b.Run("reserve+settle", func(b *testing.B) {
		_, conn := benchNode(b)
		c := pb.NewRateLimiterClient(conn)
		benchCPU(b, func(i uint64) error {
			req := &pb.CheckRequest{Key: benchKey(i), Limit: 1 << 30, WindowMs: 60_000, Hits: ptr(int64(100)), Op: pb.Op_RESERVE, TtlMs: 1000}
			res, err := c.Check(context.Background(), req)
			if err != nil {
				return err
			}
			req.Op, req.Reservation, req.Hits, req.TtlMs = pb.Op_SETTLE, res.GetReservation(), ptr(int64(63)), 0
			_, err = c.Check(context.Background(), req)
			return err
		})
	})
}

func ptr[T any](v T) *T { return &v }

// benchCPU runs op from 64 callers and reports the process's CPU time
// per operation beside ns/op.
func benchCPU(b *testing.B, op func(i uint64) error) {
	var seq atomic.Uint64
	b.SetParallelism(32) // × GOMAXPROCS (2) = 64 callers
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			if err := op(seq.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	cpu, ok := proccpu.Self()
	if !ok {
		b.Skip("this system does not report the process's CPU time")
	}
	return cpu
}
