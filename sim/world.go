package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/testkit/crashfs"
	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	jepsenlite "github.com/peerlimit/peerlimit/jepsen-lite"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/ring"
)

// World is one simulated cluster: its members, the network between them
// (peer calls over memnet, gossip over cluster.MemNetwork, both decided by
// memnet's faults), each member's clock and disk, and what the checker
// needs of the run (when each member was up, the steps, the views).
// It lives in one synctest bubble. Its methods are called from the
// run's goroutine, except those the workload uses (target), which are
// safe for concurrent use.
type World struct {
	plan   Plan
	start  time.Time
	net    *memnet.Network
	gossip *cluster.MemNetwork
	log    *slog.Logger

	mu      sync.Mutex
	members map[string]*member
	disks   map[string]*crashfs.FS // kept across restarts
	cut     map[[2]string]bool     // both ways, for the expectation
	addrs   map[string]string      // every member started, by id: its gossip address
	paused  map[string]bool
	faulty  bool                     // a link fault is on (slowLink), until the heal
	resumed map[string]chan struct{} // closed when a paused member resumes
	up      map[string][]jepsenlite.Span
	events  []jepsenlite.Event
	views   []jepsenlite.View
}

// member is one running node: its Core over the world's networks, and its
// membership.
type member struct {
	id      string
	core    *node.Core
	cluster *cluster.Cluster
}

func newWorld(p Plan, logOut io.Writer, level slog.Level) *World {
	net := memnet.New(p.Seed, 500*time.Millisecond)
	return &World{plan: p, start: time.Now(), net: net, gossip: cluster.NewMemNetwork(net),
		log:     slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		members: map[string]*member{}, disks: map[string]*crashfs.FS{}, cut: map[[2]string]bool{},
		paused: map[string]bool{}, resumed: map[string]chan struct{}{}, up: map[string][]jepsenlite.Span{},
		addrs: map[string]string{}}
}

func (w *World) now() time.Duration { return time.Since(w.start) }

// config is member id's node configuration: the local profile's, with the
// plan's settings, a data directory on its simulated disk, and its clock.
func (w *World) config(id string) node.Config {
	cfg := node.DefaultLocalConfig(id)
	cfg.Replication.Interval = w.plan.ReplicationInterval
	cfg.Lease.MinRate = w.plan.LeaseMinRate
	cfg.Route.Fallback = w.plan.fallback()
	cfg.Persist.Dir = "/data/" + id
	cfg.Logger = w.log
	cfg.Now = wallclock.Steady(faultclock.New(w.plan.Clocks[id], wallclock.System()), wallclock.DefaultMaxSlew)
	return cfg
}

// startMember starts member id on its disk (a new one the first time),
// joined through the members up, as node.Start does: served before it
// joins, its ring the members' from the join on. Until the join is done,
// each membership its gossip delivers reaches its node lag late
// (startSlow).
func (w *World) startMember(id string, lag time.Duration) error {
	w.mu.Lock()
	fs := w.disks[id]
	if fs == nil {
		fs = crashfs.New()
		w.disks[id] = fs
	}
	// The seeds are every member this world started, up or not, as a
	// deployment's list of peers is: after a restart of the whole
	// cluster the first one back finds none of them up.
	var seeds []string
	for other, addr := range w.addrs {
		if other != id {
			seeds = append(seeds, addr)
		}
	}
	slices.Sort(seeds)
	w.mu.Unlock()
	cfg := w.config(id)
	cfg.Join = seeds
	peers := w.net.Join(id)
	core, err := node.NewCore(cfg, node.CoreDeps{Addr: id + ":9090", Peers: peers, FS: fs})
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	peers.Serve(core.Service().Peer)
	var joined atomic.Bool
	onChange := func(view []cluster.Member) {
		if lag > 0 && !joined.Load() {
			time.Sleep(lag)
		}
		core.Membership(view)
	}
	c, err := cluster.Start(cluster.Config{ID: id, GRPCAddr: id + ":9090", Network: w.gossip, Join: seeds,
		Profile: cluster.ProfileLocal, Restored: core.Restored(), Boot: core.Boot(), Logger: w.log.With("node", id), OnChange: onChange})
	if err != nil {
		core.Halt(true)
		return fmt.Errorf("join %s: %w", id, err)
	}
	c.Sync() // the join's members, through the notifier: never after a newer view
	core.Joined()
	joined.Store(true)
	core.Start(nil)
	w.mu.Lock()
	w.members[id] = &member{id: id, core: core, cluster: c}
	w.addrs[id] = c.GossipAddr()
	w.up[id] = append(w.up[id], jepsenlite.Span{From: w.now()})
	w.mu.Unlock()
	return nil
}

// slowJoin is how a start's join is slowed (Step): its links' latency
// while it joins, and how far its node's membership lags its gossip.
type slowJoin struct {
	Delay, Jitter, Lag time.Duration
}

// startSlow starts member id as startMember does, its join slowed as a
// real one is. Its links to and from every member carry j.Delay (±
// j.Jitter) until its join is done: a join takes a round trip per seed,
// and the first seed reached has id in its ring, and forwards it checks,
// while id still joins the others (memberlist's push-pull over
// cluster.MemNetwork pays the delay once per connection, the peer calls
// once each). And until then every membership id's gossip delivers
// reaches its node j.Lag late, as a process starting under load runs
// its notifier behind its gossip: over instant pipes both ends of a
// push-pull learn of each other at the same instant, and the seed's
// forwards could never reach id before id's ring held the members. With
// another link fault on (the plans never overlap faults), only the lag.
func (w *World) startSlow(id string, j slowJoin) error {
	w.mu.Lock()
	slow := j.Delay > 0 && !w.faulty && len(w.cut) == 0
	w.mu.Unlock()
	if !slow {
		return w.startMember(id, j.Lag)
	}
	others := w.everyone()
	f := memnet.Faults{Delay: j.Delay, Jitter: j.Jitter}
	for _, o := range others {
		if o != id {
			w.net.SetFaults(id, o, f)
			w.net.SetFaults(o, id, f)
		}
	}
	err := w.startMember(id, j.Lag)
	for _, o := range others {
		if o != id {
			w.net.SetFaults(id, o, memnet.Faults{})
			w.net.SetFaults(o, id, memnet.Faults{})
		}
	}
	return err
}

// kill stops member id at once, as kill -9 does: no leave, no handoff;
// its disk keeps what it wrote (powerLoss: only what it synced).
func (w *World) kill(id string, powerLoss bool) {
	m := w.take(id)
	if m == nil {
		return
	}
	w.net.Remove(id)
	_ = m.cluster.Shutdown()
	m.core.StopLoops()
	m.core.Halt(true)
	w.mu.Lock()
	if powerLoss {
		w.disks[id] = w.disks[id].Crash()
	} else {
		w.disks[id] = w.disks[id].Kill()
	}
	w.mu.Unlock()
}

// leave stops member id gracefully, as node.Node.Shutdown does.
func (w *World) leave(id string) {
	m := w.take(id)
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.core.StopLoops()
	m.core.Leaving()
	_ = m.cluster.Leave(ctx)
	m.core.HandOff(ctx)
	w.net.Remove(id) // as the gRPC server's graceful stop: new calls refused, those under way answered
	m.core.SettleLeases(ctx)
	if left := m.core.HandOff(ctx); left > 0 {
		_ = m.core.KeptOnDisk(left)
	}
	_ = m.core.CloseDisk()
	_ = m.cluster.Shutdown()
	m.core.Halt(false)
	w.mu.Lock()
	w.disks[id] = w.disks[id].Kill() // the process ends: its files as written
	w.mu.Unlock()
}

// take removes member id from those up, and ends its up span.
func (w *World) take(id string) *member {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.members[id]
	if m == nil {
		return nil
	}
	delete(w.members, id)
	if spans := w.up[id]; len(spans) > 0 {
		spans[len(spans)-1].To = w.now()
	}
	return m
}

// target returns a member up to send a check to, by r's draw; nil if
// none is.
func (w *World) target(pick func(n int) int) *member {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.members) == 0 {
		return nil
	}
	ids := make([]string, 0, len(w.members))
	for id := range w.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return w.members[ids[pick(len(ids))]]
}

// pause stops member id from acting, as SIGSTOP does, as far as the
// others can tell: its calls and gossip wait or are lost (memnet).
func (w *World) pause(id string, on bool) {
	if on {
		w.net.Pause(id)
	} else {
		w.net.Resume(id)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused[id] = on
	if ch := w.resumed[id]; on && ch == nil {
		w.resumed[id] = make(chan struct{})
	} else if !on && ch != nil {
		close(ch)
		delete(w.resumed, id)
	}
}

// awaitResumed holds a client's call to a paused member until it resumes
// or ctx ends (false): a stopped process answers nobody, its clients
// included.
func (w *World) awaitResumed(ctx context.Context, id string) bool {
	w.mu.Lock()
	ch := w.resumed[id]
	w.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// cutLink cuts a link both ways, as a partition or a bridge does.
func (w *World) cutLink(a, b string) {
	w.net.Cut(a, b)
	w.net.Cut(b, a)
	w.mu.Lock()
	w.cut[pairOf(a, b)] = true
	w.mu.Unlock()
}

// heal ends every link fault (not a pause).
func (w *World) heal() {
	w.mu.Lock()
	paused := []string{}
	for id, p := range w.paused {
		if p {
			paused = append(paused, id)
		}
	}
	w.cut = map[[2]string]bool{}
	w.faulty = false
	w.mu.Unlock()
	w.net.Heal() // which resumes the paused too: pause them again
	for _, id := range paused {
		w.net.Pause(id)
	}
}

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// event records a step that began at begin for the checker: the cluster
// must converge to the sides the network leaves now
// (jepsenlite.Expectation), each side one decider once it has.
func (w *World) event(name string, fault bool, begin time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var obs []string
	for id := range w.members {
		if !w.paused[id] {
			obs = append(obs, id)
		}
	}
	slices.Sort(obs)
	expect, sides := jepsenlite.Expectation(obs, func(a, b string) bool { return w.cut[pairOf(a, b)] })
	steady := 0
	for _, s := range sides {
		steady = max(steady, s+1)
	}
	if n := len(w.events); n > 0 {
		w.events[n-1].End = begin
	}
	w.events = append(w.events, jepsenlite.Event{Name: name, Begin: begin, End: w.now(), Steady: max(steady, 1), Fault: fault,
		Expect: expect, Sides: sides})
}

// sample records every member's view, as jepsen-lite's monitor asks for
// it: a paused member does not answer.
func (w *World) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for id, m := range w.members {
		v := jepsenlite.View{Node: id, Asked: now, Got: now}
		if w.paused[id] {
			v.Failed = true
		} else {
			for _, cm := range m.cluster.View() {
				if cm.State == cluster.StateAlive || cm.State == cluster.StateUnreachable {
					v.Alive = append(v.Alive, cm.ID)
				}
			}
			slices.Sort(v.Alive)
			v.Ring = ringPrint(m.core.Ring())
		}
		w.views = append(w.views, v)
	}
}

// ringPrint is a fingerprint of a ring's owners, comparable across
// members.
func ringPrint(r *ring.Ring) uint64 {
	h := fnv.New64a()
	for p := range r.PartitionCount() {
		h.Write([]byte(r.PartitionOwner(p).ID))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// stopAll stops every member at the end of the run, gracefully, and lets
// what they leave running (memberlist's last probes) end.
func (w *World) stopAll() {
	w.mu.Lock()
	var ids []string
	for id := range w.members {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		w.kill(id, false)
	}
	w.net.Close()
	time.Sleep(5 * time.Second) // memberlist's probes outlive Shutdown by a timeout
}
