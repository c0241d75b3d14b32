package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/internal/loop"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/ownership"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/persist"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
)

// Core is a node without its network faces: the store and its disk,
// ownership, the request path (route.Service), the replicas, handoff and
// budget leases, and the loops that keep them. Start builds one under
// every node's servers and membership; the simulation (package sim)
// builds several in one process, over in-memory networks, on simulated
// time, so that what it runs is the node's own code. Its methods are safe
// for concurrent use; the lifecycle ones (Start, StopLoops, Leave's steps,
// Close, Kill) are the owner's to call in order.
type Core struct {
	cfg     Config
	log     *slog.Logger
	store   *limiter.Store
	disk    *persist.Log // nil without a data directory
	own     *ownership.Tracker
	svc     *route.Service
	peers   peer.Peers
	conns   Connections
	handoff *handoff.Sender
	repl    replication
	leases  *lease.Book // nil with leases off
	changes *changes    // each round's changes, to the backups and the disk
	chores  *chores
	loops   *loop.Group
	rings   prometheus.Counter
	// restored is what the data directory held, until it is merged.
	restored persist.Restored
	// boot names this process (cluster.Member.Boot).
	boot string
}

// CoreDeps is what a Core works with.
type CoreDeps struct {
	// Addr is this node's route: where the others call it. Required.
	Addr string
	// Peers reaches the other members. Required.
	Peers peer.Peers
	// Registerer takes the core's metrics. Nil: a registry of its own,
	// which nothing reads.
	Registerer prometheus.Registerer
	// RouteMetrics are the request path's, if the node made them already
	// (its peer transport counts in them too). Nil: made on Registerer.
	RouteMetrics *route.Metrics
	// FS holds the data directory's files (Config.Persist). Nil: the
	// machine's, at Config.Persist.Dir.
	FS persist.FS
	// Connections keeps a connection to each member the ring may route
	// to (peerrpc.Peers.Update). Nil: the transport needs none.
	Connections Connections
	// Policies, Samples and Tracer are the request path's
	// (route.Deps), optional.
	Policies route.PolicyLookup
	Samples  route.Samples
	Tracer   trace.Tracer
}

// Connections is a transport that keeps a connection to each member
// (peerrpc.Peers): Update is called on every membership change, before
// the ring that routes to new members is published.
type Connections interface {
	Update(members []peer.Route)
}

type noConnections struct{}

func (noConnections) Update([]peer.Route) {}

// NewCore builds a Core from cfg (validated by the caller: Config.Validate)
// and d: the store, restored from its data directory, and everything
// over it. Nothing runs until Start; nothing is owned by this node until
// Membership and Joined say so.
func NewCore(cfg Config, d CoreDeps) (_ *Core, err error) {
	if d.Addr == "" || d.Peers == nil {
		return nil, errors.New("node: CoreDeps.Addr and Peers are required")
	}
	if d.Registerer == nil {
		d.Registerer = prometheus.NewRegistry()
	}
	if d.Connections == nil {
		d.Connections = noConnections{}
	}
	c := &Core{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), peers: d.Peers, conns: d.Connections, loops: loop.New(), boot: cluster.NewBoot()}
	defer func() {
		if err != nil && c.disk != nil {
			c.disk.Abandon()
		}
	}()
	for _, step := range []func(CoreDeps) error{
		c.initStore,       // the limiter state and its collector
		c.openDisk,        // the data directory: what it held merged into the store
		c.initReplicas,    // the replicas' store (restored) and its failover
		c.initOwnership,   // this node alone, until the membership says more
		c.initRequestPath, // leases, route.Service, the replicator, the handoff sender
	} {
		if err := step(d); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// initStore creates the store; it tracks its changes when the backups or
// the disk take them.
func (c *Core) initStore(d CoreDeps) (err error) {
	lc := c.cfg.Limiter
	lc.TrackChanges = c.cfg.Replication.Factor > 0 || c.cfg.Persist.Dir != "" // what the replicator sends, and the disk keeps
	if c.store, err = limiter.New(lc, c.cfg.Partitions); err != nil {
		return err
	}
	c.rings = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "peerlimit", Name: "ring_changes_total",
		Help: "Times this node's ring was rebuilt because membership changed."})
	return errors.Join(d.Registerer.Register(newStoreCollector(c.store)), d.Registerer.Register(c.rings))
}

// initReplicas creates the replica store, with what the disk held of it,
// and its failover. Before the route.Service, which decides from them.
func (c *Core) initReplicas(d CoreDeps) (err error) {
	if c.cfg.Replication.Factor == 0 {
		c.restoreReplicas(nil)
		return nil
	}
	if c.repl.metrics, err = replica.NewMetrics(d.Registerer); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	var journal replica.Journal // nil unless persisting: a nil *persist.Log in the interface would not be nil
	if c.disk != nil {
		journal = c.disk
	}
	c.repl.store = replica.NewStore(c.cfg.Partitions, c.cfg.Replication.MaxKeys, c.cfg.Limiter.MaxLogLimit, c.repl.metrics, journal)
	c.restoreReplicas(c.repl.store)
	c.repl.failover, err = replica.NewFailover(replica.FailoverDeps{Self: c.cfg.ID, Boot: c.boot, Store: c.store, Replicas: c.repl.store,
		Ring: c.Ring, Now: c.cfg.Now, Logger: c.log, Metrics: c.repl.metrics})
	return err
}

// initOwnership creates the tracker of who decides each key: this node
// alone until the membership says more.
func (c *Core) initOwnership(d CoreDeps) (err error) {
	c.own, err = ownership.NewTracker(ownership.Config{
		Self: c.cfg.ID, Addr: d.Addr, Ring: c.cfg.Ring, Partitions: c.cfg.Partitions,
		ShareFor: c.cfg.ShareFor, MaxWait: 2 * c.cfg.HandoffInterval, Holdings: c.store.Transfer(),
		// Back from its disk with peers to find: alone at the join, the
		// others hold counts this node lacks.
		Rejoining: c.Restored() && len(c.cfg.Join) > 0,
	}, ownership.TrackerDeps{Effects: ownershipEffects{c}, Logger: c.log})
	return err
}

// initRequestPath builds what a check goes through: the budget leases,
// the route.Service, and what moves state to its owners and backups.
func (c *Core) initRequestPath(d CoreDeps) (err error) {
	routeMetrics := d.RouteMetrics
	if routeMetrics == nil {
		if routeMetrics, err = route.NewMetrics(d.Registerer); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	handoffMetrics, err := handoff.NewMetrics(d.Registerer)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	deps := route.Deps{NodeID: c.cfg.ID, Store: c.store, Now: c.cfg.Now, Cluster: c.own, Peers: c.peers, Leaving: c.leaving,
		Policies: d.Policies, Samples: d.Samples, Metrics: routeMetrics, HandoffMetrics: handoffMetrics, Logger: c.log, Tracer: d.Tracer}
	var replicas handoff.Replicas // nil unless replication is on: a nil *Failover in the interface would not be nil
	if c.repl.failover != nil {
		deps.Failover, replicas = c.repl.failover, c.repl.failover
	}
	if err := c.initLeases(d, &deps); err != nil {
		return err
	}
	if c.svc, err = route.NewService(c.cfg.Route, deps); err != nil {
		return err
	}
	if c.cfg.Replication.Factor > 0 {
		if c.repl.sender, err = replica.NewReplicator(replica.Deps{Self: c.cfg.ID, Boot: c.boot, Store: c.store, Peers: c.peers,
			Ring: c.Ring, Now: c.cfg.Now, Logger: c.log, Metrics: c.repl.metrics}); err != nil {
			return err
		}
	}
	c.handoff, err = handoff.New(handoff.Deps{Self: c.cfg.ID, Store: c.store.Transfer(), Peers: c.peers, Ring: c.Ring,
		Leaving: c.leaving, Now: c.cfg.Now, Logger: c.log, Metrics: handoffMetrics, Replicas: replicas})
	if err != nil {
		return err
	}
	c.changes = &changes{store: c.store, repl: c.repl.sender, disk: c.disk, now: c.cfg.Now}
	return registerCapacity(d.Registerer, c.cfg, c.svc, c.leases)
}

// initLeases creates the budget leases' book and gives it to the request
// path; none with Config.Lease.Duration 0.
func (c *Core) initLeases(d CoreDeps, deps *route.Deps) error {
	m, err := lease.NewMetrics(d.Registerer)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if c.leases, err = lease.New(c.cfg.Lease, lease.Deps{Store: c.store, Peers: c.peers, Metrics: m, Logger: c.log}); err != nil {
		return err
	}
	deps.Leases = c.leases
	return nil
}

// Service is the request path: what the faces call, what the other
// members call, the console's queries.
func (c *Core) Service() *route.Service { return c.svc }

// Store is the node's limiter state.
func (c *Core) Store() *limiter.Store { return c.store }

// Ring is the ring this node routes by now.
func (c *Core) Ring() *ring.Ring { return c.own.View().Ring() }

// Waiting is how many partitions wait for other members to say they
// handed them over (ownership.View.Waiting).
func (c *Core) Waiting() int { return c.own.View().Waiting() }

// Restored reports whether the node restored counts from its data
// directory at this start: it advertises so (cluster.Config.Restored).
func (c *Core) Restored() bool { return len(c.restored.Files) > 0 }

// Membership takes the cluster's membership (every member it knows,
// with its state) to ownership. The cluster's notifier calls it.
func (c *Core) Membership(view []cluster.Member) {
	members := make([]ownership.Member, 0, len(view))
	for _, m := range view {
		members = append(members, ownershipMember(m))
	}
	c.own.Membership(members)
}

// Joined says the join has found the members and Membership has
// delivered them: until then every key waits, or is decided degraded.
// The replicas restored from the disk whose owners are not among them
// are promoted first (replica.Failover.TakeOverAbsent): a node up before
// the others after a restart of the whole cluster decides their keys
// from their counts, not from nothing.
func (c *Core) Joined() {
	if c.repl.failover != nil {
		c.repl.failover.TakeOverAbsent(c.Ring())
	}
	c.own.Joined()
}

// Boot names this process: the membership's metadata says it
// (cluster.Config.Boot), and so do its replications.
func (c *Core) Boot() string { return c.boot }

// Start starts the loops, each in the package whose work it is: the
// node's chores, the handoff sender, the rounds of changes to the backups
// and the disk, the failover's sweeps, the disk's syncs and snapshots,
// the budget leases' settlement. samples, if set, is sampled for the
// console every second.
func (c *Core) Start(samples sampler) {
	c.chores = &chores{store: c.store, capacity: &capacityReport{log: c.log, cfg: c.store.Config()}, sampler: samples, now: c.cfg.Now, log: c.log}
	if samples != nil {
		c.chores.sample()
		c.loops.Every(sampleInterval, c.chores.sample)
	}
	c.loops.Every(c.cfg.SweepInterval, c.chores.sweep)
	c.loops.Every(time.Second, c.chores.expireReservations)
	c.loops.Go(func(stop <-chan struct{}) { c.handoff.Serve(stop, c.cfg.HandoffInterval) })
	if c.leases != nil {
		c.loops.Every(c.leases.Duration()/4, func() { c.leases.Tend(context.Background(), c.cfg.Now()) })
	}
	if c.repl.sender != nil || c.disk != nil {
		c.loops.Every(c.cfg.Replication.Interval, c.changes.round)
	}
	if c.repl.failover != nil {
		c.loops.Every(c.cfg.SweepInterval, func() { c.repl.failover.Sweep(c.cfg.Now()) })
	}
	if c.disk != nil {
		c.loops.Go(c.disk.Serve)
	}
}

// StopLoops stops the loops and waits for them: from here on only the
// caller hands off.
func (c *Core) StopLoops() { c.loops.Stop() }

// Leaving gives up ownership: from now on this node owns nothing, what
// reaches it is forwarded to the heirs, and it takes no handoffs.
func (c *Core) Leaving() { c.own.Leaving() }

// leaving reports whether Leaving was called.
func (c *Core) leaving() bool { return c.own.View().Leaving() }

// HandOff hands every partition this node holds but does not own to its
// owner, and returns how many keys it could not.
func (c *Core) HandOff(ctx context.Context) int { return c.handoff.Run(ctx) }

// SettleLeases settles every budget lease this node holds with its
// owner: no call admits from them any more.
func (c *Core) SettleLeases(ctx context.Context) {
	if c.leases != nil {
		c.leases.SettleWithOwners(ctx, c.cfg.Now(), true)
	}
}

// CloseDisk writes what changed since the last round to the data
// directory, syncs and closes it; nothing without one. The graceful
// stop's last word, after its last handoff and the last call served.
func (c *Core) CloseDisk() error {
	if c.disk == nil {
		return nil
	}
	c.changes.flush()
	if err := c.disk.Close(); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// KeptOnDisk says what becomes of left keys a leaving node could not hand
// off: with a data directory they stay there, for its next start (every
// member may be stopping: a whole cluster stopped at once), which is no
// error; without one they are lost, which is.
func (c *Core) KeptOnDisk(left int) error {
	if c.disk == nil {
		return fmt.Errorf("%d keys could not be handed off after draining", left)
	}
	c.log.Warn("keys could not be handed off; they stay in the data directory for this node's next start", "keys", left)
	return nil
}

// Halt stops the ticks of ownership; with abandon, the data directory
// is left as a process killed now would leave it.
func (c *Core) Halt(abandon bool) {
	c.own.Stop()
	if abandon && c.disk != nil {
		c.disk.Abandon()
	}
}

// ownershipMember is m as ownership reads it.
func ownershipMember(m cluster.Member) ownership.Member {
	om := ownership.Member{ID: m.ID, Addr: m.GRPCAddr, Since: m.Since, Unconfirmed: m.Unconfirmed, Boot: m.Boot, Restored: m.Restored, CutOff: m.CutOff}
	switch m.State {
	case cluster.StateUnreachable:
		om.State = ownership.Unreachable
	case cluster.StateFailed:
		om.State = ownership.Failed
	case cluster.StateLeft:
		om.State = ownership.Left
	}
	return om
}

var _ route.Cluster = (*ownership.Tracker)(nil)

// ownershipEffects carries out the tracker's actions (ownership.Effects).
type ownershipEffects struct{ c *Core }

// Connect keeps a connection to each member.
func (e ownershipEffects) Connect(members []peer.Route) { e.c.conns.Update(members) }

// RingChanged promotes the replicas of partitions whose owner failed
// (replica.Failover.Reconcile), and counts the change.
func (e ownershipEffects) RingChanged(rc ownership.RingChanged) {
	if e.c.repl.failover != nil {
		members := make(map[string]replica.Member, len(rc.Members))
		for _, m := range rc.Members {
			members[m.ID] = replica.Member{Failed: m.State == ownership.Failed, Boot: m.Boot, Restored: m.Restored}
		}
		e.c.repl.failover.Reconcile(rc.Old, rc.New, members)
	}
	e.c.rings.Inc()
}

// HandOff wakes the handoff sender.
func (e ownershipEffects) HandOff() { e.c.handoff.Wake() }
