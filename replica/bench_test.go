package replica_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/replica"
)

// What a backup pays per key it keeps for an owner: the cost of
// replication in memory, next to the limiter's BenchmarkMemoryPerKey
// (go test -run '^$' -bench MemoryPerReplica ./replica/).
func BenchmarkMemoryPerReplica(b *testing.B) {
	for _, c := range []struct {
		name  string
		algo  limiter.Algorithm
		limit int
		keys  int
	}{
		{"counter", limiter.SlidingWindowCounter, 100, 200_000},
		{"log-limit-5", limiter.SlidingWindowLog, 5, 200_000},
		{"log-limit-100", limiter.SlidingWindowLog, 100, 10_000},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				states := make([]limiter.KeyState, c.keys)
				for i := range states {
					ks := limiter.KeyState{Key: fmt.Sprintf("tenant:%d:user:%d", i%7, i), Window: time.Minute, Algorithm: c.algo}
					if c.algo == limiter.SlidingWindowLog {
						ks.Log = make([]int64, c.limit)
						for j := range ks.Log {
							ks.Log[j] = t0 + int64(j)
						}
					} else {
						ks.WindowID, ks.Curr = t0/60_000, int64(c.limit)
					}
					states[i] = ks
				}
				s := replica.NewStore(partition.DefaultCount, 1<<22, 10_000, nil, nil)
				s.Apply("owner", peer.Replication{States: states})
				states = nil // what stays is the store's: key strings, logs, its maps
				after := heapInUse()
				b.ReportMetric(float64(after-before)/float64(c.keys), "B/key")
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
