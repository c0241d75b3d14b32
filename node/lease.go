package node

import (
	"context"
	"time"
)

// leaseLoop settles the budget leases this node holds that are spent or
// ended, and expires those it lent that were never settled, every
// interval (a quarter of the lease duration), until the node stops.
func (n *Node) leaseLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.svc.SettleLeases(context.Background())
			n.svc.ExpireLeases()
		}
	}
}
