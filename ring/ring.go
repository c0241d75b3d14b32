// Package ring maps keys to their owner node with consistent hashing with
// bounded loads (github.com/buraksezer/consistent). A Ring is an immutable
// snapshot of one membership; a Holder swaps in a new one when membership
// changes, so lookups never take a lock.
//
// A key's partition is partition.Of(key, count): the function the limiter
// store's partitions and the Go client use too, and a node gives the ring
// and its store the same count, so ownership moves partition by partition.
package ring

import (
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/partition"
)

// Member is a node that can own partitions.
type Member struct {
	ID   string // unique node id
	Addr string // where its gRPC API listens
}

// Config holds the ring's settings; see consistent.Config. The partition
// count is New's: the node's, shared with its store.
type Config struct {
	// ReplicationFactor is the number of virtual points per member on the
	// hash circle; more points spread partitions more evenly (with 3
	// members, 20 points gave 64–113 partitions each, 200 give 82–103).
	// Default 200; the cost is paid only when membership changes.
	ReplicationFactor int
	// Load bounds a member's partitions to Load × the average. Default 1.25.
	Load float64
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{ReplicationFactor: 200, Load: 1.25}
}

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.ReplicationFactor < 1 {
		errs = append(errs, field.Errorf("ReplicationFactor", "must be ≥ 1, got %d", c.ReplicationFactor))
	}
	if c.Load < 1 {
		errs = append(errs, field.Errorf("Load", "must be ≥ 1, got %g", c.Load))
	}
	return errors.Join(errs...)
}

// Ring is one membership's assignment of partitions to members. It is
// immutable and safe for concurrent use.
type Ring struct {
	members []Member // sorted by ID
	owners  []int    // partition → index in members
	backups []int    // partition → index in members of its backup; -1: none (one member)
}

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

type cmember string

func (m cmember) String() string { return string(m) }

// New assigns partitions partitions to members. Members are identified by
// ID; the result depends only on the set, not the order, so every node that
// sees the same membership computes the same owners.
func New(cfg Config, partitions int, members []Member) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if partitions < 1 {
		return nil, fmt.Errorf("ring: partitions must be ≥ 1, got %d", partitions)
	}
	if len(members) == 0 {
		return nil, errors.New("ring: no members")
	}
	ms := append([]Member(nil), members...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	index := make(map[string]int, len(ms))
	cms := make([]consistent.Member, len(ms))
	for i, m := range ms {
		if m.ID == "" {
			return nil, errors.New("ring: member with empty ID")
		}
		if _, dup := index[m.ID]; dup {
			return nil, fmt.Errorf("ring: duplicate member %q", m.ID)
		}
		index[m.ID] = i
		cms[i] = cmember(m.ID)
	}
	// Resolve every partition once: lookups then index a slice, with none
	// of consistent's locking on the hot path.
	r := &Ring{members: ms, owners: assign(cfg, partitions, cms, index)}
	r.backups = backups(cfg, partitions, cms, index, r.owners)
	return r, nil
}

// assign returns each partition's owner, as an index in the members that
// index numbers.
func assign(cfg Config, partitions int, cms []consistent.Member, index map[string]int) []int {
	c := consistent.New(cms, consistent.Config{
		PartitionCount:    partitions,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
		Hasher:            hasher{},
	})
	owners := make([]int, partitions)
	for p := range owners {
		owners[p] = index[c.GetPartitionOwner(p).String()]
	}
	return owners
}

// backups returns each partition's backup: its owner in the ring without
// its owner, that is, the member that inherits it if the owner fails, so
// that a replica is already where the partition goes. (With bounded
// loads that is not always the next member on the circle, so it is
// computed, one ring per member: N rings of N−1 members, paid only when
// membership changes.) -1 for every partition of a ring of one.
func backups(cfg Config, partitions int, cms []consistent.Member, index map[string]int, owners []int) []int {
	out := make([]int, partitions)
	if len(cms) < 2 {
		for p := range out {
			out[p] = -1
		}
		return out
	}
	rest := make([]consistent.Member, 0, len(cms)-1)
	for i := range cms {
		rest = append(append(rest[:0], cms[:i]...), cms[i+1:]...)
		without := assign(cfg, partitions, rest, index)
		for p, o := range owners {
			if o == i {
				out[p] = without[p]
			}
		}
	}
	return out
}

// Partition returns key's partition.
func (r *Ring) Partition(key string) int { return partition.Of(key, len(r.owners)) }

// Owner returns the member that owns key.
func (r *Ring) Owner(key string) Member { return r.members[r.owners[r.Partition(key)]] }

// PartitionOwner returns the member that owns partition p.
func (r *Ring) PartitionOwner(p int) Member { return r.members[r.owners[p]] }

// Backup returns the member that holds partition p's replica: the one
// that would own p if its owner left. false in a ring of one member.
func (r *Ring) Backup(p int) (Member, bool) {
	if b := r.backups[p]; b >= 0 {
		return r.members[b], true
	}
	return Member{}, false
}

// PartitionCount is the number of partitions.
func (r *Ring) PartitionCount() int { return len(r.owners) }

// Members returns the members, sorted by ID.
func (r *Ring) Members() []Member { return append([]Member(nil), r.members...) }

// Partitions returns how many partitions each member owns, by ID.
func (r *Ring) Partitions() map[string]int {
	out := make(map[string]int, len(r.members))
	for _, i := range r.owners {
		out[r.members[i].ID]++
	}
	return out
}

// Equal reports whether two rings assign every partition to the same
// member at the same address.
func (r *Ring) Equal(o *Ring) bool {
	if r == nil || o == nil || len(r.owners) != len(o.owners) {
		return r == o
	}
	for p := range r.owners {
		if r.PartitionOwner(p) != o.PartitionOwner(p) {
			return false
		}
	}
	return true
}

// Holder holds the current Ring. Load is lock-free; Store swaps atomically.
// The zero Holder holds nil.
type Holder struct{ p atomic.Pointer[Ring] }

// Load returns the current ring, or nil before the first Store.
func (h *Holder) Load() *Ring { return h.p.Load() }

// Store makes r current.
func (h *Holder) Store(r *Ring) { h.p.Store(r) }
