package ownership

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/peer"
)

// Effects carries out a Machine's actions for a Tracker.
//
// Concurrency: the Tracker calls these one at a time, under its lock, in
// the order a Step returned them; Connect before the view that routes to
// the members is published, the others after it. They must not call the
// Tracker's event methods (Membership, Joined, Leaving, HandoffDone),
// which would wait for that lock; they may read View.
type Effects interface {
	// Connect keeps connections to exactly members.
	Connect(members []peer.Route)
	// RingChanged follows a ring change: reconcile the replicas, count it.
	RingChanged(c RingChanged)
	// HandOff wakes the handoff sender; it must not block.
	HandOff()
}

// TrackerDeps is what a Tracker works with.
type TrackerDeps struct {
	// Effects carries out the actions. Nil: none (a Tracker in a test).
	Effects Effects
	// Now reads the clock the events are stamped with and the ticks
	// scheduled by: a local, monotonic one, never one that travels (the
	// waits and the share are this node's own durations). Nil: time.Now.
	Now func() time.Time
	// Logger receives a line per ring change, contest and wait given up.
	// Nil: slog.Default().
	Logger *slog.Logger
}

// Tracker drives a Machine for a node: the membership, the join, the
// leave and other members' HandoffDone become events; each Step's
// actions are carried out (Effects, the ticks, the log lines), and its
// view published, atomically, for the request path. Every method is safe
// for concurrent use; the reads (View and those over it) take no lock.
type Tracker struct {
	effects Effects
	now     func() time.Time
	log     *slog.Logger
	self    string

	mu      sync.Mutex // serialises Steps and their actions
	m       *Machine
	timer   *time.Timer // the next Tick; nil before the first WakeAt
	stopped bool

	view atomic.Pointer[View]
}

// NewTracker returns a Tracker over a new Machine: this node alone, not
// yet joined.
func NewTracker(cfg Config, deps TrackerDeps) (*Tracker, error) {
	m, err := New(cfg)
	if err != nil {
		return nil, err
	}
	t := &Tracker{effects: deps.Effects, now: deps.Now, log: deps.Logger, self: cfg.Self, m: m}
	if t.effects == nil {
		t.effects = noEffects{}
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	t.publish()
	return t, nil
}

// Membership steps on the membership as this node sees it now.
func (t *Tracker) Membership(members []Member) {
	t.step(func(now time.Time) Event { return Membership{Now: now, Members: members} })
}

// Joined steps on the join's end: the membership it found has been
// delivered.
func (t *Tracker) Joined() { t.step(func(time.Time) Event { return Joined{} }) }

// Leaving steps on this node's leave: it owns nothing from now on.
func (t *Tracker) Leaving() { t.step(func(time.Time) Event { return Leaving{} }) }

// HandoffDone steps on origin's word that it holds nothing of partitions
// it has not handed this node.
func (t *Tracker) HandoffDone(origin string, partitions []int) {
	t.step(func(time.Time) Event { return HandoffDone{From: origin, Partitions: partitions} })
}

// Stop stops the ticks; events are still taken. Safe to call twice.
func (t *Tracker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

// step applies the event made at the clock's now, carries out its actions
// and publishes the view it leaves.
func (t *Tracker) step(event func(now time.Time) Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	actions := t.m.Step(event(t.now()))
	for _, a := range actions {
		if c, ok := a.(Connect); ok {
			t.effects.Connect(c.Members)
		}
	}
	t.publish()
	for _, a := range actions {
		t.carryOut(a)
	}
}

// publish makes the machine's view the one the request path reads, if it
// is new, and wakes the checks waiting on the one it replaces. Requires
// t.mu held (or t not yet shared).
func (t *Tracker) publish() {
	v := t.m.View()
	old := t.view.Load()
	if old == v {
		return
	}
	if v.changed == nil {
		v.changed = make(chan struct{})
	}
	t.view.Store(v)
	if old != nil {
		close(old.changed)
	}
}

// carryOut does what an action (but Connect) says. Requires t.mu held.
func (t *Tracker) carryOut(a Action) {
	switch a := a.(type) {
	case RingChanged:
		t.log.Info("ring changed", "members", len(a.New.Members()), "partitions", a.New.Partitions()[t.self])
		t.effects.RingChanged(a)
	case HandOff:
		t.effects.HandOff()
	case Contested:
		if len(a.Gone) > 0 {
			t.log.Warn("members went out of the ring on this node's evidence alone; its answers are marked degraded until they return or a majority confirms them gone",
				"members", a.Gone)
		} else {
			t.log.Info("no member out of the ring on this node's evidence alone any more; answers no longer marked degraded")
		}
	case Isolated:
		if a.On {
			t.log.Warn("back from the data directory and alone: no seed answered; every answer is marked degraded until another member is in the ring (the others hold counts this node lacks)")
		} else {
			t.log.Info("another member is in the ring; answers no longer marked degraded for being alone")
		}
	case CutOff:
		if a.On {
			t.log.Warn("this node's probes of the others fail and nobody answers for them: it is likely cut off, and the others may take its keys over; every answer is marked degraded until its probes succeed again")
		} else {
			t.log.Info("this node's probes succeed again; answers no longer marked degraded for being cut off")
		}
	case GaveUp:
		t.log.Warn("gave up waiting for members to say they handed over partitions; answering them undegraded", "partitions", a.Partitions)
	case WakeAt:
		t.wakeAt(a.At)
	}
}

// wakeAt schedules the Tick for at. Requires t.mu held.
func (t *Tracker) wakeAt(at time.Time) {
	if t.stopped {
		return
	}
	d := max(at.Sub(t.now()), 0)
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.tick)
		return
	}
	t.timer.Reset(d)
}

// tick steps on the time, unless stopped.
func (t *Tracker) tick() {
	t.mu.Lock()
	stopped := t.stopped
	t.mu.Unlock()
	if !stopped {
		t.step(func(now time.Time) Event { return Tick{Now: now} })
	}
}

// View returns the current view: one atomic load.
func (t *Tracker) View() *View { return t.view.Load() }

// Owner, Heir, Members, Share, Contested and Settling read the current
// view (route.Cluster).

// Owner returns key's owner in the current view (View.Owner).
func (t *Tracker) Owner(key string) peer.Route { return t.View().Owner(key) }

// Heir returns key's heir in the current view (View.Heir).
func (t *Tracker) Heir(key string) (peer.Route, bool) { return t.View().Heir(key) }

// Members returns the ring's members in the current view.
func (t *Tracker) Members() []peer.Route { return t.View().Members() }

// Share returns the current view's share (View.Share).
func (t *Tracker) Share() (live, known int) { return t.View().Share() }

// Contested reports whether an answer for key decided here is contested
// in the current view (View.Contested).
func (t *Tracker) Contested(key string) bool { return t.View().Contested(key) }

// Settling returns, if a check of key should wait before it is decided
// here (View.Settling), a channel closed when the view changes; nil
// otherwise.
func (t *Tracker) Settling(key string) <-chan struct{} {
	v := t.View()
	if !v.Settling(key) {
		return nil
	}
	return v.Changed()
}

type noEffects struct{}

func (noEffects) Connect([]peer.Route)    {}
func (noEffects) RingChanged(RingChanged) {}
func (noEffects) HandOff()                {}
