package persist_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/persist"
)

// The mechanism's benchmarks, on the machine's disk (docs/design.md,
// "Persistence"): what a round costs to append, what a restart costs to
// read back, and bytes per key; beside the same work on bbolt, the
// embedded store most Go systems would reach for (one transaction per
// round, a key per state; reading back is a cursor over every key).

// benchKey is a realistic key: tenants, users, routes.
func benchKey(i int) string { return fmt.Sprintf("tenant:%d:user:%d:route:/v1/items", i%97, i) }

func benchState(i int) limiter.KeyState {
	return limiter.KeyState{Key: benchKey(i), Window: time.Minute, Algorithm: limiter.SlidingWindowCounter,
		WindowID: 29_500_000, Prev: int64(i % 50), Curr: int64(i%30 + 1)}
}

// roundSize is the states a round takes at 100k checks/s over 10k keys
// and 20 ms rounds: every key changes, so ~2,000 distinct states.
const roundSize = 2000

// BenchmarkAppendRound: one round's changes written to the segment (no
// sync: the node syncs every second, apart).
func BenchmarkAppendRound(b *testing.B) {
	cfg := persist.DefaultConfig()
	cfg.Dir = b.TempDir()
	l, _, err := persist.Open(cfg, me, persist.Deps{Source: newSource()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	states := make([]limiter.KeyState, roundSize)
	for i := range states {
		states[i] = benchState(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l.Own(states)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*roundSize), "ns/state")
}

// BenchmarkAppendRoundBolt: the same round as one bbolt transaction
// (NoSync, as the Log's appends are), a key per state.
func BenchmarkAppendRoundBolt(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bolt.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	states := make([]limiter.KeyState, roundSize)
	for i := range states {
		states[i] = benchState(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := boltRound(db, states); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*roundSize), "ns/state")
}

var bucket = []byte("states")

func boltRound(db *bolt.DB, states []limiter.KeyState) error {
	return db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		for _, ks := range states {
			v, err := protoconv.ToProtoKeyState(ks).MarshalVT()
			if err != nil {
				return err
			}
			k := binary.AppendUvarint([]byte(ks.Key), uint64(ks.Window.Milliseconds()))
			if err := bk.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// restoreKeys is the restart: a million keys.
const restoreKeys = 1_000_000

// BenchmarkRestore1M: a node's directory holding a snapshot of a million
// keys and a segment of rounds after it, read back as Open does; also
// the bytes on disk per key.
func BenchmarkRestore1M(b *testing.B) {
	dir := b.TempDir()
	writeMillion(b, dir)
	defer b.ReportMetric(float64(dirBytes(b, dir))/restoreKeys, "disk-B/key")
	cfg := persist.DefaultConfig()
	cfg.Dir = dir
	b.ResetTimer()
	for range b.N {
		l, r, err := persist.Open(cfg, me, persist.Deps{})
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Own) != restoreKeys {
			b.Fatalf("restored %d keys, want %d", len(r.Own), restoreKeys)
		}
		b.StopTimer()
		l.Abandon()
		b.StartTimer()
	}
}

// BenchmarkRestore1MIntoStore: the restart as a node makes it, the
// directory read back and merged into an empty store: what a node takes
// before it serves.
func BenchmarkRestore1MIntoStore(b *testing.B) {
	dir := b.TempDir()
	writeMillion(b, dir)
	cfg := persist.DefaultConfig()
	cfg.Dir = dir
	lc := limiter.DefaultConfig()
	lc.MaxKeys = 2 * restoreKeys
	b.ResetTimer()
	for range b.N {
		l, r, err := persist.Open(cfg, me, persist.Deps{})
		if err != nil {
			b.Fatal(err)
		}
		store, err := limiter.New(lc, 271)
		if err != nil {
			b.Fatal(err)
		}
		if merged, errs := store.Transfer().Merge(time.Unix(0, 29_500_000*int64(time.Minute)), r.Own); merged != restoreKeys || len(errs) > 0 {
			b.Fatalf("merged %d, %d refused: %v", merged, len(errs), errs)
		}
		b.StopTimer()
		l.Abandon()
		b.StartTimer()
	}
}

// writeMillion writes a snapshot of restoreKeys states and 50 rounds
// after it (a second of changes to 100k of them), as a node does.
func writeMillion(b *testing.B, dir string) {
	b.Helper()
	src := newSource()
	for i := range restoreKeys {
		src.set(benchState(i))
	}
	cfg := persist.DefaultConfig()
	cfg.Dir = dir
	l, _, err := persist.Open(cfg, me, persist.Deps{Source: src})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Snapshot(); err != nil {
		b.Fatal(err)
	}
	round := make([]limiter.KeyState, roundSize)
	for r := range 50 {
		for i := range round {
			round[i] = benchState((r*roundSize + i) % restoreKeys)
		}
		l.Own(round)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRestore1MBolt: a million keys in bbolt, read back with a
// cursor; and its bytes on disk per key.
func BenchmarkRestore1MBolt(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bolt.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]limiter.KeyState, 0, 10_000)
	for i := range restoreKeys {
		batch = append(batch, benchState(i))
		if len(batch) == cap(batch) {
			if err := boltRound(db, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	db.Close()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	defer b.ReportMetric(float64(fi.Size())/restoreKeys, "disk-B/key")
	b.ResetTimer()
	for range b.N {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		err = db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
				var m = protoconv.ToProtoKeyState(limiter.KeyState{})
				if err := m.UnmarshalVT(v); err != nil {
					return err
				}
				_ = protoconv.FromProtoKeyState(m)
				n++
				return nil
			})
		})
		db.Close()
		if err != nil || n != restoreKeys {
			b.Fatalf("read %d keys: %v", n, err)
		}
	}
}

func dirBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var total int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			b.Fatal(err)
		}
		total += fi.Size()
	}
	return total
}
