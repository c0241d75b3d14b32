package limiter

import (
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/partition"
)

// BenchmarkCharge is BenchmarkCounterHotKey and BenchmarkLogHotKey with a
// charge for the check: one hot key, time moving on by 1 µs (counter,
// under its limit, and deep in debt) or 1 ms (log, limit 100/s, charges
// of 1 at 1000/s: over its limit nine times in ten, at its bound of 200).
func BenchmarkCharge(b *testing.B) {
	for _, c := range []struct {
		name string
		req  Request
		step time.Duration
	}{
		{"counter", Request{Key: "user:12345:/api/v1/search", Limit: 1 << 40, Window: time.Minute, Hits: 1}, time.Microsecond},
		{"counter-in-debt", Request{Key: "user:12345:/api/v1/search", Limit: 100, Window: time.Minute, Hits: 1}, time.Microsecond},
		{"log", Request{Key: "user:12345:/login", Limit: 100, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}, time.Millisecond},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := newStore(b, partition.DefaultCount, nil)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, _, err := s.Charge(benchT0.Add(time.Duration(i)*c.step), c.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRefund refunds 1 hit a call from one hot key, time moving on by
// 1 µs. The counter holds far more than the benchmark refunds; the log
// holds a full 10,000 entries and is charged 10,000 again when a refund
// finds it empty, once per 10,000 refunds (~2 ns a refund amortized).
func BenchmarkRefund(b *testing.B) {
	b.Run("counter", func(b *testing.B) {
		s := newStore(b, partition.DefaultCount, nil)
		req := Request{Key: "user:12345:/api/v1/search", Limit: 1 << 40, Window: time.Minute, Hits: 1 << 60}
		if _, _, err := s.Charge(benchT0, req); err != nil {
			b.Fatal(err)
		}
		req.Hits = 1
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, _, err := s.Refund(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("log", func(b *testing.B) {
		s := newStore(b, partition.DefaultCount, nil)
		full := Request{Key: "user:12345:/login", Limit: 10_000, Window: time.Minute, Algorithm: SlidingWindowLog, Hits: 10_000}
		req := full
		req.Hits = 1
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			now := benchT0.Add(time.Duration(i) * time.Microsecond)
			_, n, err := s.Refund(now, req)
			if err == nil && n == 0 {
				_, _, err = s.Charge(now, full)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
