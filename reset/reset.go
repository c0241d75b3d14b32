// Package reset lifts a block: it clears a key's state on its owner, and
// drops every copy other members hold, which a handoff would otherwise
// bring back. The request path (route.Service.Reset) calls it for the
// public APIs, and for the peer call that asks this node to drop its own
// copy (Handle).
package reset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Members is the membership a reset reads: each key's owner, and every
// member that may hold a copy (route.Cluster is one). Safe for concurrent
// use.
type Members interface {
	Owner(key string) peer.Route
	Members() []peer.Route
}

// Deps is what a Resetter works with.
type Deps struct {
	// Self is this node's id. Required.
	Self string
	// Store is the node's state. Required.
	Store *limiter.Store
	// Now is the node's clock. Required.
	Now func() time.Time
	// Members is the membership. Nil: this node alone.
	Members Members
	// Peers reaches the other members. Required with Members.
	Peers peer.Peers
	// Logger receives a line per reset, and the members that did not
	// answer. Nil: slog.Default().
	Logger *slog.Logger
}

// Resetter resets keys across the cluster. Safe for concurrent use.
type Resetter struct {
	d   Deps
	log *slog.Logger
}

// New returns a Resetter over d.
func New(d Deps) (*Resetter, error) {
	switch {
	case d.Self == "" || d.Store == nil || d.Now == nil:
		return nil, errors.New("reset: Deps.Self, Store and Now are required")
	case d.Members != nil && d.Peers == nil:
		return nil, errors.New("reset: Deps.Peers is required with Members")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Resetter{d: d, log: log}, nil
}

// Result is what a Reset did.
type Result struct {
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
func (r Result) Existed() bool { return r.Cleared > 0 }

// ErrAllWindows is why a field given with all_windows is refused.
const ErrAllWindows = "must not be given with all_windows, which clears every window and algorithm"

// Validate checks the key, and the window and algorithm unless the reset
// covers them all, by the store's own rules; a reset of every window
// names none.
func (rs *Resetter) Validate(r peer.ResetRequest) error {
	probe := limiter.Request{Key: r.Key, Limit: 1, Window: r.Window, Algorithm: r.Algorithm, Calendar: r.Calendar}
	if r.AllWindows {
		if r.Window != 0 {
			return &limiter.ArgumentError{Field: "window_ms", Reason: ErrAllWindows}
		}
		if r.Calendar != 0 {
			return &limiter.ArgumentError{Field: "calendar", Reason: ErrAllWindows}
		}
		probe.Window, probe.Algorithm = time.Millisecond, limiter.SlidingWindowCounter
	}
	return rs.d.Store.Validate(probe)
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
func (rs *Resetter) Reset(ctx context.Context, r peer.ResetRequest) (Result, error) {
	if err := rs.Validate(r); err != nil {
		return Result{}, err
	}
	// One id for the owner's and every member's call, and the log lines.
	rid := peer.RequestIDFrom(ctx)
	if rid == "" {
		rid = peer.NewRequestID()
		ctx = peer.WithRequestID(ctx, rid)
	}
	res, err := rs.onOwner(ctx, r)
	if err != nil {
		return Result{}, err
	}
	rs.dropCopies(ctx, r, &res)
	// An operator's action: leave a trace of every one.
	which := []any{"all_windows", true}
	if !r.AllWindows {
		which = []any{"window", r.Window, "algorithm", r.Algorithm.String()}
		if r.Calendar != 0 {
			which = []any{"calendar", r.Calendar.String(), "algorithm", r.Algorithm.String()}
		}
	}
	rs.log.Info("key reset", append(append([]any{"key", r.Key}, which...), "owner", res.Owner, "cleared", res.Cleared,
		"copies_cleared", res.CopiesCleared, "members_acknowledged", res.MembersAcknowledged, "members_asked", res.MembersAsked,
		"request_id", rid)...)
	return res, nil
}

// onOwner clears r on the key's owner, here or through Peers, and then,
// when this node is not the owner, its own copy.
func (rs *Resetter) onOwner(ctx context.Context, r peer.ResetRequest) (Result, error) {
	owner, local := rs.owner(r.Key)
	if local {
		return Result{Owner: rs.d.Self, Cleared: rs.Local(r)}, nil
	}
	n, err := rs.d.Peers.Reset(ctx, owner, r)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		if peer.CodeOf(err) == peer.InvalidArgument { // the owner refused it: say why
			return Result{}, err
		}
		return Result{}, fmt.Errorf("reset %q: owner %s (%s): %w: %w", r.Key, owner.ID, owner.Addr, peer.ErrOwnerUnreachable, err)
	}
	// This node is one of the members holding a copy: it drops its own.
	return Result{Owner: owner.ID, Cleared: n, MembersAsked: 1, MembersAcknowledged: 1, CopiesCleared: rs.Local(r)}, nil
}

// dropCopies asks every member but this node and the owner, in parallel,
// to drop its copy of r, and counts into res who answered and what they
// dropped.
func (rs *Resetter) dropCopies(ctx context.Context, r peer.ResetRequest, res *Result) {
	if rs.d.Members == nil {
		return
	}
	var others []peer.Route
	for _, m := range rs.d.Members.Members() {
		if m.ID != rs.d.Self && m.ID != res.Owner {
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
			n, err := rs.d.Peers.Reset(ctx, m, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rs.log.Warn("reset: a member did not drop its copy; its next handoff may bring the count back",
					"key", r.Key, "member", m.ID, "err", err, "request_id", peer.RequestIDFrom(ctx))
				return
			}
			res.MembersAcknowledged++
			res.CopiesCleared += n
		})
	}
	wg.Wait()
}

// Local drops this node's state for r, whatever the ring says, and
// returns how many states that still counted something it dropped.
func (rs *Resetter) Local(r peer.ResetRequest) int {
	now := rs.d.Now()
	if r.AllWindows {
		return rs.d.Store.Admin().DeleteKey(now, r.Key)
	}
	if rs.d.Store.Admin().DeleteLimit(now, limiter.Request{Key: r.Key, Window: r.Window, Algorithm: r.Algorithm, Calendar: r.Calendar}) {
		return 1
	}
	return 0
}

// Handle drops this node's state for r at origin's request (the peer call
// of another member's Reset), whatever its ring says. The member that
// received the public call resolved any policy and checked r by its
// rules; it is checked again here, by this node's, and refused naming
// the field if they differ.
func (rs *Resetter) Handle(ctx context.Context, origin string, r peer.ResetRequest) (int, error) {
	if err := rs.Validate(r); err != nil {
		return 0, err
	}
	cleared := rs.Local(r)
	// Debug: applications may reset on every successful login; the node
	// that received the reset logs it at Info, with the same request_id.
	rs.log.Debug("dropped a key's state at a member's request", append([]any{"origin", logging.Clip(origin), "key", logging.Clip(r.Key),
		"cleared", cleared}, peer.LogAttrs(ctx, "")...)...)
	return cleared, nil
}

// owner returns key's owner, and whether it is this node.
func (rs *Resetter) owner(key string) (peer.Route, bool) {
	if rs.d.Members == nil {
		return peer.Route{ID: rs.d.Self}, true
	}
	o := rs.d.Members.Owner(key)
	return o, o.ID == rs.d.Self || o.ID == ""
}
