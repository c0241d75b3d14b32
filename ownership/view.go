package ownership

import (
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// Holdings says whether this node holds state of a partition;
// *limiter.Transfer is one. Safe for concurrent use, and fast: a View reads
// it on a check of a partition that waits for its state.
type Holdings interface {
	PartitionLen(partition int) int
}

// View is this node's ownership at one moment: who decides each key, who
// inherits it, whether an answer rests on this node's evidence alone. It
// is immutable, and every method is safe for concurrent use and O(1)
// (Members aside): the request path reads one on every check.
type View struct {
	self string
	ring *ring.Ring
	// without is the ring with this node left out, while partitions wait
	// for their state after this node joined (it was alone in its ring):
	// who decided them while it was out. Nil otherwise.
	without *ring.Ring
	// waiting marks, by partition, those whose state may still be on its
	// way to this node (waits); nil when none does.
	waiting  []bool
	nwaiting int
	// contested: a member is out of the ring on this node's evidence
	// alone, so this node may be on the small side of a partition.
	contested bool
	joined    bool
	leaving   bool
	live      int
	known     int
	holds     Holdings
	// changed is closed when a newer view replaces this one (Tracker);
	// nil for a view no Tracker published.
	changed chan struct{}
}

// Self is this node's id.
func (v *View) Self() string { return v.self }

// Ring is the ring this view routes by.
func (v *View) Ring() *ring.Ring { return v.ring }

// Joined reports whether the join has delivered the members: until then
// the ring is this node alone.
func (v *View) Joined() bool { return v.joined }

// Leaving reports whether this node is leaving: it then owns nothing.
func (v *View) Leaving() bool { return v.leaving }

// Waits reports whether partition p waits for its state: other members
// may still hold some.
func (v *View) Waits(p int) bool { return v.waiting != nil && v.waiting[p] }

// Waiting returns how many partitions wait for other members to say they
// handed them over.
func (v *View) Waiting() int { return v.nwaiting }

// Owner returns the member that decides key now: the ring's owner, except
// for a partition that has just come to this node, whose state is still on
// its way and of which it holds nothing (it has restarted, or just
// joined): until the state arrives, its keys stay with the member that
// decided them while this node was out of the ring, rather than be decided
// here from zero.
func (v *View) Owner(key string) peer.Route { return v.PartitionOwner(v.ring.Partition(key)) }

// PartitionOwner is Owner by partition.
func (v *View) PartitionOwner(p int) peer.Route {
	o := v.ring.PartitionOwner(p)
	if o.ID == v.self && v.without != nil && v.Waits(p) && v.holds.PartitionLen(p) == 0 {
		o = v.without.PartitionOwner(p)
	}
	return routeOf(o)
}

// Heir returns the member that inherits key if its owner fails: its
// partition's backup, which holds its replica. False in a ring of one.
func (v *View) Heir(key string) (peer.Route, bool) {
	b, ok := v.ring.Backup(v.ring.Partition(key))
	return routeOf(b), ok
}

// Members returns every member of the ring, this node among them, for the
// calls that go to each (a reset's copies, the console's reports).
func (v *View) Members() []peer.Route { return routesOf(v.ring.Members()) }

// Share returns how many members are live and how many this node knows
// (live, and failed within Config.ShareFor), for FallbackShare.
func (v *View) Share() (live, known int) { return v.live, v.known }

// Settling reports whether a check of key should wait before it is
// decided here, on Changed, at most the request path's settle wait: the
// join has not delivered the members yet, or key's partition has just
// come to this node and its state may still be on its way.
func (v *View) Settling(key string) bool {
	return !v.joined || (v.nwaiting > 0 && v.Waits(v.ring.Partition(key)))
}

// Contested reports whether an answer for key decided here rests on this
// node's view alone, and is marked degraded: a member is out of the ring
// unconfirmed, or the join has not delivered the members, or key's
// partition waits for its state.
func (v *View) Contested(key string) bool {
	return v.contested || v.Settling(key)
}

// AllContested reports whether every answer decided here is marked
// degraded, whatever its key: a member is out of the ring on this node's
// evidence alone, or the node is back alone from its data directory, or
// it is cut off. A cluster has converged only once no member says so.
func (v *View) AllContested() bool { return v.contested }

// Changed returns a channel closed when a newer view replaces this one:
// a check that waits for its partition to settle waits on it, then reads
// the newer view. Nil for a view no Tracker published (it never changes).
func (v *View) Changed() <-chan struct{} { return v.changed }

func routeOf(m ring.Member) peer.Route { return peer.Route{ID: m.ID, Addr: m.Addr} }

func routesOf(ms []ring.Member) []peer.Route {
	out := make([]peer.Route, len(ms))
	for i, m := range ms {
		out[i] = routeOf(m)
	}
	return out
}

// Fixed returns a view of r that never changes, in which self has joined
// and every member of r is live: for tests, and for a node whose members
// are fixed.
func Fixed(self string, r *ring.Ring) *View {
	n := len(r.Members())
	return &View{self: self, ring: r, joined: true, live: n, known: n}
}

// noHoldings holds nothing: a view without a store.
type noHoldings struct{}

func (noHoldings) PartitionLen(int) int { return 0 }
