package route

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// ResetResult is what a Reset did.
type ResetResult struct {
	// Owner is the node that cleared the key's state.
	Owner string
	// Cleared is how many states the owner cleared that still counted
	// something: 0 or 1, or more with AllWindows.
	Cleared int
	// MembersAsked is how many members other than the owner were asked to
	// drop their copies (the node that received the reset among them,
	// when it is not the owner: it drops its own), MembersAcknowledged how
	// many answered. With every member reachable both are the cluster's
	// size minus one, whichever node received the reset.
	MembersAsked, MembersAcknowledged int
	// CopiesCleared is how many copies that still counted something those
	// members dropped.
	CopiesCleared int
}

// Existed reports whether the owner held state that still counted.
func (r ResetResult) Existed() bool { return r.Cleared > 0 }

// NewResetRequest builds a ResetRequest from the public API's fields,
// which every API shares, and validates it. A reset names one limit of
// the key (window_ms and algorithm, or a policy) or all of them
// (all_windows), never a mix; the extra field is named.
func (s *Service) NewResetRequest(key string, windowMS int64, algo limiter.Algorithm, algoSet bool, policyName string, all bool) (peer.ResetRequest, error) {
	r := peer.ResetRequest{Key: key, Algorithm: algo, AllWindows: all}
	switch {
	case all:
		if f := InlineField(0, windowMS, algoSet); f != "" {
			return r, &limiter.ArgumentError{Field: f, Reason: errAllWindows}
		}
		if policyName != "" {
			return r, &limiter.ArgumentError{Field: "policy", Reason: errAllWindows}
		}
		r.Algorithm = limiter.SlidingWindowCounter
	case policyName != "":
		if f := InlineField(0, windowMS, algoSet); f != "" {
			return r, &limiter.ArgumentError{Field: f, Reason: fmt.Sprintf("must not be given with policy %q, which sets window_ms and algorithm", policyName)}
		}
		p, err := s.Policy(policyName)
		if err != nil {
			return r, err
		}
		r.Window, r.Algorithm = p.Window, p.Algorithm
	default:
		r.Window = limiter.WindowFromMS(windowMS)
	}
	return r, s.validateReset(r)
}

const errAllWindows = "must not be given with all_windows, which clears every window and algorithm"

// validateReset checks the key, and the window and algorithm unless the
// reset covers them all, by the store's own rules; a reset of every
// window names none.
func (s *Service) validateReset(r peer.ResetRequest) error {
	probe := limiter.Request{Key: r.Key, Limit: 1, Window: r.Window, Algorithm: r.Algorithm}
	if r.AllWindows {
		if r.Window != 0 {
			return &limiter.ArgumentError{Field: "window_ms", Reason: errAllWindows}
		}
		probe.Window, probe.Algorithm = time.Millisecond, limiter.SlidingWindowCounter
	}
	return s.store.Validate(probe)
}

// Reset clears a key's state on its owner, then drops every other copy:
// this node's, and each other member's, which it asks for.
//
// Copies exist because a node that could not reach the owner may have
// decided the key itself (FallbackLocal), and a node may decide keys whose
// partition just moved while gossip converges. Handoff later merges such
// state into the owner's, which would bring the cleared counts back. The
// copies are dropped best effort: a member that does not answer is only
// counted (MembersAsked − MembersAcknowledged), and may still hand its
// copy back later. A handoff already in flight when the reset arrives can
// do the same; resetting again clears it.
//
// If the owner cannot be asked, nothing is cleared and the error wraps
// ErrOwnerUnreachable (UNAVAILABLE): the caller must know the block is
// still there.
func (s *Service) Reset(ctx context.Context, r peer.ResetRequest) (ResetResult, error) {
	if err := s.validateReset(r); err != nil {
		return ResetResult{}, err
	}
	// One id for the owner's and every member's call, and the log lines.
	rid := peer.RequestIDFrom(ctx)
	if rid == "" {
		rid = peer.NewRequestID()
		ctx = peer.WithRequestID(ctx, rid)
	}
	res, err := s.resetOnOwner(ctx, r)
	if err != nil {
		return ResetResult{}, err
	}
	s.dropCopies(ctx, r, &res)
	// An operator's action: leave a trace of every one.
	which := []any{"all_windows", true}
	if !r.AllWindows {
		which = []any{"window", r.Window, "algorithm", r.Algorithm.String()}
	}
	s.log.Info("key reset", append(append([]any{"key", r.Key}, which...), "owner", res.Owner, "cleared", res.Cleared,
		"copies_cleared", res.CopiesCleared, "members_acknowledged", res.MembersAcknowledged, "members_asked", res.MembersAsked,
		"request_id", rid)...)
	return res, nil
}

// resetOnOwner clears r on the key's owner, here or through Peers, and
// then, when this node is not the owner, its own copy.
func (s *Service) resetOnOwner(ctx context.Context, r peer.ResetRequest) (ResetResult, error) {
	owner, local := s.owner(r.Key)
	if local {
		return ResetResult{Owner: s.deps.NodeID, Cleared: s.ResetLocal(r)}, nil
	}
	n, err := s.deps.Peers.Reset(ctx, owner, r)
	if err != nil {
		if ctx.Err() != nil {
			return ResetResult{}, ctx.Err()
		}
		if peer.CodeOf(err) == peer.InvalidArgument { // the owner refused it: say why
			return ResetResult{}, err
		}
		return ResetResult{}, fmt.Errorf("reset %q: owner %s (%s): %w: %w", r.Key, owner.ID, owner.Addr, ErrOwnerUnreachable, err)
	}
	// This node is one of the members holding a copy: it drops its own.
	return ResetResult{Owner: owner.ID, Cleared: n, MembersAsked: 1, MembersAcknowledged: 1, CopiesCleared: s.ResetLocal(r)}, nil
}

// dropCopies asks every member but this node and the owner, in parallel,
// to drop its copy of r, and counts into res who answered and what they
// dropped.
func (s *Service) dropCopies(ctx context.Context, r peer.ResetRequest, res *ResetResult) {
	var others []peer.Route
	for _, m := range s.members() {
		if m.ID != s.deps.NodeID && m.ID != res.Owner {
			others = append(others, m)
		}
	}
	res.MembersAsked += len(others)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range others {
		wg.Go(func() {
			n, err := s.deps.Peers.Reset(ctx, m, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.log.Warn("reset: a member did not drop its copy; its next handoff may bring the count back",
					"key", r.Key, "member", m.ID, "err", err, "request_id", peer.RequestIDFrom(ctx))
				return
			}
			res.MembersAcknowledged++
			res.CopiesCleared += n
		})
	}
	wg.Wait()
}

// ResetLocal drops this node's state for r, whatever the ring says, and
// returns how many states that still counted something it dropped.
func (s *Service) ResetLocal(r peer.ResetRequest) int {
	now := s.deps.Now()
	if r.AllWindows {
		return s.store.DeleteKey(now, r.Key)
	}
	if s.store.Delete(now, r.Key, r.Window, r.Algorithm) {
		return 1
	}
	return 0
}
