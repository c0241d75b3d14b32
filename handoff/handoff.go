// Package handoff moves key state to its owner: a node sends every
// partition it holds but does not own (after a ring change, after a
// fallback decided keys of an unreachable owner, when it leaves) to the
// partition's owner (Sender), which merges it into its own (Receiver,
// which the node's peer.Handler calls).
//
// A partition is copied, sent, and only once delivered is exactly what
// was sent forgotten (limiter.Transfer.Forget), so no admitted hit is lost
// and checks decided here meanwhile see the full state.
package handoff

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// ChunkBytes bounds one Handoff call (limiter.ChunkBytes).
const ChunkBytes = limiter.ChunkBytes

// Deps is what a Sender works with.
type Deps struct {
	// Self is this node's id. Required.
	Self string
	// Store holds the state to hand off: the node's store's Transfer
	// (limiter.Store.Transfer), all a Sender uses of it. Required.
	Store *limiter.Transfer
	// Peers carries the calls. Required.
	Peers peer.Peers
	// Ring returns the current ring: who owns each partition. Required.
	Ring func() *ring.Ring
	// Leaving reports whether this node is leaving the cluster: it then
	// owns nothing and hands off every partition. Nil: never.
	Leaving func() bool
	// Now is the node's clock. Required.
	Now func() time.Time
	// Logger receives a line per handoff round that moved keys, and the
	// failures. Nil: slog.Default().
	Logger *slog.Logger
	// Metrics counts handoffs; nil counts nothing.
	Metrics *Metrics
	// Replicas, if set, is told before a partition set is copied for an
	// owner, so that the node drops from its store what it merged from
	// that owner's own replica, which the owner still holds. Nil:
	// replication is off.
	Replicas Replicas
}

// Replicas is what handoff asks of the replicas this node keeps as other
// members' heir (replica.Failover is one), so that no hit counts twice
// when a member whose replica this node promoted hands off, or is handed,
// the same keys. Both methods are safe for concurrent use, and may block
// while a promotion is under way.
type Replicas interface {
	// Supersede is called with the states origin hands this node, before
	// they are merged: what this node merged from origin's replica is
	// subtracted, and the replica dropped.
	Supersede(origin string, states []limiter.KeyState)
	// ReturnPromoted is called before this node hands owner the state it
	// holds of owner's partitions: what it merged from owner's own
	// replica, which owner still holds, is dropped, and returned.
	ReturnPromoted(owner string) []limiter.KeyState
	// Unreturn puts back what ReturnPromoted dropped, when the handoff
	// could not reach owner.
	Unreturn(owner string, promoted []limiter.KeyState)
}

// Sender hands off the partitions a node holds but does not own. Run is
// safe for concurrent use, but two rounds at once would send the same
// state twice: Serve runs them from one goroutine, and a caller that runs
// one itself (a leaving node's last rounds) stops Serve first.
type Sender struct {
	d    Deps
	log  *slog.Logger
	wake chan struct{} // capacity 1: a round is asked for
}

// New returns a Sender over d.
func New(d Deps) (*Sender, error) {
	switch {
	case d.Self == "":
		return nil, errors.New("handoff: Deps.Self must not be empty")
	case d.Store == nil || d.Peers == nil || d.Ring == nil || d.Now == nil:
		return nil, errors.New("handoff: Deps.Store, Peers, Ring and Now are required")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sender{d: d, log: log, wake: make(chan struct{}, 1)}, nil
}

// Wake asks Serve for a round now: the ring changed, or state this node
// decided may belong to another member. Never blocks; asks made while a
// round runs coalesce into one more.
func (s *Sender) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Serve runs rounds until stop is closed: after every Wake, and every
// interval for the state made meanwhile (fallback decisions, forwards
// decided during convergence). A round that left state behind is retried
// sooner, from 100 ms doubling up to interval: an owner that just
// (re)joined is often not yet connectable for a moment, and until its
// counts arrive it decides their keys from less than they hold.
func (s *Sender) Serve(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTimer(interval)
	defer t.Stop()
	retry := time.Duration(0)
	for {
		select {
		case <-stop:
			return
		case <-s.wake:
		case <-t.C:
		}
		if left := s.Run(context.Background()); left > 0 {
			retry = min(max(2*retry, 100*time.Millisecond), interval)
		} else {
			retry = 0
		}
		next := interval
		if retry > 0 {
			next = retry
		}
		t.Reset(next)
	}
}

// Run moves every partition this node holds but does not own to its
// owner, tells every owner it handed all it held (done), and returns how
// many keys stayed behind because the owner could not be reached (they go
// in a later round).
//
// Each owner is served on its own, at once: a handoff to an owner that
// does not answer (killed, its connection not yet known dead) holds up
// neither the handoffs nor the HandoffDone of the others. A round that
// went owner by owner made a dead owner's call, up to the peer keepalive
// timeout, delay every other owner's HandoffDone, and the heirs of the
// dead member's partitions answered their keys degraded meanwhile
// (compose-test: a fresh key 2 of 10 degraded after the kill was
// confirmed; TestADeadOwnerHoldsUpNoOtherOwner).
func (s *Sender) Run(ctx context.Context) (left int) {
	r := s.d.Ring()
	misplaced := s.misplaced(r)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, owner := range s.owners(r, misplaced) {
		wg.Go(func() {
			n := 0
			if parts := misplaced[owner]; len(parts) > 0 {
				n = s.send(ctx, owner, parts)
			}
			if n == 0 {
				s.done(ctx, r, owner)
			}
			mu.Lock()
			left += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return left
}

// owners returns every member of r but this node, and every owner of a
// misplaced partition, once each.
func (s *Sender) owners(r *ring.Ring, misplaced map[ring.Member][]int) []ring.Member {
	seen := map[ring.Member]bool{}
	var out []ring.Member
	add := func(m ring.Member) {
		if m.ID != s.d.Self && !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	for _, m := range r.Members() {
		add(m)
	}
	for m := range misplaced {
		add(m) // leaving, but the ring has no one else yet: itself, skipped
	}
	return out
}

// done tells owner that this node holds nothing of the partitions r
// gives it that it has not handed over (peer.Peers.HandoffDone), once the
// handoff to owner this round, if any, delivered everything: a member
// that has just joined or restarted keeps their keys with the members
// that decided them meanwhile, or marks their answers degraded, until
// every member has said so (Receiver.Pending). A partition this node
// decided more of since its snapshot (checks forwarded here meanwhile) is
// not done: it goes in the next round. An owner that cannot be told hears
// it next round.
func (s *Sender) done(ctx context.Context, r *ring.Ring, owner ring.Member) {
	var parts []int
	for p := range r.PartitionCount() {
		if r.PartitionOwner(p).ID == owner.ID && s.d.Store.PartitionLen(p) == 0 {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return
	}
	if err := s.d.Peers.HandoffDone(ctx, peer.Route{ID: owner.ID, Addr: owner.Addr}, parts); err != nil {
		s.log.Debug("telling an owner its partitions are handed over", "owner", owner.ID, "err", err)
	}
}

// misplaced returns the partitions this node holds but does not own in r,
// by owner.
func (s *Sender) misplaced(r *ring.Ring) map[ring.Member][]int {
	leaving := s.d.Leaving != nil && s.d.Leaving()
	byOwner := map[ring.Member][]int{}
	for p := range s.d.Store.Partitions() {
		if owner := r.PartitionOwner(p); (owner.ID != s.d.Self || leaving) && s.d.Store.PartitionLen(p) > 0 {
			byOwner[owner] = append(byOwner[owner], p)
		}
	}
	return byOwner
}

// send hands the state of parts to owner in chunks, forgetting each chunk
// once delivered, and returns how many keys it could not deliver.
func (s *Sender) send(ctx context.Context, owner ring.Member, parts []int) (left int) {
	var returned []limiter.KeyState
	if s.d.Replicas != nil {
		returned = s.d.Replicas.ReturnPromoted(owner.ID)
	}
	var states []limiter.KeyState
	for _, p := range parts {
		states = append(states, s.d.Store.SnapshotPartition(p, s.d.Now())...)
	}
	to := peer.Route{ID: owner.ID, Addr: owner.Addr}
	if len(states) == 0 && len(returned) > 0 {
		// Nothing but the promotion to give back: whether owner is there
		// to hold its own decides whether it is dropped.
		if _, _, err := s.d.Peers.Handoff(ctx, to, peer.Handoff{Sent: s.d.Now()}); err != nil {
			s.d.Replicas.Unreturn(owner.ID, returned)
		}
		return 0
	}
	sent, merged := 0, 0
	for sent < len(states) {
		chunk := states[sent : sent+limiter.ChunkLen(states[sent:])]
		// The receiver logs what it refuses under the same request_id.
		rid := peer.NewRequestID()
		// Stamped after the snapshot: no hit in it is later than Sent,
		// which the receiver rebases by (limiter.Rebase).
		m, rejected, err := s.d.Peers.Handoff(peer.WithRequestID(ctx, rid), to, peer.Handoff{Sent: s.d.Now(), States: chunk})
		if err != nil {
			// The state never left: try again on the next round. If
			// nothing reached owner, it may be dead: what was promoted
			// from its replica is this node's to decide from again.
			if sent == 0 && s.d.Replicas != nil {
				s.d.Replicas.Unreturn(owner.ID, returned)
			}
			s.d.Metrics.failed()
			s.log.Warn("handoff failed; will retry", "owner", owner.ID, "keys", len(states)-sent, "err", err, "request_id", rid)
			return len(states) - sent
		}
		// Delivered: drop exactly that, keep what was admitted since.
		s.d.Store.Forget(s.d.Now(), chunk)
		s.d.Metrics.sent(m, len(rejected))
		if len(rejected) > 0 {
			s.log.Warn("owner refused some handed-off keys", "owner", owner.ID, "refused", len(rejected), "first", rejected[0], "request_id", rid)
		}
		sent += len(chunk)
		merged += m
	}
	if merged > 0 {
		s.log.Info("handed off", "owner", owner.ID, "partitions", len(parts), "keys", merged)
	}
	return 0
}
