package node

import (
	"context"
	"time"
)

// settleLeases settles the budget leases this node holds that are spent
// or ended, and expires those it lent that were never settled. The node
// runs it every quarter of the lease duration (every).
func (n *Node) settleLeases() {
	n.svc.SettleLeases(context.Background())
	n.svc.ExpireLeases()
}

// every runs f every interval until the node stops: the body of the
// node's periodic loops, each started and waited for by startServing and
// stopLoops.
func (n *Node) every(interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			f()
		}
	}
}
