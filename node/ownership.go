package node

import "github.com/peerlimit/peerlimit/cluster"

// membershipChanged takes the cluster's membership (every member it
// knows, with its state) to the credentials, which accept calls from the
// live members, and to the Core's ownership. The cluster's notifier calls
// it, and joinCluster once.
func (n *Node) membershipChanged(view []cluster.Member) {
	var live []cluster.Member
	for _, m := range view {
		if m.State == cluster.StateAlive || m.State == cluster.StateUnreachable {
			live = append(live, m)
		}
	}
	n.sec.SetMembers(memberIDs(live)) // before routing to a new member, accept its calls
	n.core.Membership(view)
}
