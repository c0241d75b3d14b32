package replica

import (
	"errors"
	"log/slog"
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
	store    *limiter.Store
	replicas *Store
	ring     func() *ring.Ring
	now      func() time.Time
	log      *slog.Logger
	metrics  *Metrics

	mu sync.Mutex
	// promoted holds, by the member that replicated them, the replicas
	// merged into this node's state while that member was alive but
	// unreachable, as merged (limiter.Store.MergeAdded, as are those of
	// presumedDead). If it hands its state off later (it was leaving, or
	// comes back), that state includes them: they are subtracted first
	// (Supersede), or dropped before this node hands the owner its state
	// (ReturnPromoted).
	promoted map[string][]limiter.KeyState
	// presumedDead holds, by the member that replicated them, the
	// replicas merged when gossip declared that member dead. It may have
	// left gracefully after all: a member that gets the leave before the
	// leaver's "leaving" metadata takes it for a failure (seen in
	// TestGracefulLeaveHandsCountsToHeirs, about one run in ten), and the
	// leaver then hands off the very keys whose replicas were promoted.
	// Supersede subtracts them then, as for promoted; unlike those, they
	// are never dropped before handing state to the member (a member that
	// died and restarts holds none of them). Kept until the member is in
	// the ring again or for presumedDeadFor, whichever comes first.
	presumedDead map[string]*presumption
}

// presumption is what was promoted from a member presumed dead, and when.
type presumption struct {
	at     time.Time
	states []limiter.KeyState
}

// presumedDeadFor is how long a handoff from a member presumed dead is
// taken to supersede what was promoted from it: far longer than a
// leaving node takes to hand off (its shutdown timeout is seconds).
const presumedDeadFor = time.Minute

// FailoverDeps is what a Failover works with.
type FailoverDeps struct {
	// Self is this node's id. Required.
	Self string
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
	return &Failover{self: d.Self, store: d.Store, replicas: d.Replicas, ring: d.Ring, now: d.Now, log: log, metrics: d.Metrics,
		promoted: map[string][]limiter.KeyState{}, presumedDead: map[string]*presumption{}}, nil
}

// Apply keeps a replication owner origin sent this node, as the backup
// of r's partitions (Store.Apply), and returns how many states it kept.
func (f *Failover) Apply(origin string, r peer.Replication) int { return f.replicas.Apply(origin, r) }

// Sweep drops the replicas that count nothing any more at now, and the
// books of members presumed dead for longer than presumedDeadFor; it
// returns how many replicas it dropped.
func (f *Failover) Sweep(now time.Time) int {
	f.mu.Lock()
	for id, p := range f.presumedDead {
		if now.Sub(p.at) >= presumedDeadFor {
			delete(f.presumedDead, id)
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
)

func (r reason) String() string { return [...]string{"owner failed", "owner unreachable"}[r] }

// Promote merges the replica this node holds of key's partition into its
// own store, if it holds one from the partition's owner: the request path
// calls it before it decides a key whose owner it cannot reach, as that
// key's heir. A replica another member sent (it owns the partition in its
// newer ring) is that member's to use, and stays.
func (f *Failover) Promote(key string) {
	r := f.ring()
	p := r.Partition(key)
	if f.replicas.Holds(p) && f.replicas.Origin(p) == r.PartitionOwner(p).ID {
		f.promote(p, ownerUnreachable)
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
	added, errs := f.store.MergeAdded(now, states)
	merged := len(states) - len(errs)
	switch why {
	case ownerUnreachable:
		f.promoted[origin] = append(f.promoted[origin], added...)
	case ownerFailed:
		p := f.presumedDead[origin]
		if p == nil {
			p = &presumption{}
			f.presumedDead[origin] = p
		}
		p.at, p.states = now, append(p.states, added...)
	}
	f.metrics.Promoted(merged)
	f.log.Info("took over a partition's replica", "partition", p, "keys", merged, "why", why.String(), "from", origin)
	if len(errs) > 0 {
		f.log.Warn("refused replicated keys on takeover", "partition", p, "refused", len(errs), "first", errs[0])
	}
}

// Supersede is called with a handoff's states from origin before they
// are merged. The handoff carries origin's whole state of those keys,
// which includes what this node merged from origin's replica while it
// could not reach it: that is subtracted (limiter.Store.Forget). And the
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
	promoted := f.promoted[origin]
	dead := f.presumedDead[origin]
	if len(promoted) == 0 && dead == nil {
		return
	}
	incoming := make(map[stateKey]bool, len(states))
	for _, ks := range states {
		incoming[stateKeyOf(ks)] = true
	}
	var gone []limiter.KeyState
	if len(promoted) > 0 {
		gone, f.promoted[origin] = split(promoted, incoming, gone)
	}
	if dead != nil {
		gone, dead.states = split(dead.states, incoming, gone)
	}
	f.store.Forget(f.now(), gone)
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
		p := f.store.PartitionOf(ks.Key)
		if done[p] {
			continue
		}
		done[p] = true
		if f.replicas.Holds(p) && f.replicas.Origin(p) == origin {
			f.replicas.Drop(p)
		}
	}
}

// ReturnPromoted is called before this node hands owner the state it
// holds of owner's partitions: it drops what it merged from owner's own
// replica, which owner still holds and would otherwise count twice, and
// returns it, for Unreturn if the handoff cannot reach owner after all.
func (f *Failover) ReturnPromoted(owner string) []limiter.KeyState {
	f.mu.Lock()
	promoted := f.promoted[owner]
	delete(f.promoted, owner)
	f.mu.Unlock()
	if len(promoted) > 0 {
		f.store.Forget(f.now(), promoted)
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
	added, _ := f.store.MergeAdded(f.now(), promoted)
	f.mu.Lock()
	f.promoted[owner] = append(f.promoted[owner], added...)
	f.mu.Unlock()
}

// Reconcile follows a ring change from old to cur; failed are the members
// gossip declared dead (not those that left). A partition whose owner
// failed has its replica merged into this node's state (its heir's, or
// handed there); one whose owner left gracefully (it hands its state off
// itself), or whose backup is no longer this node, has its replica
// dropped. What was promoted from a failed member is forgotten from the
// books: it will hand nothing off.
func (f *Failover) Reconcile(old, cur *ring.Ring, failed map[string]bool) {
	if old == nil {
		return
	}
	f.forgetFailed(failed)
	f.forgetReturned(cur)
	for p := range cur.PartitionCount() {
		if !f.replicas.Holds(p) {
			continue
		}
		prev, owner := old.PartitionOwner(p).ID, cur.PartitionOwner(p).ID
		origin := f.replicas.Origin(p)
		backup, _ := cur.Backup(p)
		switch {
		case origin == prev && failed[prev] && owner != prev:
			f.promote(p, ownerFailed)
		case origin == owner && backup.ID == f.self:
			// Already from the new owner, whose ring changed first: keep.
		case owner != prev || backup.ID != f.self:
			f.replicas.Drop(p)
		}
	}
}

// forgetReturned drops the books of members presumed dead that are in the
// ring again: whatever such a member hands off now, it decided since.
func (f *Failover) forgetReturned(cur *ring.Ring) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range cur.Members() {
		delete(f.presumedDead, m.ID)
	}
}

// forgetFailed drops the books of promotions from members that failed.
func (f *Failover) forgetFailed(failed map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.promoted {
		if failed[id] {
			delete(f.promoted, id)
		}
	}
}
