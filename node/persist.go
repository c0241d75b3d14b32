package node

import (
	"context"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/persist"
	"github.com/peerlimit/peerlimit/replica"
)

// The node's side of package persist: the data directory opened and
// read back before anything serves, each round's changes written, a
// snapshot's source, the last round at a graceful stop.

// openDisk opens the data directory (Config.Persist) and merges the
// states it held into the empty store; the replicas' changes wait for the
// replica store (initReplicas). Without a data directory it says, once,
// that counts die with the cluster.
func (c *Core) openDisk(d CoreDeps) error {
	if c.cfg.Persist.Dir == "" {
		c.log.Info("no --data-dir: counts are kept in memory only (and on the heirs, with replication); a restart of the whole cluster forgets them")
		return nil
	}
	m, err := persist.NewMetrics(d.Registerer)
	if err != nil {
		return err
	}
	log, restored, err := persist.Open(c.cfg.Persist, persist.Identity{Cluster: c.cfg.ClusterName, Node: c.cfg.ID},
		persist.Deps{FS: d.FS, Source: diskSource{c}, Logger: c.log, Metrics: m})
	if err != nil {
		return err
	}
	c.disk, c.restored = log, restored
	merged, errs := c.store.Transfer().Merge(c.cfg.Now(), restored.Own)
	attrs := []any{"dir", c.cfg.Persist.Dir, "files", len(restored.Files), "keys", merged, "replica_changes", len(restored.Replicas),
		"took", restored.Took.Round(time.Millisecond)}
	if len(errs) > 0 {
		attrs = append(attrs, "refused", len(errs), "first", errs[0])
	}
	if len(restored.Dropped) > 0 {
		attrs = append(attrs, "files_read_in_part", len(restored.Dropped))
	}
	c.log.Info("restored counts from the data directory", attrs...)
	return nil
}

// restoreReplicas replays the replicas' changes the data directory held
// into the replica store; without replication they are dropped.
func (c *Core) restoreReplicas(rs *replica.Store) {
	ops := c.restored.Replicas
	c.restored.Replicas = nil
	if rs == nil {
		if len(ops) > 0 {
			c.log.Info("replication is off: the replicas the data directory held are not restored", "changes", len(ops))
		}
		return
	}
	for _, op := range ops {
		if op.Drop {
			for _, p := range op.Whole {
				if p >= 0 && p < c.cfg.Partitions {
					rs.Drop(p)
				}
			}
			continue
		}
		rs.Apply(op.Origin, op.Replication)
	}
	rs.Stale() // the owners send them whole again: the disk may lack their last changes
}

// diskSource is what a snapshot writes: the store's states and the
// replicas (persist.Source).
type diskSource struct{ n *Core }

func (s diskSource) OwnStates(yield func([]limiter.KeyState) error) error {
	now := s.n.cfg.Now()
	for p := range s.n.store.Transfer().Partitions() {
		if err := yield(s.n.store.Transfer().SnapshotPartition(p, now)); err != nil {
			return err
		}
	}
	return nil
}

func (s diskSource) Replicas(yield func(origin string, r peer.Replication) error) error {
	if s.n.repl.store == nil {
		return nil
	}
	return s.n.repl.store.Export(yield)
}

// changes takes what changed in the store once a round
// (limiter.Changes.TakeAll) and gives it to the disk and the backups
// alike. round runs on one loop; flush once, at a graceful stop, after
// the loops have stopped.
//
// The disk comes first: writing a round is an append to the page cache
// (microseconds), sending it waits for every backup, up to its call's
// timeout when one stalls. A hit counted just after a round's take is
// written with the next round's, so a kill -9 loses what was counted in
// at most one interval (--replication-interval) plus the time between
// that round's take and its write, which is only the write's this way,
// while the rounds keep to their interval. A round that a stalled backup
// holds past its interval delays the next take by as much: the bound
// grows with it (docs/operations.md, "Persistence").
type changes struct {
	store *limiter.Store
	repl  *replica.Replicator // nil: replication off
	disk  *persist.Log        // nil: persistence off
	now   func() time.Time
	bufs  [][]limiter.KeyState
	flat  []limiter.KeyState
}

// round persists and replicates what changed since the last.
func (c *changes) round() {
	c.bufs = c.store.Changes().TakeAll(c.bufs, c.now())
	c.persist()
	if c.repl != nil {
		c.repl.RoundWith(context.Background(), c.bufs)
	}
}

// flush persists what changed since the last round: a leaving node's
// last word to its disk, after its last handoff.
func (c *changes) flush() {
	c.bufs = c.store.Changes().TakeAll(c.bufs, c.now())
	c.persist()
}

func (c *changes) persist() {
	if c.disk == nil {
		return
	}
	clear(c.flat)
	c.flat = c.flat[:0]
	for _, states := range c.bufs {
		c.flat = append(c.flat, states...)
	}
	c.disk.Own(c.flat)
}
