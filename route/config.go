package route

import (
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/policy"
	"github.com/peerlimit/peerlimit/ring"
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
	// SettleWait is how long a check of a key whose partition has just
	// come to this node waits for the partition's state to arrive from
	// the other members (Cluster.Settling) before it is decided from what
	// is here, marked degraded. A node that joins, restarts or comes back
	// from a partition would otherwise decide those keys from less than
	// they hold. 0 never waits. Default 250ms.
	SettleWait time.Duration
	// HoldTTL is how long an all-or-nothing batch holds each limit
	// (CheckAll): longer than a forward and its answer take, since a
	// hold that expires before its commit arrives gives its hits back;
	// short, since a hold whose coordinator died counts until then.
	// Default 10s.
	HoldTTL time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxBatch: 1000, Fallback: FallbackLocal, MaxInflightForwards: 10_000, SettleWait: 250 * time.Millisecond,
		HoldTTL: 10 * time.Second}
}

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.MaxBatch < 1 {
		errs = append(errs, field.Errorf("MaxBatch", "must be ≥ 1, got %d", c.MaxBatch))
	}
	if c.MaxInflightForwards < 1 {
		errs = append(errs, field.Errorf("MaxInflightForwards", "must be ≥ 1, got %d", c.MaxInflightForwards))
	}
	if c.SettleWait < 0 {
		errs = append(errs, field.Errorf("SettleWait", "must not be negative, got %s", c.SettleWait))
	}
	if c.HoldTTL < time.Millisecond || c.HoldTTL%time.Millisecond != 0 {
		errs = append(errs, field.Errorf("HoldTTL", "must be a whole number of ms, at least 1ms, got %s", c.HoldTTL))
	}
	if c.Fallback > FallbackShare {
		errs = append(errs, field.Errorf("Fallback", "is an unknown policy, %d", c.Fallback))
	}
	return errors.Join(errs...)
}

// Deps is what a Service works with, supplied by whoever assembles the
// node (package node, or a test). Each is an interface with its own
// contract, or a value; none is a hook into the node. The optional ones
// have do-nothing defaults (withDefaults), so the request path never asks
// whether it has them.
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
	// Cluster is this node's ownership: each key's owner and heir, the
	// members, the share of FallbackShare (ownership.Tracker). Nil: this
	// node alone owns every key.
	Cluster Cluster
	// Peers reaches the other members. Required with Cluster.
	Peers peer.Peers
	// Failover keeps the replicas other members' partitions have here and
	// promotes them when their owner cannot be reached (replica.Failover).
	// Nil: replication is off; no member is any key's heir, so a check
	// whose owner cannot be reached goes to the fallback policy at once,
	// and this node refuses replication (peer.ErrNoReplicas).
	Failover Failover
	// Leaving reports whether this node is leaving the cluster: it then
	// refuses handoffs (peer.ErrLeaving; handoff.ReceiverDeps.Leaving).
	// Nil: never.
	Leaving func() bool
	// Leases are this node's budget leases (package lease), both as the
	// holder of hot keys it forwards and as their owner. Nil: off (a nil
	// *lease.Book lends and holds nothing).
	Leases *lease.Book
	// Policies resolves the policy names requests may give instead of
	// numbers. Nil: this node has none, and a request naming one is
	// refused.
	Policies PolicyLookup
	// Samples are this node's sampled rates, for the console's report
	// (console.Sampler). Nil: none.
	Samples Samples
	// Metrics counts the request path; nil counts nothing.
	Metrics *Metrics
	// HandoffMetrics counts the states other members hand this node; nil
	// counts nothing.
	HandoffMetrics *handoff.Metrics
	// Tracer records a span for each hop of a traced check to its owner
	// (trace.go): only under a caller's span that records, so that an
	// untraced or unsampled check costs a context lookup. Nil: none.
	Tracer trace.Tracer
	// Logger receives the warnings of the request path, each at most once
	// a second. Nil: slog.Default().
	Logger *slog.Logger
}

func (d Deps) validate() error {
	switch {
	case d.NodeID == "":
		return errors.New("route: Deps.NodeID must not be empty")
	case d.Store == nil:
		return errors.New("route: Deps.Store is required")
	case d.Now == nil:
		return errors.New("route: Deps.Now is required")
	case d.Cluster != nil && d.Peers == nil:
		return errors.New("route: Deps.Peers is required with Cluster")
	}
	return nil
}

// withDefaults fills the optional dependencies with ones that do nothing.
func (d Deps) withDefaults() Deps {
	if d.Cluster == nil {
		d.Cluster = alone{peer.Route{ID: d.NodeID}}
	}
	if d.Failover == nil {
		d.Failover = noReplicas{}
	}
	if d.Policies == nil {
		d.Policies = noPolicies{}
	}
	if d.Samples == nil {
		d.Samples = noSamples{}
	}
	if d.Tracer == nil {
		d.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

// Cluster is this node's ownership (ownership.Tracker is the node's): who
// decides each key, as the request path reads it on every check, and the
// one event the request path hears of, a member's HandoffDone.
// Implementations are safe for concurrent use and must not block: the
// node's reads a view it swaps in atomically on every change.
type Cluster interface {
	// Owner returns the member that owns key.
	Owner(key string) peer.Route
	// Heir returns the member that inherits key if its owner fails: its
	// partition's backup, which holds its replica. False in a ring of one.
	Heir(key string) (peer.Route, bool)
	// Members returns every member that owns partitions, this node among
	// them, for the calls that go to each (a reset's copies, the
	// console's reports).
	Members() []peer.Route
	// Share returns how many members are live and how many this node
	// knows: live plus those that failed recently (not those that left),
	// for FallbackShare.
	Share() (live, known int)
	// Contested reports whether this node's answer for key rests on its
	// own view alone: it took members out of the ring that no majority
	// confirmed gone (cluster.Member.Unconfirmed), so it may be on the
	// small side of a partition, with another member deciding key too.
	// Such answers are marked Degraded.
	Contested(key string) bool
	// Settling returns, if key's partition has just come to this node and
	// its state may still be on its way from other members, a channel
	// closed when it has arrived; nil otherwise (the common case). A
	// check waits on it, at most Config.SettleWait, rather than be decided
	// from less than the key holds.
	Settling(key string) <-chan struct{}
	// HandoffDone notes that origin holds nothing of partitions it has
	// not handed this node (peer.Handler.HandleHandoffDone).
	HandoffDone(origin string, partitions []int)
}

// RingCluster is a Cluster read from the ring load returns at each call
// (ring.Holder.Load), every member of which is live.
func RingCluster(load func() *ring.Ring) Cluster { return onRing(load) }

// FixedCluster is a Cluster of one ring that never changes, every member
// of which is live: for tests, and a node whose members are fixed.
func FixedCluster(r *ring.Ring) Cluster { return RingCluster(func() *ring.Ring { return r }) }

type onRing func() *ring.Ring

func (f onRing) Owner(key string) peer.Route { return RouteOf(f().Owner(key)) }
func (f onRing) Heir(key string) (peer.Route, bool) {
	r := f()
	b, ok := r.Backup(r.Partition(key))
	return RouteOf(b), ok
}
func (f onRing) Members() []peer.Route           { return RoutesOf(f().Members()) }
func (f onRing) Contested(string) bool           { return false }
func (f onRing) Settling(string) <-chan struct{} { return nil }
func (f onRing) HandoffDone(string, []int)       {}
func (f onRing) Share() (live, known int) {
	n := len(f().Members())
	return n, n
}

// RouteOf is a ring member's route.
func RouteOf(m ring.Member) peer.Route { return peer.Route{ID: m.ID, Addr: m.Addr} }

// RoutesOf are ring members' routes.
func RoutesOf(ms []ring.Member) []peer.Route {
	out := make([]peer.Route, len(ms))
	for i, m := range ms {
		out[i] = RouteOf(m)
	}
	return out
}

// Failover is the replicas this node keeps as other members' heir, as
// the request path uses them; replica.Failover is the node's. Every
// method is safe for concurrent use. Promote runs on the request path,
// from many checks at once: it merges the replica of key's partition
// into Store at the first call after its owner became unreachable, and
// finds nothing to do after that; the caller must hold no lock of the
// store's. Apply runs on a peer's replication call, Supersede on a
// handoff's (handoff.Replicas).
type Failover interface {
	handoff.Replicas
	// Apply keeps the states owner origin replicated to this node, apart
	// from Store, and says what it kept, and which partitions it holds
	// no whole copy of from origin.
	Apply(origin string, r peer.Replication) peer.Replicated
	// Promote merges the replica this node holds of key's partition, if
	// its owner sent it, into Store.
	Promote(key string)
}

// The do-nothing dependencies (Deps.withDefaults).
type (
	// alone is the Cluster of a node that owns every key.
	alone struct{ self peer.Route }
	// noReplicas is the Failover of a node that keeps none.
	noReplicas struct{}
	// noPolicies is the PolicyLookup of a node that has none.
	noPolicies struct{}
	// noSamples is the Samples of a node that samples nothing.
	noSamples struct{}
)

func (a alone) Owner(string) peer.Route                           { return a.self }
func (alone) Heir(string) (peer.Route, bool)                      { return peer.Route{}, false }
func (a alone) Members() []peer.Route                             { return []peer.Route{a.self} }
func (alone) Share() (live, known int)                            { return 1, 1 }
func (alone) Contested(string) bool                               { return false }
func (alone) Settling(string) <-chan struct{}                     { return nil }
func (alone) HandoffDone(string, []int)                           {}
func (noReplicas) Apply(string, peer.Replication) peer.Replicated { return peer.Replicated{} }
func (noReplicas) Promote(string)                                 {}
func (noReplicas) Supersede(string, []limiter.KeyState)           {}
func (noReplicas) ReturnPromoted(string) []limiter.KeyState       { return nil }
func (noReplicas) Unreturn(string, []limiter.KeyState)            {}
func (noPolicies) Lookup(string) (policy.Policy, bool)            { return policy.Policy{}, false }
func (noSamples) Since(time.Time) []peer.Sample                   { return nil }

// Samples is the source of a node's sampled rates (console.Sampler). Safe
// for concurrent use.
type Samples interface {
	// Since returns the samples newer than t, oldest first.
	Since(t time.Time) []peer.Sample
}
