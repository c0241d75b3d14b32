package route

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// When a check's owner cannot be reached, before the fallback policy
// answers, this node tries, in order:
//
//  1. a relay: one other member, which forwards the check to the owner
//     (a link cut between this node and the owner only, the "bridge"),
//     or, if it is the owner's heir and cannot reach the owner either,
//     decides it from the owner's replica (the owner is down). The relay
//     is the key's heir, or another member when the heir is this node;
//  2. if this node is the heir: deciding here, from the owner's replica
//     merged into this node's state.
//
// Either way the cluster goes on from the owner's count, not from zero,
// and one member decides the key. Only then does the policy answer.

// relayFor returns the member that relays key's checks to owner: the
// key's heir, or, when the heir is this node, the first other live member
// that is not the owner. false: there is none (a ring of two, or
// replication off).
func (s *Service) relayFor(key string, owner peer.Route) (peer.Route, bool) {
	h, ok := s.heirOf(key)
	if !ok || h.ID == owner.ID {
		return peer.Route{}, false
	}
	if h.ID != s.deps.NodeID {
		return h, true
	}
	for _, m := range s.members() {
		if m.ID != s.deps.NodeID && m.ID != owner.ID {
			return m, true
		}
	}
	return peer.Route{}, false
}

// rescue answers the checks idx of reqs, whose owner could not be
// reached, by a relay or as their heir (see above), fills in out for
// those it answered and returns them; the caller's policy answers the
// rest.
func (s *Service) rescue(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) map[int]bool {
	if s.deps.Failover == nil || callerGone(ctx) != nil {
		return nil
	}
	byRelay := map[peer.Route][]int{}
	for _, i := range idx {
		if via, ok := s.relayFor(reqs[i].Key, owner); ok {
			byRelay[via] = append(byRelay[via], i)
		}
	}
	answered := map[int]bool{}
	for via, vidx := range byRelay {
		results := s.relay(ctx, via, reqs, vidx)
		for j, i := range vidx {
			if results != nil && results[j].Err == nil {
				out[i], answered[i] = results[j], true
			}
		}
	}
	now := s.deps.Now()
	for _, i := range idx {
		if !answered[i] {
			if res, ok := s.asHeir(now, reqs[i]); ok {
				out[i], answered[i] = res, true
			}
		}
	}
	for i := range answered {
		s.metrics.forwarded(forwardFailed, 1)
		s.metrics.rescued(out[i].Degraded)
	}
	return answered
}

// relay has via take the checks idx of reqs to their owner in one call,
// and returns their results in order; nil if via could not be asked.
func (s *Service) relay(ctx context.Context, via peer.Route, reqs []limiter.Request, idx []int) []peer.Result {
	got := s.inflight.acquire(len(idx))
	defer s.inflight.release(got)
	if got < len(idx) {
		return nil
	}
	sub := pick(reqs, idx)
	results, err := s.deps.Peers.Relay(ctx, via, sub)
	if err != nil || len(results) != len(sub) {
		return nil
	}
	return results
}

// asHeir decides req, whose owner cannot be reached, here from the
// owner's replica merged into this node's state, if this node is the
// key's heir; the answer is Degraded (it misses what the owner admitted
// within the replication lag). false if this node is not the heir.
func (s *Service) asHeir(now time.Time, req limiter.Request) (peer.Result, bool) {
	h, ok := s.heirOf(req.Key)
	if !ok || h.ID != s.deps.NodeID {
		return peer.Result{}, false
	}
	s.deps.Failover.Promote(req.Key)
	res := s.decide(now, req)
	res.Degraded = res.Err == nil
	return res, res.Err == nil
}

// HandleRelay implements Handler: each check goes to its owner as this
// node's ring says, one call per owner (decided here if that is this
// node); one whose owner this node cannot reach either is decided here as
// its heir, or fails with a *CallError for the sender's fallback. Never
// relayed further.
func (s *Service) HandleRelay(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
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
