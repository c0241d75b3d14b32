package node

import (
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/route"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// view is this node's view of the cluster as the request path reads it
// (route.Cluster): owners, heirs and members from the ring, and the share
// --fallback share holds this node to, each swapped atomically by the
// membership notifier and read with one load.
type view struct {
	route.Cluster // over ring
	ring          ring.Holder
	// share is live members << 32 | known ones (live, and failed within
	// Config.ShareFor), refreshed on every membership change and every
	// sweep (failures age out).
	share atomic.Uint64
	// contested is set while a member is out of the ring on this node's
	// evidence alone (refreshContested).
	contested atomic.Bool
	// handoffs knows the partitions whose state is still on its way to
	// this node (handoff.Receiver.Pending); nil before the node is wired.
	handoffs *handoff.Receiver
	self     string
	store    *limiter.Store
	// without is the current ring with this node left out, while
	// partitions wait for their state (nil otherwise): who decided them
	// while this node was not in the ring.
	without atomic.Pointer[ring.Ring]
	// joined is closed once the join has found the members and the ring
	// holds them (markJoined). The node serves before it joins, since the
	// members call it the moment they see it; until then its ring is
	// itself alone, owner of every key, while the members already send it
	// keys whose state they hold: those checks wait for the join
	// (Settling), and are marked degraded if it does not come in time
	// (Contested), rather than be decided from nothing, silently.
	joined chan struct{}
	// isJoined is joined, closed, as one atomic load: Contested runs on
	// every decision.
	isJoined atomic.Bool
}

// markJoined records that the ring now holds the members the join found.
func (v *view) markJoined() {
	v.isJoined.Store(true)
	close(v.joined)
}

// joining reports whether the join is still under way.
func (v *view) joining() bool { return !v.isJoined.Load() }

// Owner implements route.Cluster: the ring's owner, except for a
// partition that has just come to this node, whose state is still on its
// way and of which it holds nothing (it has restarted, or just joined):
// until the state arrives, its keys stay with the member that decided
// them while this node was out of the ring, rather than be decided here
// from zero.
func (v *view) Owner(key string) peer.Route {
	r := v.ring.Load()
	p := r.Partition(key)
	o := r.PartitionOwner(p)
	if o.ID != v.self || v.handoffs == nil || v.handoffs.Waiting() == 0 {
		return route.RouteOf(o)
	}
	if w := v.without.Load(); w != nil && v.store.PartitionLen(p) == 0 && v.handoffs.Pending(p) {
		return route.RouteOf(w.PartitionOwner(p))
	}
	return route.RouteOf(o)
}

func (v *view) init(self *ring.Ring, id string, store *limiter.Store) {
	v.self, v.store = id, store
	v.joined = make(chan struct{})
	v.ring.Store(self)
	v.share.Store(1<<32 | 1)
	v.Cluster = route.RingCluster(v.ring.Load)
}

// Contested implements route.Cluster: every key while any member is out
// of the ring unconfirmed, and the keys of partitions this node has just
// come to own while other members may still hold their state.
func (v *view) Contested(key string) bool {
	if v.contested.Load() || v.joining() {
		return true
	}
	return v.handoffs != nil && v.handoffs.Waiting() > 0 && v.handoffs.Pending(v.ring.Load().Partition(key))
}

// Settling implements route.Cluster.
func (v *view) Settling(key string) <-chan struct{} {
	if v.joining() {
		return v.joined
	}
	if v.handoffs == nil || v.handoffs.Waiting() == 0 || !v.handoffs.Pending(v.ring.Load().Partition(key)) {
		return nil
	}
	return v.handoffs.Settled()
}

// Ring is the current ring.
func (v *view) Ring() *ring.Ring { return v.ring.Load() }

// Share implements route.Cluster.
func (v *view) Share() (live, known int) {
	s := v.share.Load()
	return int(s >> 32), int(s & 0xffffffff)
}

// refreshShare recounts the members for the share.
func (n *Node) refreshShare() {
	c := n.cluster.Load()
	if c == nil {
		return // still joining: this node alone, the initial (1, 1)
	}
	now := time.Now()
	live, failed := 0, 0
	for _, m := range c.View() {
		switch {
		case m.State == cluster.StateAlive || m.State == cluster.StateUnreachable: // in the ring
			live++
		case m.State == cluster.StateFailed && now.Sub(m.Since) < n.cfg.ShareFor:
			failed++
		}
	}
	live = max(live, 1)
	n.view.share.Store(uint64(live)<<32 | uint64(live+failed))
}

// refreshContested notes whether any member went unconfirmed (out of
// the ring on this node's evidence alone, cluster.Member.Unconfirmed):
// this node may then be on the small side of a partition, where the
// others have taken over its keys, and they over its, so every answer it
// decides is marked Degraded until the member returns or a majority
// confirms it gone.
func (n *Node) refreshContested() {
	gone := n.goneUnconfirmed()
	if was := n.view.contested.Swap(len(gone) > 0); was != (len(gone) > 0) {
		if len(gone) > 0 {
			n.log.Warn("members went out of the ring on this node's evidence alone; its answers are marked degraded until they return or a majority confirms them gone",
				"members", gone)
		} else {
			n.log.Info("no member out of the ring on this node's evidence alone any more; answers no longer marked degraded")
		}
	}
}

// goneUnconfirmed returns the ids of the members taken out of the ring
// on this node's evidence alone.
func (n *Node) goneUnconfirmed() []string {
	c := n.cluster.Load()
	if c == nil {
		return nil
	}
	var out []string
	for _, m := range c.View() {
		if m.State == cluster.StateFailed && m.Unconfirmed {
			out = append(out, m.ID)
		}
	}
	return out
}

// gained returns the partitions this node owns in r and did not in old:
// their state may be on its way from the others (handoff.Receiver.Expect).
func (n *Node) gained(old, r *ring.Ring) []int {
	var out []int
	for p := range r.PartitionCount() {
		if r.PartitionOwner(p).ID == n.cfg.ID && old.PartitionOwner(p).ID != n.cfg.ID {
			out = append(out, p)
		}
	}
	return out
}

// added returns the members of r not in old.
func added(old, r *ring.Ring) []string {
	was := map[string]bool{}
	for _, m := range old.Members() {
		was[m.ID] = true
	}
	var out []string
	for _, m := range r.Members() {
		if !was[m.ID] {
			out = append(out, m.ID)
		}
	}
	return out
}

// refreshWithout keeps the ring without this node while partitions wait
// for their state after it joined (it was alone in its ring: it has just
// started, or restarted; joined also while it still waits since, as the
// others come into its ring one by one), for view.Owner; it drops it
// otherwise. After a
// member left, the state of the partitions it had comes from it, and a
// check waits for it here (route.Config.SettleWait) instead.
func (n *Node) refreshWithout(r *ring.Ring, joined bool) {
	var rest []ring.Member
	for _, m := range r.Members() {
		if m.ID != n.cfg.ID {
			rest = append(rest, m)
		}
	}
	if !joined || n.handoffs.Waiting() == 0 || len(rest) == 0 {
		n.view.without.Store(nil)
		return
	}
	w, err := ring.New(n.cfg.Ring, n.cfg.Partitions, rest)
	if err != nil {
		n.log.Error("building the ring without this node", "err", err)
		n.view.without.Store(nil)
		return
	}
	n.view.without.Store(w)
}

// leavers returns the members of old that are not in r because they left
// gracefully: they hand their partitions off as they go.
func (n *Node) leavers(old, r *ring.Ring) []string {
	c := n.cluster.Load()
	if c == nil {
		return nil
	}
	left := map[string]bool{}
	for _, m := range c.View() {
		if m.State == cluster.StateLeft {
			left[m.ID] = true
		}
	}
	in := map[string]bool{}
	for _, m := range r.Members() {
		in[m.ID] = true
	}
	var out []string
	for _, m := range old.Members() {
		if !in[m.ID] && left[m.ID] {
			out = append(out, m.ID)
		}
	}
	return out
}
