package node

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
)

// replication is the node's side of package replica: the replicas it
// keeps for others, and the replicator that sends its own partitions'
// changes to their backups. Both nil when Config.Replication.Factor is 0.
type replication struct {
	store   *replica.Store
	sender  *replica.Replicator
	metrics *replica.Metrics
}

// initReplicas creates the replica store and plugs it, the heirs and the
// promotion into deps. Before the route.Service.
func (n *Node) initReplicas(deps *route.Deps) (err error) {
	if n.cfg.Replication.Factor == 0 {
		return nil
	}
	if n.repl.metrics, err = replica.NewMetrics(n.reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	n.repl.store = replica.NewStore(n.cfg.Partitions, n.cfg.Replication.MaxKeys, n.cfg.Limiter.MaxLogLimit, n.repl.metrics)
	deps.Replicas, deps.Heir, deps.Promote = n.repl.store, n.heir, n.promote
	return nil
}

// initReplicator creates what sends this node's changes to its backups.
// After the peers.
func (n *Node) initReplicator() (err error) {
	if n.cfg.Replication.Factor == 0 {
		return nil
	}
	n.repl.sender, err = replica.NewReplicator(replica.Deps{Self: n.cfg.ID, Store: n.store, Peers: n.peers,
		Ring: n.ring.Load, Now: n.cfg.Now, Logger: n.log, Metrics: n.repl.metrics})
	return err
}

// heir is route.Deps.Heir: the backup of key's partition.
func (n *Node) heir(key string) (route.Route, bool) {
	r := n.ring.Load()
	b, ok := r.Backup(r.Partition(key))
	return route.Route{ID: b.ID, Addr: b.Addr}, ok
}

// promote is route.Deps.Promote: merge the replica of key's partition, if
// this node holds one, into its own state.
func (n *Node) promote(key string) {
	if p := n.store.PartitionOf(key); n.repl.store.Holds(p) {
		n.promotePartition(p, "owner unreachable")
	}
}

// promotePartition merges the replica of partition p into the store. What
// this node does not own, handoff moves to the owner.
func (n *Node) promotePartition(p int, why string) {
	states := n.repl.store.Take(p)
	if len(states) == 0 {
		return
	}
	merged, errs := n.store.Merge(n.cfg.Now(), states)
	n.repl.metrics.Promoted(merged)
	n.log.Info("took over a partition's replica", "partition", p, "keys", merged, "why", why)
	if len(errs) > 0 {
		n.log.Warn("refused replicated keys on takeover", "partition", p, "refused", len(errs), "first", errs[0])
	}
}

// reconcileReplicas follows a ring change from old to r. A partition
// whose owner failed has its replica merged into this node's state (its
// heir's, or handed there); one whose owner left gracefully (it hands its
// state off itself), or whose backup is no longer this node, has its
// replica dropped.
func (n *Node) reconcileReplicas(old, r *ring.Ring) {
	if n.repl.store == nil || old == nil {
		return
	}
	failed := n.failedMembers()
	for p := range r.PartitionCount() {
		if !n.repl.store.Holds(p) {
			continue
		}
		prev := old.PartitionOwner(p).ID
		backup, _ := r.Backup(p)
		switch {
		case failed[prev] && r.PartitionOwner(p).ID != prev:
			n.promotePartition(p, "owner failed")
		case r.PartitionOwner(p).ID != prev || backup.ID != n.cfg.ID:
			n.repl.store.Drop(p)
		}
	}
}

// failedMembers returns the members gossip declared dead (not those that
// left), as this node sees them now.
func (n *Node) failedMembers() map[string]bool {
	c := n.cluster.Load()
	if c == nil {
		return nil // still joining: nobody has failed yet
	}
	out := map[string]bool{}
	for _, m := range c.View() {
		if m.State == cluster.StateFailed {
			out[m.ID] = true
		}
	}
	return out
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
			n.repl.store.Sweep(n.cfg.Now())
		}
	}
}
