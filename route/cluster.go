package route

import (
	"context"
	"time"

	"github.com/peerlimit/peerlimit/peer"
)

// What the request path reads of Deps.Cluster, with this node alone when
// there is none.

// owner returns key's owner, and whether it is this node.
func (s *Service) owner(key string) (peer.Route, bool) {
	if s.deps.Cluster == nil {
		return peer.Route{ID: s.deps.NodeID}, true
	}
	o := s.deps.Cluster.Owner(key)
	return o, o.ID == s.deps.NodeID || o.ID == ""
}

// heirOf returns the member that inherits key if its owner fails: its
// partition's backup, which holds its replica. False without replication
// or in a ring of one.
func (s *Service) heirOf(key string) (peer.Route, bool) {
	if s.deps.Failover == nil || s.deps.Cluster == nil {
		return peer.Route{}, false
	}
	return s.deps.Cluster.Heir(key)
}

// members returns the members (this node among them), for the calls that
// go to each: a reset's copies, the console's reports.
func (s *Service) members() []peer.Route {
	if s.deps.Cluster == nil {
		return []peer.Route{{ID: s.deps.NodeID}}
	}
	return s.deps.Cluster.Members()
}

// share returns how many members are live and how many this node knows
// (live and recently failed), for FallbackShare; (1, 1) alone.
func (s *Service) share() (live, known int) {
	if s.deps.Cluster == nil {
		return 1, 1
	}
	live, known = s.deps.Cluster.Share()
	return max(live, 1), max(known, live, 1)
}

// contested reports whether this node decides key on its own evidence
// alone (Cluster.Contested); never alone.
func (s *Service) contested(key string) bool {
	return s.deps.Cluster != nil && s.deps.Cluster.Contested(key)
}

// settledOwner returns key's owner; when that is this node, it first waits
// for the key's partition to settle (awaitSettled) and, after a wait
// (waited), asks again: the ring may have moved on meanwhile (at a heal, a
// partition that came here while the members were coming back goes to one
// of them a moment later), and deciding a key this node no longer owns
// makes two deciders, each sure of itself (jepsen-lite partition-share: 11
// of 10 admitted in a window after the heal, none of them degraded).
func (s *Service) settledOwner(ctx context.Context, key string) (owner peer.Route, local, waited bool) {
	owner, local = s.owner(key)
	if local && s.awaitSettled(ctx, key) {
		owner, local = s.owner(key)
		return owner, local, true
	}
	return owner, local, false
}

// awaitSettled waits, at most Config.SettleWait and within ctx, for the
// state of key's partition to arrive if it has just come to this node
// (Cluster.Settling): deciding first would decide from less than the key
// holds. Callers that decide by the owner use settledOwner.
func (s *Service) awaitSettled(ctx context.Context, key string) (waited bool) {
	if s.deps.Cluster == nil || s.cfg.SettleWait <= 0 {
		return false
	}
	ch := s.deps.Cluster.Settling(key)
	if ch == nil {
		return false
	}
	t := time.NewTimer(s.cfg.SettleWait)
	defer t.Stop()
	// Once one wait ends another may begin: a joining node's ring, once it
	// holds the members, may give it the key's partition, whose state is
	// then on its way. The same deadline bounds them all.
	for ch != nil {
		select {
		case <-ch:
			ch = s.deps.Cluster.Settling(key)
		case <-t.C:
			return true
		case <-ctx.Done():
			return true
		}
	}
	return true
}
