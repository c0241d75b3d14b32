package node

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/replica"
)

// replication is the node's side of package replica: the failover that
// keeps the replicas other members send and promotes them, and the
// replicator that sends this node's own partitions' changes to their
// backups. Both nil when Config.Replication.Factor is 0.
type replication struct {
	failover *replica.Failover
	sender   *replica.Replicator
	metrics  *replica.Metrics
}

// initReplicas creates the replica store and its failover. Before the
// route.Service, which decides from them.
func (n *Node) initReplicas() (err error) {
	if n.cfg.Replication.Factor == 0 {
		return nil
	}
	if n.repl.metrics, err = replica.NewMetrics(n.reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	n.repl.failover, err = replica.NewFailover(replica.FailoverDeps{Self: n.cfg.ID, Store: n.store,
		Replicas: replica.NewStore(n.cfg.Partitions, n.cfg.Replication.MaxKeys, n.cfg.Limiter.MaxLogLimit, n.repl.metrics),
		Ring:     n.ring, Now: n.cfg.Now, Logger: n.log, Metrics: n.repl.metrics})
	return err
}

// initReplicator creates what sends this node's changes to its backups.
// After the peers.
func (n *Node) initReplicator() (err error) {
	if n.cfg.Replication.Factor == 0 {
		return nil
	}
	n.repl.sender, err = replica.NewReplicator(replica.Deps{Self: n.cfg.ID, Store: n.store, Peers: n.peers,
		Ring: n.ring, Now: n.cfg.Now, Logger: n.log, Metrics: n.repl.metrics})
	return err
}

// replicationLoop sends this node's changes to its backups every
// Replication.Interval, and sweeps the replicas it keeps with the store.
func (n *Node) replicationLoop() {
	t := time.NewTicker(n.cfg.Replication.Interval)
	defer t.Stop()
	sweep := time.NewTicker(n.cfg.SweepInterval)
	defer sweep.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.repl.sender.Round(context.Background())
		case <-sweep.C:
			n.repl.failover.Sweep(n.cfg.Now())
		}
	}
}
