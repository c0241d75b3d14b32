package node

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/route"
)

// settleLeases settles the budget leases this node holds that are spent
// or ended, and expires those it lent that were never settled. The node
// runs it every quarter of the lease duration (every).
func (n *Node) settleLeases() {
	now := n.cfg.Now()
	n.leases.SettleWithOwners(context.Background(), now, false)
	n.leases.Expire(now)
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

// initLeases creates the budget leases' book and gives it to the request
// path; none with Config.Lease.Duration 0.
func (n *Node) initLeases(deps *route.Deps) error {
	m, err := lease.NewMetrics(n.reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if n.leases, err = lease.New(n.cfg.Lease, lease.Deps{Store: n.store, Peers: n.peers, Metrics: m, Logger: n.log}); err != nil {
		return err
	}
	deps.Leases = n.leases
	return nil
}
