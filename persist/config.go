// Package persist keeps a node's counts on its own disk, so that they
// survive a restart of the whole cluster: every node stopped together,
// killed together, or replaced with its volume.
//
// What is kept is what replication already takes from the store every
// round: the states of the keys that changed (limiter.Changes.Take),
// the node's own and those other members replicate to it. A Log appends
// them to segment files, record by record, each with a checksum; it syncs
// them every Config.SyncInterval, and every Config.SnapshotInterval it
// writes every state the node holds to a new snapshot file, by a rename,
// and deletes the segments the snapshot covers. Open reads the newest
// snapshot and the segments after it, each file up to its first bad
// record, and returns the last state of every key.
//
// The bounds (docs/operations.md, "Persistence"): a process killed loses
// what was changed since the take of the last round it wrote: the node
// takes and writes a round every --replication-interval, so at most two
// intervals (a hit counted just after a take waits a full interval for
// the next round's write); a machine that loses power loses at most
// SyncInterval more; a graceful stop loses nothing. A
// restored state is one that was written, never more than was counted.
package persist

import (
	"errors"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config is where and how often a Log writes. Start from DefaultConfig.
type Config struct {
	// Dir is the data directory (--data-dir). It must exist; one node's
	// alone (its manifest says whose: Identity).
	Dir string
	// SyncInterval is how often what was written is made durable
	// (fsync), the most a power loss loses. Default 1s, as Redis's
	// appendfsync everysec.
	SyncInterval time.Duration
	// SnapshotInterval is how often every state is written to a new
	// snapshot, after which the segments before it are deleted: it
	// bounds the log's size on disk and what a restart reads. Default
	// 1m.
	SnapshotInterval time.Duration
	// SnapshotBytes starts a snapshot sooner, once the segments since the
	// last one pass it. Default 256 MiB.
	SnapshotBytes int64
}

// DefaultConfig returns the defaults documented on Config, with no Dir.
func DefaultConfig() Config {
	return Config{SyncInterval: time.Second, SnapshotInterval: time.Minute, SnapshotBytes: 256 << 20}
}

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, field.Errorf("Dir", "is required"))
	}
	if c.SyncInterval <= 0 || c.SyncInterval > time.Minute {
		errs = append(errs, field.Errorf("SyncInterval", "must be in (0, 1m], got %s", c.SyncInterval))
	}
	if c.SnapshotInterval < time.Second {
		errs = append(errs, field.Errorf("SnapshotInterval", "must be at least 1s, got %s", c.SnapshotInterval))
	}
	if c.SnapshotBytes < 1<<20 {
		errs = append(errs, field.Errorf("SnapshotBytes", "must be at least 1 MiB, got %d", c.SnapshotBytes))
	}
	return errors.Join(errs...)
}
