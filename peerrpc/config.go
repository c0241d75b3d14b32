package peerrpc

import (
	"errors"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config holds the settings of a node's calls to other members. Start
// from DefaultConfig.
type Config struct {
	// BatchLimit is the most checks one batch of forwarded checks carries.
	// 1 turns batching off: every check is its own Forward call. Default
	// 128.
	BatchLimit int
	// MaxInflight is the most batches out to one peer at once, sent and
	// not yet answered. While they are out, checks bound there gather, and
	// go together as soon as one is answered: under load a batch carries
	// what arrived during the one before it. Default 1.
	MaxInflight int
	// Timeout bounds every call to a peer, and the wait for each batch's
	// answer. Past it the owner counts as unreachable and the fallback
	// policy answers. Default 500ms.
	Timeout time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{BatchLimit: 128, MaxInflight: 1, Timeout: 500 * time.Millisecond}
}

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.BatchLimit < 1 {
		errs = append(errs, field.Errorf("BatchLimit", "must be ≥ 1 (1 turns batching off), got %d", c.BatchLimit))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, field.Errorf("MaxInflight", "must be ≥ 1, got %d", c.MaxInflight))
	}
	if c.Timeout <= 0 {
		errs = append(errs, field.Errorf("Timeout", "must be positive, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}
