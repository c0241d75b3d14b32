package node

import (
	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/ownership"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/route"
)

// The node's side of package ownership: the membership goes in as events,
// and what the Tracker asks for is carried out here (ownershipEffects).

var _ route.Cluster = (*ownership.Tracker)(nil)

// membershipChanged takes the cluster's membership (every member it
// knows, with its state) to the ownership tracker. The cluster's notifier
// calls it, and joinCluster once.
func (n *Node) membershipChanged(view []cluster.Member) {
	members := make([]ownership.Member, 0, len(view))
	var live []cluster.Member
	for _, m := range view {
		members = append(members, ownershipMember(m))
		if m.State == cluster.StateAlive || m.State == cluster.StateUnreachable {
			live = append(live, m)
		}
	}
	n.sec.SetMembers(memberIDs(live)) // before routing to a new member, accept its calls
	n.own.Membership(members)
}

// ownershipMember is m as ownership reads it.
func ownershipMember(m cluster.Member) ownership.Member {
	om := ownership.Member{ID: m.ID, Addr: m.GRPCAddr, Since: m.Since, Unconfirmed: m.Unconfirmed, Boot: m.Boot, Restored: m.Restored}
	switch m.State {
	case cluster.StateUnreachable:
		om.State = ownership.Unreachable
	case cluster.StateFailed:
		om.State = ownership.Failed
	case cluster.StateLeft:
		om.State = ownership.Left
	}
	return om
}

// ownershipEffects carries out the tracker's actions (ownership.Effects).
type ownershipEffects struct{ n *Node }

// Connect keeps a connection to each member.
func (e ownershipEffects) Connect(members []peer.Route) { e.n.peers.Update(members) }

// RingChanged promotes the replicas of partitions whose owner failed
// (replica.Failover.Reconcile), and counts the change.
func (e ownershipEffects) RingChanged(c ownership.RingChanged) {
	if e.n.repl.failover != nil {
		members := make(map[string]replica.Member, len(c.Members))
		for _, m := range c.Members {
			members[m.ID] = replica.Member{Failed: m.State == ownership.Failed, Boot: m.Boot, Restored: m.Restored}
		}
		e.n.repl.failover.Reconcile(c.Old, c.New, members)
	}
	e.n.metrics.ringChanges.Inc()
}

// HandOff wakes the handoff sender.
func (e ownershipEffects) HandOff() { e.n.handoff.Wake() }
