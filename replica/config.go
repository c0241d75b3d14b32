// Package replica keeps counts alive across a crash. The owner of each
// partition sends the keys that changed, batched every Config.Interval, to
// the partition's backup: the member that would own it if the owner left
// (ring.Backup), so that when the owner fails, its heir already holds its
// state. A backup keeps replicas apart (Store) and never decides from
// them while the owner lives; when the owner fails, or cannot be reached,
// the heir merges them into its own state (Store.Take, then
// limiter.Transfer.Merge) and decides from there.
//
// What a crash can lose is what the owner admitted since its last
// delivered round: at most one Interval plus one call's time of
// admissions (peerlimit_replication_lag_seconds measures the bound).
package replica

import (
	"errors"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config is replication's settings. Start from DefaultConfig.
type Config struct {
	// Factor is the number of backups of each partition: 0 turns
	// replication off, 1 keeps one replica on the partition's heir.
	// Default 1. (More than one backup is not built: the heir of a
	// partition whose owner and backup fail together starts from zero.)
	Factor int
	// Interval is how often an owner sends its backups what changed: the
	// bound on what a crash loses. Default 20ms: one call per backup per
	// round at most, and only with changes to send.
	Interval time.Duration
	// MaxKeys caps the key states a backup holds for others, to bound its
	// memory whatever the owners send, split evenly over the partitions
	// as the store's MaxKeys is: past its share, a partition keeps the keys
	// replicated last, and the others are refused and counted; a
	// calendar quota's state is kept past it, never refused. Between
	// compactions a partition's list may hold repeats of a key, at most
	// about twice its share (see Store). Default 1,048,576, as the store's.
	MaxKeys int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Factor: 1, Interval: 20 * time.Millisecond, MaxKeys: 1 << 20}
}

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.Factor < 0 || c.Factor > 1 {
		errs = append(errs, field.Errorf("Factor", "must be 0 (off) or 1, got %d", c.Factor))
	}
	if c.Interval < time.Millisecond {
		errs = append(errs, field.Errorf("Interval", "must be ≥ 1ms, got %s", c.Interval))
	}
	if c.MaxKeys < 1 {
		errs = append(errs, field.Errorf("MaxKeys", "must be ≥ 1, got %d", c.MaxKeys))
	}
	return errors.Join(errs...)
}
