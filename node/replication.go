package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
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

	// promoted holds, by the member that replicated them, the replicas
	// merged into this node's state while that member was alive but
	// unreachable. If it hands its state off later (it was leaving, or
	// comes back), that state includes them: they are subtracted first,
	// so that nothing counts twice (supersede).
	mu       sync.Mutex
	promoted map[string][]limiter.KeyState
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
	deps.Replicas, deps.Heir, deps.Promote, deps.BeforeHandoff = n.repl.store, n.heir, n.promote, n.supersede
	n.repl.promoted = map[string][]limiter.KeyState{}
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
func (n *Node) heir(key string) (peer.Route, bool) {
	r := n.ring.Load()
	b, ok := r.Backup(r.Partition(key))
	return peer.Route{ID: b.ID, Addr: b.Addr}, ok
}

// promote is route.Deps.Promote: merge the replica of key's partition, if
// this node holds one, into its own state.
func (n *Node) promote(key string) {
	r := n.ring.Load()
	p := r.Partition(key)
	// Only the unreachable owner's own replica: one another member sent
	// (it owns the partition in its newer ring) is that member's to use.
	if n.repl.store.Holds(p) && n.repl.store.Origin(p) == r.PartitionOwner(p).ID {
		n.promotePartition(p, "owner unreachable")
	}
}

// promotePartition merges the replica of partition p into the store. What
// this node does not own, handoff moves to the owner.
//
// It holds repl.mu throughout, as supersede does: a handoff from the
// replica's origin is then merged either before (and the replica is gone)
// or after (and the promotion is subtracted), never in between.
func (n *Node) promotePartition(p int, why string) {
	n.repl.mu.Lock()
	defer n.repl.mu.Unlock()
	states, origin := n.repl.store.Take(p)
	if len(states) == 0 {
		return
	}
	merged, errs := n.store.Merge(n.cfg.Now(), states)
	if why != "owner failed" {
		n.repl.promoted[origin] = append(n.repl.promoted[origin], states...)
	}
	n.repl.metrics.Promoted(merged)
	n.log.Info("took over a partition's replica", "partition", p, "keys", merged, "why", why, "from", origin)
	if len(errs) > 0 {
		n.log.Warn("refused replicated keys on takeover", "partition", p, "refused", len(errs), "first", errs[0])
	}
}

// supersede is route.Deps.BeforeHandoff: a handoff from origin carries
// its whole state of those keys, which includes what this node merged
// from origin's replica while it could not reach it; that is subtracted
// (limiter.Store.Forget) before the handoff is merged. And the replica
// origin sent of those keys' partitions is dropped: the handoff is newer,
// and a replica promoted after it (a check that could not reach origin,
// which is leaving, before this node's ring says so) would count its hits
// a second time.
func (n *Node) supersede(origin string, states []limiter.KeyState) {
	n.repl.mu.Lock()
	defer n.repl.mu.Unlock()
	n.dropSupersededReplicas(origin, states)
	promoted := n.repl.promoted[origin]
	if len(promoted) == 0 {
		return
	}
	type id struct {
		key    string
		window time.Duration
		algo   limiter.Algorithm
	}
	incoming := make(map[id]bool, len(states))
	for _, ks := range states {
		incoming[id{ks.Key, ks.Window, ks.Algorithm}] = true
	}
	var gone, kept []limiter.KeyState
	for _, ks := range promoted {
		if incoming[id{ks.Key, ks.Window, ks.Algorithm}] {
			gone = append(gone, ks)
		} else {
			kept = append(kept, ks)
		}
	}
	n.repl.promoted[origin] = kept
	n.store.Forget(n.cfg.Now(), gone)
}

// dropSupersededReplicas drops the replicas origin sent of the partitions
// states belong to.
func (n *Node) dropSupersededReplicas(origin string, states []limiter.KeyState) {
	done := map[int]bool{}
	for _, ks := range states {
		p := n.store.PartitionOf(ks.Key)
		if done[p] {
			continue
		}
		done[p] = true
		if n.repl.store.Holds(p) && n.repl.store.Origin(p) == origin {
			n.repl.store.Drop(p)
		}
	}
}

// returnPromoted is handoff.Deps.BeforeSend: before this node hands owner
// the state it holds of owner's partitions, it drops what it merged from
// owner's own replica: owner still holds those hits, and would otherwise
// count them twice.
func (n *Node) returnPromoted(owner string) {
	if n.repl.store == nil {
		return
	}
	n.repl.mu.Lock()
	promoted := n.repl.promoted[owner]
	delete(n.repl.promoted, owner)
	n.repl.mu.Unlock()
	if len(promoted) > 0 {
		n.store.Forget(n.cfg.Now(), promoted)
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
	n.repl.mu.Lock()
	for id := range n.repl.promoted {
		if failed[id] { // it will hand nothing off: the replicas were its last word
			delete(n.repl.promoted, id)
		}
	}
	n.repl.mu.Unlock()
	for p := range r.PartitionCount() {
		if !n.repl.store.Holds(p) {
			continue
		}
		prev, owner := old.PartitionOwner(p).ID, r.PartitionOwner(p).ID
		origin := n.repl.store.Origin(p)
		backup, _ := r.Backup(p)
		switch {
		case origin == prev && failed[prev] && owner != prev:
			n.promotePartition(p, "owner failed")
		case origin == owner && backup.ID == n.cfg.ID:
			// Already from the new owner, whose ring changed first: keep.
		case owner != prev || backup.ID != n.cfg.ID:
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
