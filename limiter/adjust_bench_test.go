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

// BenchmarkReserveSettle compares, in one run, a check of 10 hits with a
// reservation of 10 settled at 7 (3 refunded from where they were
// counted), on one hot key whose time moves on by 1 µs an operation: the
// store's share of what a reservation costs beyond a check.
func BenchmarkReserveSettle(b *testing.B) {
	for _, alg := range []Algorithm{SlidingWindowCounter, SlidingWindowLog} {
		req := Request{Key: "team:42:gpt-5:tokens", Limit: 1 << 40, Window: time.Minute, Algorithm: alg, Hits: 10}
		step := time.Microsecond
		if alg == SlidingWindowLog {
			req.Limit, req.Window, step = 10_000, time.Second, time.Millisecond // up to 10,000 entries held
		}
		b.Run(alg.String()+"/check", func(b *testing.B) {
			s := newStore(b, partition.DefaultCount, nil)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.Check(benchT0.Add(time.Duration(i)*step), req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg.String()+"/reserve+settle", func(b *testing.B) {
			s := newStore(b, partition.DefaultCount, nil)
			r := req
			r.Op, r.TTL = OpReserve, time.Millisecond // the books stay near 1,000 records, as the node's expiry loop keeps them at its rate
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now := benchT0.Add(time.Duration(i) * step)
				d, err := s.Apply(now, r)
				if err != nil || !d.Allowed {
					b.Fatal(err, d)
				}
				st := req
				st.Op, st.Reservation, st.Hits = OpSettle, d.Adjust.Reservation, 7
				if _, err := s.Apply(now, st); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 {
					s.Reservations().Expire(now) // settled records go at their expiry, as the node's loop does
				}
			}
		})
	}
}
