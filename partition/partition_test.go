package partition_test

import (
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/partition"
)

// The rule is part of the wire contract: a client that hashes keys
// itself (client.OwnerOf) must place them exactly as the nodes do.
func TestOfIsXXHash64ModCount(t *testing.T) {
	for _, key := range []string{"", "user:42", "ip:10.0.0.1", "é"} {
		for _, count := range []int{1, 7, partition.DefaultCount} {
			want := int(xxhash.Sum64String(key) % uint64(count))
			assert.Equal(t, want, partition.Of(key, count), "%q mod %d", key, count)
			assert.Equal(t, want, partition.OfHash(partition.Hash(key), count), "%q mod %d", key, count)
		}
	}
}

// Sequential keys (user:1, user:2, …) spread evenly over the partitions:
// no partition holds more than twice its share.
func TestOfSpreadsSequentialKeys(t *testing.T) {
	const keys = 100_000
	counts := make([]int, partition.DefaultCount)
	for i := range keys {
		counts[partition.Of(fmt.Sprintf("user:%d", i), partition.DefaultCount)]++
	}
	share := keys / partition.DefaultCount
	for p, n := range counts {
		assert.Less(t, n, 2*share, "partition %d", p)
		assert.Greater(t, n, share/2, "partition %d", p)
	}
}
