package route

import (
	"context"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// The request path's side of budget leases (lease.go): admitting from a
// lease instead of forwarding, asking for one, lending, settling.

// viaLease answers a check of a key another member owns from a lease this
// node holds, or asks the owner for one when this node forwards the key
// at the lease rate; ok is false when neither applies and the check is
// forwarded as usual.
func (s *Service) viaLease(ctx context.Context, owner peer.Route, req limiter.Request) (routed, bool) {
	if s.leases == nil {
		return routed{}, false
	}
	now := s.deps.Now()
	d, admitted, want, ask := s.leases.take(now, req, true)
	switch {
	case admitted:
		return routed{peer.Result{Decision: d, Owner: owner.ID}, routeLeased}, true
	case !ask:
		return routed{}, false
	case s.store.Validate(req) != nil: // forward refuses it, naming the field
		s.leases.asked(owner, req, now, peer.LeaseGrant{})
		return routed{}, false
	}
	return s.askLease(ctx, owner, req, want, now), true
}

// askLease sends req to its owner as a lease request: the owner decides
// it as a forward and may lend hits for later ones. asked is when this
// node asked, from which the lease's time runs.
func (s *Service) askLease(ctx context.Context, owner peer.Route, req limiter.Request, want int64, asked time.Time) routed {
	if s.acquire(1) == 0 {
		s.leases.asked(owner, req, asked, peer.LeaseGrant{})
		return routed{s.overloaded(ctx, owner, 1), routeForwarded}
	}
	s.metrics.lease(leaseAsked)
	res, g, err := s.deps.Peers.Lease(ctx, owner, req, want)
	s.release(1)
	s.leases.asked(owner, req, asked, g)
	if err != nil {
		return s.fallback(ctx, owner, req, err)
	}
	if g.ID != 0 {
		s.metrics.lease(leaseReceived)
	}
	s.metrics.forwarded(forwardOK, 1)
	s.ownerRefused(ctx, owner, res, "")
	return routed{res, routeForwarded}
}

// HandleLease implements Handler: decide req here, as a forward, and lend
// origin hits of its limit when it is eligible (lend).
func (s *Service) HandleLease(_ context.Context, origin string, req limiter.Request, want int64) (peer.Result, peer.LeaseGrant) {
	now := s.deps.Now()
	res := s.decide(now, req)
	s.metrics.peerCheck(req.Algorithm, res)
	if s.leases == nil || res.Err != nil || !res.Decision.Allowed || res.Degraded || !s.leases.validLease(req) {
		return res, peer.LeaseGrant{}
	}
	return res, s.lend(now, origin, req, want, res.Decision.Remaining)
}

// lend takes up to want hits of req's limit, at most half of what is left
// (room), from the key now, and records the lease. A counter's lease ends
// with the fixed window it was taken in, so that its hits cannot move to
// another; one that would be shorter than a quarter of the lease duration
// is not worth a call and is not lent.
func (s *Service) lend(now time.Time, origin string, req limiter.Request, want, room int64) peer.LeaseGrant {
	hits := min(want, room/2)
	if hits < 1 {
		return peer.LeaseGrant{}
	}
	ms := max(now.UnixMilli(), 0)
	w := req.Window.Milliseconds()
	ll := &lentLease{origin: clone(origin), key: clone(req.Key), window: req.Window, algo: req.Algorithm, hits: hits,
		granted: ms, dur: s.leases.dur}
	if req.Algorithm == limiter.SlidingWindowCounter {
		ll.windowID = ms / w
		left := time.Duration((ll.windowID+1)*w-ms-1) * time.Millisecond
		if ll.dur = min(ll.dur, left); ll.dur < s.leases.dur/4 {
			return peer.LeaseGrant{}
		}
	}
	take := req
	take.Hits = hits
	d, err := s.store.Check(now, take)
	if err != nil || !d.Allowed {
		return peer.LeaseGrant{}
	}
	id := s.leases.lend(ll)
	s.metrics.lease(leaseGranted)
	s.metrics.leaseHits(leaseLent, hits)
	return peer.LeaseGrant{ID: id, Hits: hits, Duration: ll.dur, ResetAfter: d.ResetAfter, RefillAfter: d.RefillAfter}
}

// HandleSettle implements Handler: for each lease origin holds from this
// node, give back what it did not use and, for the log, move what it used
// to when it was admitted. A lease already expired here (counted as all
// used) or not origin's is skipped; it returns how many it settled.
func (s *Service) HandleSettle(_ context.Context, origin string, uses []peer.LeaseUse) int {
	if s.leases == nil {
		return 0
	}
	now := s.deps.Now()
	settled := 0
	for _, u := range uses {
		ll := s.leases.takeLent(u.ID, origin)
		if ll == nil {
			continue
		}
		s.settle(now, ll, u)
		settled++
	}
	return settled
}

// settle applies u, a holder's report, to ll. What a holder says is
// clamped to what was lent: a member cannot make the owner count less
// than the hits it admitted.
func (s *Service) settle(now time.Time, ll *lentLease, u peer.LeaseUse) {
	used := min(max(u.Used, 0), ll.hits)
	s.metrics.lease(leaseSettled)
	s.metrics.leaseHits(leaseReturned, ll.hits-used)
	if ll.algo != limiter.SlidingWindowLog {
		if unused := ll.hits - used; unused > 0 {
			s.store.Forget(now, []limiter.KeyState{{Key: ll.key, Window: ll.window, Algorithm: ll.algo, WindowID: ll.windowID, Curr: unused}})
		}
		return
	}
	times := make([]int64, used)
	for i := range times {
		off := ll.dur // a hit the holder did not time: its lease's last moment
		if i < len(u.Offsets) {
			off = min(max(u.Offsets[i], 0), ll.dur)
		}
		times[i] = ll.granted + off.Milliseconds()
	}
	s.store.MoveLog(now, ll.key, ll.window, ll.placeholders(), times)
}

// ExpireLeases counts every lease lent that its holder has not settled a
// lease duration after it ended as all used, at its last moment: the log's
// placeholders move there, where they outlast any hit the holder can have
// admitted, so a lost lease costs under-admission only. It returns how
// many it expired. The node calls it with SettleLeases.
func (s *Service) ExpireLeases() int {
	if s.leases == nil {
		return 0
	}
	now := s.deps.Now()
	expired := s.leases.takeExpired(now.UnixMilli() - s.leases.dur.Milliseconds())
	for _, ll := range expired {
		s.metrics.lease(leaseExpired)
		if ll.algo == limiter.SlidingWindowLog {
			last := make([]int64, ll.hits)
			for i := range last {
				last[i] = ll.end()
			}
			s.store.MoveLog(now, ll.key, ll.window, ll.placeholders(), last)
		}
	}
	return len(expired)
}

// SettleLeases settles the leases this node holds that are spent or have
// ended, with their owners, one call per owner. A settlement that fails is
// not retried: its owner counts the lease as all used once it expires,
// which costs under-admission, never over-admission.
func (s *Service) SettleLeases(ctx context.Context) { s.settleLeases(ctx, false) }

// ReturnLeases settles every lease this node holds, spent or not: a node
// that leaves gives its owners back what it will not use.
func (s *Service) ReturnLeases(ctx context.Context) { s.settleLeases(ctx, true) }

func (s *Service) settleLeases(ctx context.Context, all bool) {
	if s.leases == nil {
		return
	}
	for owner, uses := range s.leases.settlements(s.deps.Now(), all) {
		cctx, cancel := ctxLease(ctx, s.leases.dur)
		_, err := s.deps.Peers.Settle(cctx, owner, uses)
		cancel()
		if err != nil {
			s.metrics.lease(leaseSettleFailed)
			if s.settleLog.Allow() {
				s.log.Warn("lease settlement failed; the owner will count those leases as used (under-admission until they leave the window)",
					"owner", owner.ID, "leases", len(uses), "err", err)
			}
		}
	}
}

// LeasesHeld and LeasesLent are how many leases this node holds from
// owners and has lent to others, for metrics.
func (s *Service) LeasesHeld() int {
	if s.leases == nil {
		return 0
	}
	return s.leases.heldCount()
}

// LeasesLent: see LeasesHeld.
func (s *Service) LeasesLent() int {
	if s.leases == nil {
		return 0
	}
	return s.leases.lentCount()
}

// LeaseDuration is the configured lease duration; 0 when leases are off.
func (s *Service) LeaseDuration() time.Duration { return s.cfg.LeaseDuration }
