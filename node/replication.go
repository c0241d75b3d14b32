package node

import (
	"github.com/peerlimit/peerlimit/replica"
)

// replication is the node's side of package replica: the failover that
// keeps the replicas other members send and promotes them, and the
// replicator that sends this node's own partitions' changes to their
// backups. Both nil when Config.Replication.Factor is 0.
type replication struct {
	store    *replica.Store // the replicas others send; the failover's
	failover *replica.Failover
	sender   *replica.Replicator
	metrics  *replica.Metrics
}
