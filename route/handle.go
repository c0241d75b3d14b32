package route

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Handler is what a node does with the calls of other members
// (peer.Handler): it decides what they forward and relay, merges what they
// hand off, keeps their replicas, lends and settles leases, resets and
// reads keys. Every method is safe for concurrent use.
type Handler struct{ *core }

var _ peer.Handler = (*Handler)(nil)

// HandleForward implements Handler: decide here, never forward again. The
// checks are stamped with one arrival time, this node's. A check for a key
// this node's ring gives another member is answered Degraded: the
// sender's view and this node's disagree.
func (s *Handler) HandleForward(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	for _, r := range reqs {
		s.awaitSettled(ctx, r.Key) // once settled, the others return at once
	}
	now := s.deps.Now()
	out := make([]peer.Result, len(reqs))
	refused := -1
	for i, r := range reqs {
		out[i] = s.decide(now, r)
		if _, local := s.owner(r.Key); !local && out[i].Err == nil {
			// The sender's ring says this node owns the key, this node's
			// says another member does: two views of the membership, and
			// perhaps two deciders. Decided, and said so.
			out[i].Degraded = true
		}
		s.metrics.peerCheck(r.Algorithm, out[i])
		if refused < 0 && settingsDiffer(out[i].Err) {
			refused = i
		}
	}
	if refused >= 0 {
		s.refusedForward(ctx, origin, reqs[refused].Key, out[refused].Err)
	}
	// Decided, but the sender has stopped waiting (its wait passed): it
	// answers these checks by its fallback, which counts them, so what
	// they added here is taken back, and the answers say so
	// (peer.ErrNotCounted): a sender that still waits after all falls
	// back too, rather than pass on an admission nothing counts. (A reply
	// already on its way when the wait ends is not caught: those count
	// twice, which over-denies; never zero times.)
	if err := peer.SenderGone(ctx); err != nil {
		undone := s.undo(now, reqs, out)
		notCounted(reqs, out)
		if s.lateLog.Allow() {
			s.log.Warn("decided forwarded checks after the caller stopped waiting; took back what they added (its fallback counts them)",
				append([]any{"origin", logging.Clip(origin), "checks", len(reqs), "undone", undone, "err", err}, peer.LogAttrs(ctx, "")...)...)
		}
	}
	return out
}

// notCounted answers every decided check of out with peer.ErrNotCounted:
// what they added was taken back. Refusals (invalid input) stay, and so
// do the answers to other ops (refunds, charges, reservations), which
// undo cannot take back exactly: a sender that still waits uses them,
// one that stopped applies the op by its fallback too (docs/limiter.md
// says what that double application costs).
func notCounted(reqs []limiter.Request, out []peer.Result) {
	for i := range out {
		if out[i].Err == nil && reqs[i].Op == limiter.OpCheck {
			out[i] = peer.Result{Err: peer.ErrNotCounted}
		}
	}
}

// undo takes back from the store what the allowed checks of reqs,
// decided at now, added (limiter.Transfer.Forget: the counter's hits in
// now's window, the log's entries at now), and returns how many it took
// back.
func (s *Handler) undo(now time.Time, reqs []limiter.Request, out []peer.Result) int {
	var states []limiter.KeyState
	ms := max(now.UnixMilli(), 0)
	for i, r := range reqs {
		if out[i].Err != nil || !out[i].Decision.Allowed || r.Hits <= 0 || r.Op != limiter.OpCheck {
			continue
		}
		states = append(states, r.HitsAt(ms, r.Hits))
	}
	s.store.Transfer().Forget(now, states)
	return len(states)
}

// refusedForward warns, at most once a second, about a forwarded check
// this node refused as invalid (err names the field): the sender validated
// it by its own limits, so the two nodes are configured differently.
func (s *Handler) refusedForward(ctx context.Context, origin, key string, err error) {
	if !s.peerRefusedLog.Allow() {
		return
	}
	s.log.Warn("refused a forwarded check the sender accepted: the nodes' settings differ",
		append([]any{"origin", logging.Clip(origin), "key", logging.Clip(key), "field", peer.FieldOf(err), "err", err}, peer.LogAttrs(ctx, "")...)...)
}

// HandleHandoff implements peer.Handler: the states, rebased onto this
// node's clock, go to the handoff receiver, which merges them into the
// store, unless this node is leaving (peer.ErrLeaving).
func (s *Handler) HandleHandoff(ctx context.Context, origin string, h peer.Handoff) (int, []string, error) {
	return s.handoffs.Receive(ctx, origin, s.rebase(h.Sent, h.States))
}

// HandleHandoffDone implements peer.Handler: Deps.Cluster notes that
// origin holds nothing more of partitions.
func (s *Handler) HandleHandoffDone(_ context.Context, origin string, partitions []int) {
	s.deps.Cluster.HandoffDone(origin, partitions)
}

// HandleReplicate implements peer.Handler: keep the owner's states apart,
// in Deps.Failover, never in the store that decides.
func (s *Handler) HandleReplicate(_ context.Context, origin string, r peer.Replication) (peer.Replicated, error) {
	if !s.heirs {
		return peer.Replicated{}, peer.ErrNoReplicas
	}
	// Kept on this node's clock: the replica store, its journal (a
	// restart applies the records as they are: Sent zero), the sweep
	// and a promotion all read them so.
	r.States, r.Sent = s.rebase(r.Sent, r.States), time.Time{}
	return s.deps.Failover.Apply(origin, r), nil
}

// rebase moves states that arrived in a call their sender stamped sent
// (its clock, the states' times' clock) onto this node's clock, in place,
// once, here at the edge: everything downstream (a merge, the replicas,
// their journal, a promotion) then reads them on one clock, the skew
// between the two cancelled (limiter.Rebase). A zero sent is a sender
// from before the stamp: its states are taken as they are, and Merge
// bounds what a skew costs them.
func (s *Handler) rebase(sent time.Time, states []limiter.KeyState) []limiter.KeyState {
	if !sent.IsZero() {
		limiter.Rebase(states, sent, s.deps.Now())
	}
	return states
}

// HandleRelay implements Handler: each check goes to its owner as this
// node's ring says, one call per owner (decided here if that is this
// node); one whose owner this node cannot reach either is decided here as
// its heir, or fails with a *CallError for the sender's fallback. Never
// relayed further.
func (s *Handler) HandleRelay(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	now := s.deps.Now()
	out := make([]peer.Result, len(reqs))
	byOwner := map[peer.Route][]int{}
	for i, r := range reqs {
		owner, local, waited := s.settledOwner(ctx, r.Key) // as a forward waits
		if waited {
			now = s.deps.Now()
		}
		if !local && owner.ID != origin {
			byOwner[owner] = append(byOwner[owner], i)
			continue
		}
		out[i] = s.decide(now, r)
		// This node's ring gives the key to origin, which could not reach
		// the owner its own ring names: two views, and this node decides
		// from what it holds. Said so.
		out[i].Degraded = out[i].Degraded || (!local && out[i].Err == nil)
	}
	for owner, idx := range byOwner {
		sub := pick(reqs, idx)
		results, _, err := s.deps.Peers.ForwardBatch(ctx, owner, sub)
		for j, i := range idx {
			if err == nil && !peer.NotDecided(results[j].Err) {
				out[i] = results[j]
				continue
			}
			if res, ok := s.asHeir(now, reqs[i]); ok {
				out[i] = res
				continue
			}
			out[i] = peer.Result{Err: &peer.CallError{ID: peer.CallID(err), Err: fmt.Errorf("relayed by %s: owner %s: %w from here too", s.deps.NodeID, owner.ID, peer.ErrOwnerUnreachable)}}
		}
	}
	return out
}

// HandleLease implements peer.Handler: decide req here, as a forward, and
// lend origin hits of its limit when it is eligible (lease.Book.Lend).
func (s *Handler) HandleLease(ctx context.Context, origin string, req limiter.Request, want peer.LeaseWant) (peer.Result, peer.LeaseGrant) {
	s.awaitSettled(ctx, req.Key) // as a forward waits: a partition just come here decides from its whole state
	now := s.deps.Now()
	res := s.decide(now, req)
	if _, local := s.owner(req.Key); !local && res.Err == nil {
		res.Degraded = true // as HandleForward: the views disagree, or the ring moved on while it waited; nothing is lent
	}
	s.metrics.peerCheck(req.Algorithm, res)
	if res.Err != nil || !res.Decision.Allowed || res.Degraded {
		return res, peer.LeaseGrant{}
	}
	return res, s.deps.Leases.Lend(now, origin, req, want, res.Decision.Remaining)
}

// HandleSettle implements peer.Handler: the leases origin holds from this
// node are settled (lease.Book.Settle).
func (s *Handler) HandleSettle(_ context.Context, origin string, uses []peer.LeaseUse) int {
	return s.deps.Leases.Settle(s.deps.Now(), origin, uses)
}
