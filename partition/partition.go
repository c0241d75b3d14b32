// Package partition is the one rule that places a key: its partition is
// xxhash64(key) mod the partition count. The limiter store locks and hands
// off state partition by partition, the ring assigns partitions to
// members, and the Go client finds a key's owner through the ring's
// partition table: all three call Of, so they cannot disagree.
package partition

import "github.com/cespare/xxhash/v2"

// DefaultCount is the partition count of a cluster unless its operator
// sets another (--partitions): a prime, so that keys spread evenly even
// when their hashes share factors, and enough that one partition is a
// small fraction of a node's keys (271 over 3 nodes: ~90 each).
const DefaultCount = 271

// Of returns key's partition among count partitions, in [0, count).
// count must be positive.
func Of(key string, count int) int { return OfHash(Hash(key), count) }

// Hash returns key's 64-bit hash, from which OfHash derives its partition:
// for callers that also need a hash of the key for themselves (the
// limiter's hot-key summaries), so that a key is hashed once.
func Hash(key string) uint64 { return xxhash.Sum64String(key) }

// OfHash returns the partition, among count, of a key whose Hash is h:
// OfHash(Hash(key), count) == Of(key, count).
func OfHash(h uint64, count int) int { return int(h % uint64(count)) }
