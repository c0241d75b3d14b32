package route

import (
	"context"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// The request path's side of budget leases (package lease, Deps.Leases):
// admitting from a lease instead of forwarding, asking for one, lending.

// viaLease answers a check of a key another member owns from a lease this
// node holds, or asks the owner for one when this node forwards the key
// at the lease rate; ok is false when neither applies and the check is
// forwarded as usual.
func (s *Service) viaLease(ctx context.Context, owner peer.Route, req limiter.Request) (routed, bool) {
	if s.deps.Leases == nil {
		return routed{}, false
	}
	now := s.deps.Now()
	d, admitted, want, ask := s.deps.Leases.Take(now, req, true)
	switch {
	case admitted:
		return routed{peer.Result{Decision: d, Owner: owner.ID}, routeLeased}, true
	case !ask:
		return routed{}, false
	case s.store.Validate(req) != nil: // forward refuses it, naming the field
		s.deps.Leases.Forgo(owner, req, now)
		return routed{}, false
	}
	return s.askLease(ctx, owner, req, want, now), true
}

// askLease sends req to its owner as a lease request, in a forward's
// in-flight slot: the owner decides it as a forward and may lend hits for
// later ones. asked is when this node asked, from which the lease's time
// runs.
func (s *Service) askLease(ctx context.Context, owner peer.Route, req limiter.Request, want int64, asked time.Time) routed {
	if s.inflight.acquire(1) == 0 {
		s.deps.Leases.Forgo(owner, req, asked)
		return routed{s.overloaded(ctx, owner, 1), routeForwarded}
	}
	fctx, span := s.startForward(ctx, owner, 1, true)
	res, err := s.deps.Leases.Ask(fctx, owner, req, want, asked)
	s.inflight.release(1)
	endForward(span, err, 0)
	if err != nil {
		return s.fallback(ctx, owner, req, err)
	}
	s.metrics.forwarded(forwardOK, 1)
	s.ownerRefused(ctx, owner, res, "")
	return routed{res, routeForwarded}
}

// HandleLease implements peer.Handler: decide req here, as a forward, and
// lend origin hits of its limit when it is eligible (lease.Book.Lend).
func (s *Service) HandleLease(ctx context.Context, origin string, req limiter.Request, want int64) (peer.Result, peer.LeaseGrant) {
	s.awaitSettled(ctx, req.Key) // as a forward waits: a partition just come here decides from its whole state
	now := s.deps.Now()
	res := s.decide(now, req)
	if _, local := s.owner(req.Key); !local && res.Err == nil {
		res.Degraded = true // as HandleForward: the views disagree, or the ring moved on while it waited; nothing is lent
	}
	s.metrics.peerCheck(req.Algorithm, res)
	if s.deps.Leases == nil || res.Err != nil || !res.Decision.Allowed || res.Degraded {
		return res, peer.LeaseGrant{}
	}
	return res, s.deps.Leases.Lend(now, origin, req, want, res.Decision.Remaining)
}

// HandleSettle implements peer.Handler: the leases origin holds from this
// node are settled (lease.Book.Settle).
func (s *Service) HandleSettle(_ context.Context, origin string, uses []peer.LeaseUse) int {
	if s.deps.Leases == nil {
		return 0
	}
	return s.deps.Leases.Settle(s.deps.Now(), origin, uses)
}
