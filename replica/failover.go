package replica

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// Failover is a node's side of being other members' heir: it keeps the
// replicas their owners send (Apply, into a Store), and merges a
// partition's replica into the node's own store when its owner has failed
// (Reconcile, on a ring change) or cannot be reached (Promote, on the
// request path), so that the node decides the owner's keys from the
// owner's counts, not from zero. It also keeps the books that let no hit
// count twice when such an owner, alive after all, hands the same keys
// off later (Supersede, on the receiving side of a handoff;
// ReturnPromoted, on the sending side).
//
// Concurrency: every method is safe for concurrent use. Promote runs on
// the request path, from many checks at once; it merges at most one
// partition, once per failover (later calls find nothing to merge and
// return after two map lookups), and blocks only on Failover's own lock
// and the store's partition locks, so a caller must hold neither.
// Promoting a partition, superseding and returning promoted states
// exclude each other (one lock), so that a handoff from a replica's
// origin is merged either before the replica is promoted (and the replica
// is dropped) or after (and the promotion is subtracted), never in
// between. Reconcile must not run concurrently with itself: the node
// calls it from its ring rebuild, which is serialised.
type Failover struct {
	self     string
	boot     string
	store    *limiter.Store
	replicas *Store
	ring     func() *ring.Ring
	now      func() time.Time
	log      *slog.Logger
	metrics  *Metrics

	mu sync.Mutex
	// books holds, by the member that replicated them, the replicas
	// merged into this node's state (as merged: limiter.Transfer.MergeAdded),
	// so that none counts twice when that member turns out to hold them
	// too: it hands the same keys off (it was leaving, or the link
	// healed), and Supersede subtracts them first; or this node hands it
	// its partitions back, and ReturnPromoted drops them first, if it
	// holds them (book.holds).
	books map[string]*book
	// members are the members as the last Reconcile gave them: each
	// one's boot, for the books of what is promoted from it.
	members map[string]Member
}

// Member is what a ring change says of a member.
type Member struct {
	// Failed: gossip declared it dead (not one that left).
	Failed bool
	// Boot names its process: it changes when the member restarts.
	Boot string
	// Restored: at that boot it restored its state from its disk
	// (--data-dir), so it holds what it had counted before it restarted.
	Restored bool
}

// book is what was promoted from one member.
type book struct {
	// boot is the member's boot when its replicas were promoted: if it
	// comes back under the same boot it never stopped (a partition
	// healed), and holds what it had counted.
	boot string
	// holds: the member holds what was promoted from it (it was only
	// unreachable, or is back and still holds it): dropped before this
	// node hands it its partitions. False while it is declared dead.
	holds  bool
	states []limiter.KeyState
}

// FailoverDeps is what a Failover works with.
type FailoverDeps struct {
	// Self is this node's id. Required.
	Self string
	// Boot names this node's process (cluster.Member.Boot): its answers
	// to replications say it, so that an owner knows when it restarted.
	Boot string
	// Store is the node's own state, into which replicas are promoted.
	// Required.
	Store *limiter.Store
	// Replicas keeps what owners send this node. Required.
	Replicas *Store
	// Ring returns the current ring. Required.
	Ring func() *ring.Ring
	// Now is the node's clock. Required.
	Now func() time.Time
	// Logger receives a line per promoted partition. Nil: slog.Default().
	Logger *slog.Logger
	// Metrics counts promotions; nil counts nothing.
	Metrics *Metrics
}

// NewFailover returns a Failover over d.
func NewFailover(d FailoverDeps) (*Failover, error) {
	switch {
	case d.Self == "":
		return nil, errors.New("replica: FailoverDeps.Self must not be empty")
	case d.Store == nil || d.Replicas == nil || d.Ring == nil || d.Now == nil:
		return nil, errors.New("replica: FailoverDeps.Store, Replicas, Ring and Now are required")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Failover{self: d.Self, boot: d.Boot, store: d.Store, replicas: d.Replicas, ring: d.Ring, now: d.Now, log: log, metrics: d.Metrics,
		books: map[string]*book{}, members: map[string]Member{}}, nil
}

// Apply keeps a replication owner origin sent this node, as the backup
// of r's partitions (Store.Apply), and returns how many states it kept.
// r's states are on this node's clock already (the node's peer.Handler
// rebased them as they arrived): so the store keeps them, its journal
// writes them, and a promotion merges them.
func (f *Failover) Apply(origin string, r peer.Replication) peer.Replicated {
	done := f.replicas.Apply(origin, r)
	done.Boot = f.boot
	return done
}

// Sweep drops the replicas that count nothing any more at now, and the
// promoted states the books keep that count nothing any more either (a
// book lasts as long as what it holds counts: a month's quota, a month);
// it returns how many replicas it dropped.
func (f *Failover) Sweep(now time.Time) int {
	ms := now.UnixMilli()
	f.mu.Lock()
	for id, b := range f.books {
		b.states = slices.DeleteFunc(b.states, func(ks limiter.KeyState) bool { return expiry(ks) <= ms })
		if len(b.states) == 0 {
			delete(f.books, id)
		}
	}
	f.mu.Unlock()
	return f.replicas.Sweep(now)
}

// reason says why a partition's replica is promoted.
type reason uint8

const (
	// ownerFailed: gossip declared the owner dead; its replicas were its
	// last word, and it hands nothing off.
	ownerFailed reason = iota
	// ownerUnreachable: this node could not reach the owner, which may be
	// alive, and hand the same keys off later.
	ownerUnreachable
	// ownerAbsent: this node restored the replica from its disk, and the
	// owner is not in the ring it serves by: not back yet from a restart
	// of the whole cluster, or gone.
	ownerAbsent
)

func (r reason) String() string {
	return [...]string{"owner failed", "owner unreachable", "owner absent since this node restarted"}[r]
}

// Promote merges the replica this node holds of key's partition into its
// own store, if it holds one from the partition's owner: the request path
// calls it before it decides a key whose owner it cannot reach, as that
// key's heir. A replica another member sent (it owns the partition in its
// newer ring) is that member's to use, and stays.
func (f *Failover) Promote(key string) {
	r := f.ring()
	p := r.Partition(key)
	if f.replicas.Holds(p) && f.replicas.Origin(p).ID == r.PartitionOwner(p).ID {
		f.promote(p, ownerUnreachable)
	}
}

// TakeOverAbsent promotes the replicas this node restored from its disk
// whose owner is not in cur, the ring it is about to serve by: the node
// calls it once, when its join has found the members, before it decides
// a key. Without it a node up before the others after a restart of the
// whole cluster would decide their keys from nothing while it holds
// their counts. What it promotes, handoff moves to the partitions'
// owners in cur; an owner that comes back holds it again if it never
// stopped (the replica's boot) or restored from its own disk, and the
// books take it back before this node hands it its partitions.
func (f *Failover) TakeOverAbsent(cur *ring.Ring) {
	in := map[string]bool{}
	for _, m := range cur.Members() {
		in[m.ID] = true
	}
	for p := range cur.PartitionCount() {
		if f.replicas.Holds(p) && !in[f.replicas.Origin(p).ID] {
			f.promote(p, ownerAbsent)
		}
	}
}

// promote merges the replica of partition p into the store. What this
// node does not own, handoff moves to the owner.
func (f *Failover) promote(p int, why reason) {
	f.mu.Lock()
	defer f.mu.Unlock()
	states, origin := f.replicas.Take(p)
	if len(states) == 0 {
		return
	}
	now := f.now()
	// The books keep what was added, as this node's clock placed it, not
	// the states as the owner sent them: taking those back would roll
	// this node's own counts onto the owner's clock and subtract from the
	// wrong window, erasing its own hits when the owner's clock runs ahead.
	added, errs := f.store.Transfer().MergeAdded(now, states)
	merged := len(states) - len(errs)
	b := f.books[origin.ID]
	if boot := f.bootOf(origin); b == nil || b.boot != boot {
		b = &book{boot: boot}
		f.books[origin.ID] = b
	}
	b.holds = why == ownerUnreachable
	b.states = append(b.states, added...)
	f.metrics.Promoted(merged)
	f.log.Info("took over a partition's replica", "partition", p, "keys", merged, "why", why.String(), "from", origin.ID)
	if len(errs) > 0 {
		f.log.Warn("refused replicated keys on takeover", "partition", p, "refused", len(errs), "first", errs[0])
	}
}

// bootOf is the boot origin's replica is of: the one it was sent
// under, or, from a sender that does not say, the one the last ring
// change gave. Requires f.mu held.
func (f *Failover) bootOf(origin Origin) string {
	if origin.Boot != "" {
		return origin.Boot
	}
	return f.members[origin.ID].Boot
}

// Supersede is called with a handoff's states from origin before they
// are merged. The handoff carries origin's whole state of those keys,
// which includes what this node merged from origin's replica while it
// could not reach it: that is subtracted (limiter.Transfer.Forget). And the
// replica origin sent of those keys' partitions is dropped: the handoff
// is newer, and a replica promoted after it (a check that could not reach
// origin, which is leaving, before this node's ring says so) would count
// its hits a second time.
//
// A member presumed dead that hands off was not dead: what was promoted
// from it is subtracted the same way.
func (f *Failover) Supersede(origin string, states []limiter.KeyState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropSupersededReplicas(origin, states)
	b := f.books[origin]
	if b == nil {
		return
	}
	incoming := make(map[stateKey]bool, len(states))
	for _, ks := range states {
		incoming[stateKeyOf(ks)] = true
	}
	var gone []limiter.KeyState
	gone, b.states = split(b.states, incoming, gone)
	f.store.Transfer().Forget(f.now(), gone)
}

// split appends to gone the states of in whose keys are in incoming, and
// returns it and the others.
func split(in []limiter.KeyState, incoming map[stateKey]bool, gone []limiter.KeyState) (_, kept []limiter.KeyState) {
	for _, ks := range in {
		if incoming[stateKeyOf(ks)] {
			gone = append(gone, ks)
		} else {
			kept = append(kept, ks)
		}
	}
	return gone, kept
}

// dropSupersededReplicas drops the replicas origin sent of the partitions
// states belong to. Requires f.mu held.
func (f *Failover) dropSupersededReplicas(origin string, states []limiter.KeyState) {
	done := map[int]bool{}
	for _, ks := range states {
		p := f.store.Transfer().PartitionOf(ks.Key)
		if done[p] {
			continue
		}
		done[p] = true
		if f.replicas.Holds(p) && f.replicas.Origin(p).ID == origin {
			f.replicas.Drop(p)
		}
	}
}

// ReturnPromoted is called before this node hands owner the state it
// holds of owner's partitions: it drops what it merged from owner's own
// replica if owner still holds it (book.holds), which would otherwise
// count twice, and returns it, for Unreturn if the handoff cannot reach
// owner after all. What was promoted from an owner that restarted with
// nothing stays, and goes to it with the rest.
func (f *Failover) ReturnPromoted(owner string) []limiter.KeyState {
	f.mu.Lock()
	var promoted []limiter.KeyState
	if b := f.books[owner]; b != nil && b.holds {
		promoted = b.states
		delete(f.books, owner)
	}
	f.mu.Unlock()
	if len(promoted) > 0 {
		f.store.Transfer().Forget(f.now(), promoted)
	}
	return promoted
}

// Unreturn puts back what ReturnPromoted dropped, when the handoff it was
// dropped for could not reach owner: the owner may be dead (its ring
// still names it while the others are asked), and this node goes on
// deciding its keys from the replica.
func (f *Failover) Unreturn(owner string, promoted []limiter.KeyState) {
	if len(promoted) == 0 {
		return
	}
	added, _ := f.store.Transfer().MergeAdded(f.now(), promoted)
	f.mu.Lock()
	b := f.books[owner]
	if b == nil {
		b = &book{boot: f.members[owner].Boot}
		f.books[owner] = b
	}
	b.holds, b.states = true, append(b.states, added...)
	f.mu.Unlock()
}

// Reconcile follows a ring change from old to cur; members says what
// the change says of each member (Failed: gossip declared it dead, not
// one that left). A partition whose owner failed has its replica merged
// into this node's state (its heir's, or handed there); one whose owner
// left gracefully keeps its replica here if this node is its new owner,
// until the owner's handoff drops it (Supersede), and drops it
// otherwise; one whose backup is no longer this node drops it; and a
// node leaving drops none (they go to its disk, for a restart). A replica from a member
// the membership has not seen since this node started was restored from
// its disk, and is promoted: its owner is not back (TakeOverAbsent). The
// books follow the members (settleBooks).
func (f *Failover) Reconcile(old, cur *ring.Ring, members map[string]Member) {
	if old == nil {
		return
	}
	f.settleBooks(cur, members)
	leaving := !inRing(cur, f.self)
	for p := range cur.PartitionCount() {
		if !f.replicas.Holds(p) {
			continue
		}
		prev, owner := old.PartitionOwner(p).ID, cur.PartitionOwner(p).ID
		origin := f.replicas.Origin(p).ID
		backup, _ := cur.Backup(p)
		m, seen := members[origin]
		switch {
		case !seen:
			f.promote(p, ownerAbsent)
		case origin == prev && m.Failed && owner != prev:
			f.promote(p, ownerFailed)
		case leaving:
			// This node is going: what it holds goes to its disk, and a
			// replica there is the counts of an owner that may not come
			// back before it does (a stop of the whole cluster).
		case origin == prev && owner == f.self:
			// Its owner left, handing its state to this node: the
			// handoff drops the replica when it comes (Supersede). One
			// that never comes (every member leaving at once, the
			// owner's keys kept on its own disk) leaves the replica for
			// a restart to promote, should this node be back first.
		case origin == owner && backup.ID == f.self:
			// Already from the new owner, whose ring changed first: keep.
		case owner != prev || backup.ID != f.self:
			f.replicas.Drop(p)
		}
	}
}

// inRing reports whether member id owns partitions in r.
func inRing(r *ring.Ring, id string) bool {
	for _, m := range r.Members() {
		if m.ID == id {
			return true
		}
	}
	return false
}

// settleBooks follows the members in the books. A member declared dead
// holds nothing this node would hand it; one in the ring holds what was
// promoted from it if it never stopped (the same boot: it was only cut
// off) or restarted from its disk (Restored), and the book waits for
// ReturnPromoted; one that restarted with nothing holds none of it, and
// the book goes: what was promoted is this node's to hand it, with the
// rest of its partitions.
func (f *Failover) settleBooks(cur *ring.Ring, members map[string]Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = members
	for id, b := range f.books {
		if members[id].Failed {
			b.holds = false
		}
	}
	for _, m := range cur.Members() {
		b := f.books[m.ID]
		if b == nil {
			continue
		}
		switch now := members[m.ID]; {
		case now.Boot == "":
			// It names no boot (a version before boots): back from the
			// dead, it restarted with nothing, as a restart was then;
			// only unreachable, it still holds what it had.
			if !b.holds {
				delete(f.books, m.ID)
			}
		case now.Boot == b.boot || now.Restored:
			b.holds = true
		default:
			delete(f.books, m.ID)
		}
	}
}
