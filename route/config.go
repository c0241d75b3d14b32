package route

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Config holds the request path's settings. Start from DefaultConfig.
type Config struct {
	// MaxBatch caps the checks of one CheckBatch call. Default 1000.
	MaxBatch int
	// Fallback is how a check is answered when its owner cannot be asked.
	// Default FallbackLocal.
	Fallback FallbackPolicy
	// MaxInflightForwards caps the checks of this node waiting for their
	// owners' answers, all peers together. A check over it is refused at
	// once with ErrTooManyForwards (RESOURCE_EXHAUSTED, HTTP 429), not
	// answered by the fallback: a slow owner must show as overload, and
	// queued checks must not pile up without bound. Default 10,000.
	MaxInflightForwards int
	// LeaseDuration is how long a budget lease lasts (lease.go): a node
	// that forwards a key at LeaseMinRate or more asks its owner for part
	// of the key's limit, and admits from it for this long without a hop.
	// 0 turns leases off. Default 250 ms; at most 10 s.
	LeaseDuration time.Duration
	// LeaseMinRate is the rate (checks per second, from this node, of one
	// key) from which this node asks for a lease: ordinary keys never
	// reach it. Default 200.
	LeaseMinRate int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxBatch: 1000, Fallback: FallbackLocal, MaxInflightForwards: 10_000,
		LeaseDuration: 250 * time.Millisecond, LeaseMinRate: 200}
}

// Validate reports every unusable field.
func (c Config) Validate() error {
	var errs []error
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("MaxBatch must be ≥ 1, got %d", c.MaxBatch))
	}
	if c.MaxInflightForwards < 1 {
		errs = append(errs, fmt.Errorf("MaxInflightForwards must be ≥ 1, got %d", c.MaxInflightForwards))
	}
	if c.LeaseDuration < 0 || c.LeaseDuration > 10*time.Second || (c.LeaseDuration > 0 && c.LeaseDuration < 10*time.Millisecond) {
		errs = append(errs, fmt.Errorf("LeaseDuration (--lease-duration) must be 0 (off) or in [10ms, 10s], got %s", c.LeaseDuration))
	}
	if c.LeaseMinRate < 1 {
		errs = append(errs, fmt.Errorf("LeaseMinRate (--lease-min-rate) must be ≥ 1, got %d", c.LeaseMinRate))
	}
	if c.Fallback > FallbackShare {
		errs = append(errs, fmt.Errorf("Fallback: unknown policy %d", c.Fallback))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("route config: %w", err)
	}
	return nil
}

// Deps is what a Service works with, supplied by whoever assembles the
// node (package node, or a test).
type Deps struct {
	// NodeID names this node in every answer it decides (owner). Required.
	NodeID string
	// Store holds the state of the keys this node decides. Required.
	Store *limiter.Store
	// Now is the node's clock. Only the owner's clock decides: a forwarded
	// check is decided at the time the owner receives it, so skew between
	// the nodes that receive requests cannot move a key's windows.
	// Required.
	Now func() time.Time
	// Owner returns the member that owns a key. Nil means this node owns
	// every key (a node alone).
	Owner func(key string) peer.Route
	// Members returns every live member's route (this node may be among
	// them), for the calls that go to all of them: Reset asks each to drop
	// its copy of a key's state. Nil: this node knows no others.
	Members func() []peer.Route
	// Peers reaches the other members. Required with Owner or Members.
	Peers peer.Peers
	// Policies resolves the policy names requests may give instead of
	// numbers. Nil: this node has none, and a request naming one is
	// refused.
	Policies PolicyLookup
	// Metrics counts the request path; nil counts nothing.
	Metrics *Metrics
	// Logger receives the warnings of the request path, each at most once
	// a second. Nil: slog.Default().
	Logger *slog.Logger
	// OnHandoff, if set, is told how many states each handoff another
	// member made to this node merged, for metrics.
	OnHandoff func(merged int)
	// Replicas keeps the state that owners replicate to this node as
	// their backup. Nil: this node refuses replication (ErrNoReplicas).
	Replicas Replicas
	// Heir returns the member that inherits key if its owner fails (its
	// partition's backup, which holds its replica). A check whose owner
	// cannot be reached goes there before the fallback policy answers.
	// Nil, or false: no heir (replication off, a ring of one).
	Heir func(key string) (peer.Route, bool)
	// Share returns how many members are live and how many this node
	// knows: live plus those that failed recently (not those that left),
	// for FallbackShare. Nil: this node alone, (1, 1).
	Share func() (live, known int)
	// BeforeHandoff, if set, is called with a handoff's states before
	// they are merged (the node subtracts what it already merged from
	// the sender's replica). Nil: nothing.
	BeforeHandoff func(origin string, states []limiter.KeyState)
	// Promote is called before this node decides a key it does not own
	// (as the heir of an unreachable owner, or for a member whose ring
	// already says the owner is gone): it merges the replica this node
	// holds of the key's partition, if any, into its store. Nil: none.
	Promote func(key string)
	// Samples returns this node's samples newer than since, for the
	// console's report (package console). Nil: none.
	Samples func(since time.Time) []peer.Sample
}

func (d Deps) validate() error {
	switch {
	case d.NodeID == "":
		return errors.New("route: Deps.NodeID must not be empty")
	case d.Store == nil:
		return errors.New("route: Deps.Store is required")
	case d.Now == nil:
		return errors.New("route: Deps.Now is required")
	case (d.Owner != nil || d.Members != nil) && d.Peers == nil:
		return errors.New("route: Deps.Peers is required with Owner or Members")
	}
	return nil
}

// Replicas is where a backup keeps the states owners replicate to it
// (replica.Store is one). Apply replaces its copy of each key's state
// with the one given, and drops the copy on an empty state.
type Replicas interface {
	Apply(origin string, r peer.Replication) (kept int)
}
