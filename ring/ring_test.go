package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

func members(ids ...string) []Member {
	out := make([]Member, len(ids))
	for i, id := range ids {
		out[i] = Member{ID: id, Addr: "127.0.0.1:" + fmt.Sprint(9000+i)}
	}
	return out
}

// Every node must compute the same owners from the same set, whatever order
// gossip delivered it in.
func TestOwnersDependOnlyOnTheSet(t *testing.T) {
	ms := members("node-a", "node-b", "node-c", "node-d")
	base, err := New(DefaultConfig(), partition.DefaultCount, ms)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := append([]Member(nil), ms...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		r, err := New(DefaultConfig(), partition.DefaultCount, shuffled)
		require.NoError(t, err)
		assert.True(t, base.Equal(r))
	}
}

// The store picks shards with the same function, so shard = partition.
func TestPartitionIsXXHashModCount(t *testing.T) {
	r, err := New(DefaultConfig(), partition.DefaultCount, members("a"))
	require.NoError(t, err)
	for _, k := range []string{"", "user:1", "tenant:7:user:42:/search"} {
		assert.Equal(t, int(xxhash.Sum64String(k)%271), r.Partition(k))
	}
}

// Bounded loads: no member owns more than Load × average, and sequential
// keys spread evenly (FNV-1 split them 15/38/47 % over three nodes).
func TestLoadIsBoundedAndKeysSpread(t *testing.T) {
	r, err := New(DefaultConfig(), partition.DefaultCount, members("a", "b", "c"))
	require.NoError(t, err)
	parts := r.Partitions()
	require.Len(t, parts, 3)
	total := 0
	for id, n := range parts {
		assert.LessOrEqual(t, n, 113, "member %s: ceil(271/3×1.25) = 113", id)
		total += n
	}
	assert.Equal(t, 271, total)

	keys := map[string]int{}
	for i := range 30_000 {
		keys[r.Owner(fmt.Sprintf("user:%d", i)).ID]++
	}
	for id, n := range keys {
		share := float64(n) / 30_000
		assert.InDelta(t, 1.0/3, share, 0.12, "member %s owns %.1f%% of sequential keys", id, 100*share)
	}
}

// Adding a member moves only the partitions it takes: consistent hashing's
// point, and what keeps handoff small.
func TestJoinMovesPartitionsOnlyToTheNewMember(t *testing.T) {
	before, err := New(DefaultConfig(), partition.DefaultCount, members("a", "b", "c"))
	require.NoError(t, err)
	after, err := New(DefaultConfig(), partition.DefaultCount, append(members("a", "b", "c"), Member{ID: "d", Addr: "x"}))
	require.NoError(t, err)
	moved, toNew := 0, 0
	for p := range 271 {
		if before.PartitionOwner(p).ID != after.PartitionOwner(p).ID {
			moved++
			if after.PartitionOwner(p).ID == "d" {
				toNew++
			}
		}
	}
	assert.Positive(t, toNew)
	// Bounded loads may shuffle a few partitions among the old members too.
	assert.LessOrEqual(t, moved-toNew, moved/4, "moved %d, of which %d to the new member", moved, toNew)
	t.Logf("join of a 4th member moved %d of 271 partitions, %d to it", moved, toNew)
}

func TestInvalidInput(t *testing.T) {
	_, err := New(DefaultConfig(), partition.DefaultCount, nil)
	assert.Error(t, err)
	_, err = New(DefaultConfig(), partition.DefaultCount, []Member{{ID: "a"}, {ID: "a"}})
	assert.ErrorContains(t, err, "duplicate")
	_, err = New(Config{ReplicationFactor: 1, Load: 1}, 0, members("a"))
	assert.Error(t, err)
}

func TestHolderSwaps(t *testing.T) {
	var h Holder
	assert.Nil(t, h.Load())
	r, err := New(DefaultConfig(), partition.DefaultCount, members("a"))
	require.NoError(t, err)
	h.Store(r)
	assert.Same(t, r, h.Load())
}

func BenchmarkOwner(b *testing.B) {
	r, err := New(DefaultConfig(), partition.DefaultCount, members("a", "b", "c"))
	if err != nil {
		b.Fatal(err)
	}
	var h Holder
	h.Store(r)
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Load().Owner("tenant:7:user:42:/search")
	}
}

// A partition's backup is where it goes if its owner fails: its owner in
// the ring without that member, so a replica is already in place.
func TestBackupIsTheHeir(t *testing.T) {
	ms := members("node-a", "node-b", "node-c", "node-d")
	r, err := New(DefaultConfig(), partition.DefaultCount, ms)
	require.NoError(t, err)
	heirs := map[string]*Ring{}
	for i, m := range ms {
		rest := append(append([]Member(nil), ms[:i]...), ms[i+1:]...)
		heirs[m.ID], err = New(DefaultConfig(), partition.DefaultCount, rest)
		require.NoError(t, err)
	}
	for p := range r.PartitionCount() {
		owner := r.PartitionOwner(p)
		b, ok := r.Backup(p)
		require.True(t, ok, "partition %d", p)
		assert.NotEqual(t, owner.ID, b.ID, "partition %d: never its own owner", p)
		assert.Equal(t, heirs[owner.ID].PartitionOwner(p), b, "partition %d", p)
	}

	alone, err := New(DefaultConfig(), partition.DefaultCount, members("node-a"))
	require.NoError(t, err)
	_, ok := alone.Backup(0)
	assert.False(t, ok, "a ring of one has no backup")
}
