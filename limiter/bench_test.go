package limiter

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/partition"
)

var benchT0 = time.UnixMilli(1_700_000_000_000)

// A hot key that stays under its limit: the common case of a well-behaved
// client, and the one that must not allocate.
func BenchmarkCounterHotKey(b *testing.B) {
	s := newStore(b, partition.DefaultCount, nil)
	req := Request{Key: "user:12345:/api/v1/search", Limit: 1 << 40, Window: time.Minute, Hits: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A key over its limit: every call is a denial with a retry time to solve.
func BenchmarkCounterHotKeyDenied(b *testing.B) {
	s := newStore(b, partition.DefaultCount, nil)
	req := Request{Key: "user:12345:/api/v1/search", Limit: 100, Window: time.Minute, Hits: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A GCRA bucket's hot key under its rate: the one-hit-per-check hot path,
// its TAT moved on each call.
func BenchmarkGCRAHotKey(b *testing.B) {
	s := newStore(b, partition.DefaultCount, nil)
	req := Request{Key: "user:12345:/api/v1/search", Limit: 1 << 30, Window: time.Hour, Algorithm: GCRA, Hits: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A GCRA bucket over its rate: every call is a denial.
func BenchmarkGCRAHotKeyDenied(b *testing.B) {
	s := newStore(b, partition.DefaultCount, nil)
	req := Request{Key: "user:12345:/api/v1/search", Limit: 100, Window: time.Minute, Algorithm: GCRA, Hits: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A hot calendar quota (a month in Paris) under its limit: the counter's
// hot path, the period read from its zone's cache.
func BenchmarkCalendarHotKey(b *testing.B) {
	s := newStore(b, partition.DefaultCount, nil)
	month, err := NewCalendar(CalendarMonth, "Europe/Paris")
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Key: "user:12345:/api/v1/search", Limit: 1 << 40, Calendar: month, Hits: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A log key with limit 100 per second at ~1000 requests/s: a mix of
// admissions, prunes and denials.
func BenchmarkLogHotKey(b *testing.B) {
	s := newStore(b, partition.DefaultCount, nil)
	req := Request{Key: "user:12345:/login", Limit: 100, Window: time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Millisecond), req); err != nil {
			b.Fatal(err)
		}
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:%d:user:%d:/api/v1/resource", i%97, i)
	}
	return keys
}

// Parallel decisions spread over 100k keys, one store: the sharded locks at
// work. Run with -cpu 1,2 to see the scaling.
func benchmarkManyKeys(b *testing.B, algo Algorithm, limit int64) {
	s := newStore(b, partition.DefaultCount, nil)
	keys := benchKeys(100_000)
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1) * 7919)
		for pb.Next() {
			i++
			req := Request{Key: keys[i%len(keys)], Limit: limit, Window: time.Minute, Algorithm: algo, Hits: 1}
			if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHotKeySummaries is what the hot-key summaries cost a decision:
// off (0) and on (the default), in one run, for one hot key (always
// monitored: an increment) and for 100k keys in turn (nearly every check
// replaces a monitored key: the summaries' worst case).
func BenchmarkHotKeySummaries(b *testing.B) {
	keys := benchKeys(100_000)
	for _, load := range []string{"one-key", "100k-keys"} {
		for _, k := range []int{0, DefaultConfig().HotKeys} {
			b.Run(fmt.Sprintf("%s/hot-keys=%d", load, k), func(b *testing.B) {
				s := newStore(b, partition.DefaultCount, func(c *Config) { c.HotKeys = k })
				n := len(keys)
				if load == "one-key" {
					n = 1
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					req := Request{Key: keys[i%n], Limit: 1 << 40, Window: time.Minute, Hits: 1}
					if _, err := s.Check(benchT0.Add(time.Duration(i)*time.Microsecond), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkHotKeySummariesMemory reports the heap of a store whose every
// summary is full (both epochs, checks and denials, 40-byte keys), with
// the summaries off (0) and on: the difference is what they cost.
func BenchmarkHotKeySummariesMemory(b *testing.B) {
	keys := benchKeys(50_000)
	for _, k := range []int{0, DefaultConfig().HotKeys} {
		b.Run(fmt.Sprintf("hot-keys=%d", k), func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				s := newStore(b, partition.DefaultCount, func(c *Config) { c.HotKeys = k })
				for epoch := range 2 {
					now := benchT0.Add(time.Duration(epoch) * HotKeysEpoch)
					for _, key := range keys[epoch*len(keys)/2 : (epoch+1)*len(keys)/2] {
						for range 2 { // the second is denied: both lists fill
							if _, err := s.Check(now, Request{Key: key, Limit: 1, Window: time.Second, Hits: 1}); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				s.Sweep(benchT0.Add(time.Hour)) // the keys' state is gone; the summaries stay
				b.ReportMetric(float64(heapInUse()-before), "B/store")
				runtime.KeepAlive(s)
			}
		})
	}
}

func BenchmarkCounterManyKeysParallel(b *testing.B) { benchmarkManyKeys(b, SlidingWindowCounter, 1000) }
func BenchmarkLogManyKeysParallel(b *testing.B)     { benchmarkManyKeys(b, SlidingWindowLog, 100) }
func BenchmarkGCRAManyKeysParallel(b *testing.B)    { benchmarkManyKeys(b, GCRA, 1000) }

// BenchmarkMemoryPerKey reports the heap each key costs once its state is
// full, measured as heap growth after GC divided by keys, with realistic key
// strings (~36 bytes). The ns/op figure of this benchmark is meaningless.
func BenchmarkMemoryPerKey(b *testing.B) {
	month, err := NewCalendar(CalendarMonth, "Europe/Paris")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		algo  Algorithm
		limit int64
		keys  int
		cal   Calendar
	}{
		{"counter", SlidingWindowCounter, 100, 200_000, 0},
		// A calendar limit is a counter under another window: the same
		// cost.
		{"calendar-month", SlidingWindowCounter, 100, 200_000, month},
		{"log-limit-5", SlidingWindowLog, 5, 200_000, 0},
		// A GCRA bucket: one TAT, whatever the limit.
		{"gcra", GCRA, 100, 200_000, 0},
		// Limits between: where the log's 4-byte entries start to
		// outweigh what every key costs (docs/benchmarks.md).
		{"log-limit-20", SlidingWindowLog, 20, 50_000, 0},
		{"log-limit-100", SlidingWindowLog, 100, 10_000, 0},
		{"log-limit-1000", SlidingWindowLog, 1000, 2_000, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				keys := benchKeys(c.keys)
				before := heapInUse()
				s := newStore(b, partition.DefaultCount, func(cfg *Config) { cfg.MaxKeys = 1 << 22 })
				for _, k := range keys {
					// A full window: every key holds `limit` hits.
					req := Request{Key: k, Limit: c.limit, Window: time.Minute, Algorithm: c.algo, Hits: c.limit}
					if c.cal != 0 {
						req.Window, req.Calendar = 0, c.cal
					}
					if _, err := s.Check(benchT0, req); err != nil {
						b.Fatal(err)
					}
				}
				keyBytes := 0
				for _, k := range keys {
					keyBytes += len(k)
				}
				after := heapInUse()
				perKey := float64(after-before) / float64(c.keys)
				b.ReportMetric(perKey, "B/key")
				b.ReportMetric(float64(keyBytes)/float64(c.keys), "keystring-B/key")
				if c.algo == SlidingWindowLog {
					b.ReportMetric(perKey/float64(c.limit), "B/entry")
				}
				// Without this the callers' copies of the keys die before
				// the second reading and are wrongly subtracted.
				runtime.KeepAlive(keys)
				runtime.KeepAlive(s)
			}
		})
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// What replication's change tracking adds to a check (Config.TrackChanges,
// see journal): uniform checks over 3,300 keys, and every 570 checks a
// round takes what changed in every partition, as a node's replicator
// does every 20 ms at ~28k checks/s. states/op is what the rounds took
// per check.
func BenchmarkCheckTrackingChanges(b *testing.B) {
	for _, track := range []bool{false, true} {
		b.Run(fmt.Sprintf("track=%t", track), func(b *testing.B) {
			s := newStore(b, partition.DefaultCount, func(c *Config) { c.TrackChanges = track })
			keys := benchKeys(3_300)
			var taken []KeyState
			states := 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now := benchT0.Add(time.Duration(i) * time.Microsecond)
				req := Request{Key: keys[(i*7919)%len(keys)], Limit: 1 << 40, Window: time.Minute, Hits: 1}
				if _, err := s.Check(now, req); err != nil {
					b.Fatal(err)
				}
				if i%570 != 569 {
					continue
				}
				for p := range s.Transfer().Partitions() {
					taken = s.Changes().Take(taken[:0], p, now)
					states += len(taken)
				}
			}
			b.ReportMetric(float64(states)/float64(b.N), "states/op")
		})
	}
}
