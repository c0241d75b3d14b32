package topk_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/topk"
)

func add(s *topk.Summary, key string, n uint64) { s.Add(xxhash.Sum64String(key), key, n) }

func byKey(es []topk.Entry) map[string]topk.Entry {
	m := map[string]topk.Entry{}
	for _, e := range es {
		m[e.Key] = e
	}
	return m
}

func TestSummaryIsExactWhileKeysFit(t *testing.T) {
	s := topk.New(4)
	for i, k := range []string{"a", "b", "a", "c", "a", "b"} {
		add(s, k, uint64(i%2+1))
	}
	got := byKey(s.AppendEntries(nil))
	assert.Equal(t, topk.Entry{Key: "a", Count: 3}, got["a"]) // 1 + 1 + 1
	assert.Equal(t, topk.Entry{Key: "b", Count: 4}, got["b"]) // 2 + 2
	assert.Equal(t, topk.Entry{Key: "c", Count: 2}, got["c"])
	assert.Zero(t, s.Min(), "not full: an unseen key has count 0")
	assert.EqualValues(t, 9, s.Total())
}

// TestSummaryKeepsItsBounds checks Space-Saving's guarantees against exact
// counts on skewed random streams: every reported count is within its error
// above the truth, every key heavier than total/k is reported, and every
// unreported key is at most Min.
func TestSummaryKeepsItsBounds(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for round := range 50 {
		k := 1 + rng.IntN(32)
		s := topk.New(k)
		zipf := rand.NewZipf(rng, 1.1+rng.Float64(), 1, 500)
		truth := map[string]uint64{}
		var total uint64
		for range 2000 + rng.IntN(5000) {
			key := fmt.Sprintf("key:%d", zipf.Uint64())
			n := uint64(1 + rng.IntN(3))
			add(s, key, n)
			truth[key] += n
			total += n
		}
		got := byKey(s.AppendEntries(nil))
		require.LessOrEqual(t, len(got), k)
		for key, c := range truth {
			e, ok := got[key]
			if !ok {
				require.LessOrEqual(t, c, s.Min(), "seed %d round %d: unreported %s", seed, round, key)
				require.LessOrEqual(t, c, total/uint64(k), "seed %d round %d: %s heavier than total/k is missing", seed, round, key)
				continue
			}
			require.GreaterOrEqual(t, e.Count, c, "seed %d round %d: %s undercounted", seed, round, key)
			require.LessOrEqual(t, e.Count-e.Err, c, "seed %d round %d: %s error bound", seed, round, key)
		}
	}
}

func TestResetForgetsAndReuses(t *testing.T) {
	s := topk.New(2)
	add(s, "a", 1)
	add(s, "b", 1)
	add(s, "c", 5)
	s.Reset()
	assert.Zero(t, s.Len())
	assert.Zero(t, s.Total())
	add(s, "d", 1)
	assert.Equal(t, []topk.Entry{{Key: "d", Count: 1}}, s.AppendEntries(nil))
}

func TestSteadyAddDoesNotAllocate(t *testing.T) {
	s := topk.New(8)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:%02d", i)
		add(s, keys[i], 1) // every slot's buffer has grown to a key's length
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		add(s, keys[i%len(keys)], 1)
		i++
	})
	assert.Zero(t, allocs)
}

func TestZeroCapacityCountsNothing(t *testing.T) {
	s := topk.New(0)
	add(s, "a", 1)
	assert.Empty(t, s.AppendEntries(nil))
	assert.Zero(t, s.Min())
}

func TestMergeKeepsTheBounds(t *testing.T) {
	// Two epochs of one stream: "a" in both, "b" only in the first, whose
	// summary was full with min 3; the second monitors every key it saw.
	first := []topk.Entry{{Key: "a", Count: 10}, {Key: "b", Count: 3, Err: 2}}
	second := []topk.Entry{{Key: "a", Count: 5, Err: 1}, {Key: "c", Count: 2}}
	got := byKey(topk.Merge([][]topk.Entry{first, second}, []uint64{3, 0}))
	assert.Equal(t, topk.Entry{Key: "a", Count: 15, Err: 1}, got["a"])
	assert.Equal(t, topk.Entry{Key: "b", Count: 3, Err: 2}, got["b"])
	assert.Equal(t, topk.Entry{Key: "c", Count: 5, Err: 3}, got["c"], "c may have had up to 3 in the first epoch")
}

func TestTopSortsHeaviestFirst(t *testing.T) {
	es := []topk.Entry{{Key: "b", Count: 2}, {Key: "a", Count: 2}, {Key: "c", Count: 9}, {Key: "d", Count: 1}}
	assert.Equal(t, []topk.Entry{{Key: "c", Count: 9}, {Key: "a", Count: 2}, {Key: "b", Count: 2}}, topk.Top(es, 3))
	assert.Len(t, topk.Top(nil, 3), 0)
}

func BenchmarkAdd(b *testing.B) {
	for _, k := range []int{8, 32} {
		for _, dist := range []string{"hot", "uniform"} {
			b.Run(fmt.Sprintf("k=%d/%s", k, dist), func(b *testing.B) {
				s := topk.New(k)
				keys := make([]string, 4096)
				hashes := make([]uint64, len(keys))
				for i := range keys {
					keys[i] = fmt.Sprintf("user:%06d", i)
					hashes[i] = xxhash.Sum64String(keys[i])
				}
				n := len(keys)
				if dist == "hot" {
					n = k / 2 // every key is monitored
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					j := i % n
					s.Add(hashes[j], keys[j], 1)
				}
			})
		}
	}
}
