// Package ownership decides, as this node sees it, which member decides
// each key: the ring built from the membership, which partitions wait for
// their state after a ring change, which keys stay for a moment with the
// member that decided them while this node was out of the ring, whether
// this node's answers rest on its evidence alone, and the share of the
// limit FallbackShare holds it to.
//
// Its core is a pure state machine (Machine): events in (a membership, the
// join done, this node leaving, a member's HandoffDone, a tick of time),
// a new View and actions out (connect to members, follow a ring change,
// hand off, log a contest or a wait given up, wake me at). It has no
// goroutines, locks or clocks; the Tracker drives it for a node, feeding
// it events, publishing its views atomically for the request path and
// carrying out its actions. Its behaviour is pinned by the transcripts
// under testdata/, read as a story.
package ownership

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// Config is what a Machine decides by.
type Config struct {
	// Self is this node's id. Required.
	Self string
	// Addr is this node's gRPC address, its route in its first ring.
	Addr string
	// Ring builds each ring; Partitions is their partition count (the
	// store's). Partitions is required.
	Ring       ring.Config
	Partitions int
	// ShareFor is how long a failed member still counts among the members
	// this node knows (View.Share). Zero: not at all.
	ShareFor time.Duration
	// MaxWait bounds how long a partition waits for members to say they
	// handed it over: a member that never does (an older version) stops
	// being waited for. Required (the node's is 2 × its handoff interval).
	MaxWait time.Duration
	// Holdings is read by the views, never by Step: whether this node
	// holds state of a partition that waits (View.Owner). Nil: nothing.
	Holdings Holdings
	// Rejoining: this node restored counts from its disk, and has seeds
	// to join: the cluster it was part of holds counts too. If its join
	// finds nobody (a restart of the whole cluster: the others are not
	// back yet), it decides every key from what it holds alone, and its
	// answers are contested (marked degraded) until another member is in
	// its ring.
	Rejoining bool
}

// Validate reports what is missing or unusable.
func (c Config) Validate() error {
	var errs []error
	if c.Self == "" {
		errs = append(errs, errors.New("ownership: Config.Self must not be empty"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("ownership: Config.Partitions must be ≥ 1, got %d", c.Partitions))
	}
	if c.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("ownership: Config.MaxWait must be positive, got %v", c.MaxWait))
	}
	if c.ShareFor < 0 {
		errs = append(errs, fmt.Errorf("ownership: Config.ShareFor must not be negative, got %v", c.ShareFor))
	}
	return errors.Join(append(errs, c.Ring.Validate())...)
}

// Machine is ownership's pure core. Step takes one event and returns what
// to do; View is the result. Not safe for concurrent use: one driver
// steps it (Tracker, under its lock).
type Machine struct {
	cfg     Config
	members []Member // the last Membership
	now     time.Time
	joined  bool
	leaving bool
	ring    *ring.Ring
	without *ring.Ring // see View.without
	waits   waits
	gone    []string // out of the ring unconfirmed, sorted
	// isolated: back from its disk, joined alone (Config.Rejoining), and
	// no other member in its ring since.
	isolated bool
	// cutOff: this node's own entry in the membership says it is likely
	// cut off (Member.CutOff).
	cutOff bool
	live   int
	known  int
	wake   time.Time // the last WakeAt asked
	view   *View     // the current view; nil when a Step changed it
}

// New returns a Machine in which this node is alone, not yet joined.
func New(cfg Config) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Holdings == nil {
		cfg.Holdings = noHoldings{}
	}
	alone, err := ring.New(cfg.Ring, cfg.Partitions, []ring.Member{{ID: cfg.Self, Addr: cfg.Addr}})
	if err != nil {
		return nil, fmt.Errorf("ownership: %w", err)
	}
	return &Machine{cfg: cfg, ring: alone, waits: newWaits(), live: 1, known: 1}, nil
}

// Step applies ev and returns the actions it calls for, in the order to
// carry them out. The View changes only by Step.
func (m *Machine) Step(ev Event) []Action {
	var out []Action
	switch e := ev.(type) {
	case Membership:
		m.now, m.members = e.Now, slices.Clone(e.Members)
		out = m.follow()
	case Joined:
		m.set(&m.joined, true)
		if m.cfg.Rejoining && len(m.ring.Members()) == 1 {
			out = m.isolate(true)
		}
	case Leaving:
		m.set(&m.leaving, true)
		out = m.follow()
	case HandoffDone:
		if m.waits.markDone(e.From, e.Partitions) {
			m.settled()
		}
	case Tick:
		m.now = e.Now
		out = m.tick()
	}
	return m.wakeAt(out)
}

// View returns the current view.
func (m *Machine) View() *View {
	if m.view == nil {
		m.view = &View{self: m.cfg.Self, ring: m.ring, without: m.without,
			waiting: m.waits.partitions(m.cfg.Partitions), nwaiting: m.waits.count(),
			contested: len(m.gone) > 0 || m.isolated || m.cutOff, joined: m.joined, leaving: m.leaving,
			live: m.live, known: m.known, holds: m.cfg.Holdings}
	}
	return m.view
}

// follow follows the membership (or this node's leave): connections, the
// share, the ring and what its change calls for, the contest, a handoff.
// A membership in which no member can own anything (this node leaving,
// alone) keeps the last ring.
func (m *Machine) follow() []Action {
	members, routes := m.ringMembers()
	if len(members) == 0 {
		return nil
	}
	next, err := ring.New(m.cfg.Ring, m.cfg.Partitions, members)
	if err != nil {
		return nil // not with a valid Config and members: New checked both
	}
	out := []Action{Connect{Members: routes}}
	m.recount()
	if old := m.ring; !old.Equal(next) {
		out = append(out, m.moveTo(old, next))
	}
	if a, changed := m.recontest(); changed {
		out = append(out, a)
	}
	if cut := m.selfCutOff(); cut != m.cutOff {
		m.set(&m.cutOff, cut)
		out = append(out, CutOff{On: cut})
	}
	if m.isolated && len(members) > 1 {
		out = append(out, m.isolate(false)...)
	}
	return append(out, HandOff{})
}

// isolate notes whether this node, back from its disk, is alone in its
// ring when it expected company (Config.Rejoining): its answers rest on
// its counts alone, without the others'.
func (m *Machine) isolate(on bool) []Action {
	m.set(&m.isolated, on)
	return []Action{Isolated{On: on}}
}

// ringMembers returns the members that own partitions: those in the ring
// with an address, this node but while it leaves.
func (m *Machine) ringMembers() ([]ring.Member, []peer.Route) {
	var members []ring.Member
	var routes []peer.Route
	for _, mb := range m.members {
		if !mb.State.inRing() || mb.Addr == "" || (mb.ID == m.cfg.Self && m.leaving) {
			continue
		}
		members = append(members, ring.Member{ID: mb.ID, Addr: mb.Addr})
		routes = append(routes, peer.Route{ID: mb.ID, Addr: mb.Addr})
	}
	return members, routes
}

// moveTo swaps in the ring next: the partitions this node gained, and
// those every added member may have decided meanwhile, wait for their
// state; the ring without this node is kept for them if it has just
// joined.
func (m *Machine) moveTo(old, next *ring.Ring) Action {
	m.ring, m.view = next, nil
	m.waits.expect(m.cfg.Self, next, m.gained(old, next), added(old, next), m.leavers(old, next), m.now, m.cfg.MaxWait)
	m.refreshWithout(next, len(old.Members()) == 1 || m.without != nil)
	return RingChanged{Old: old, New: next, Members: slices.Clone(m.members)}
}

// gained returns the partitions this node owns in next and did not in old.
func (m *Machine) gained(old, next *ring.Ring) []int {
	var out []int
	for p := range next.PartitionCount() {
		if next.PartitionOwner(p).ID == m.cfg.Self && old.PartitionOwner(p).ID != m.cfg.Self {
			out = append(out, p)
		}
	}
	return out
}

// added returns the members of next not in old.
func added(old, next *ring.Ring) []string {
	var out []string
	for _, mb := range next.Members() {
		if !slices.ContainsFunc(old.Members(), func(o ring.Member) bool { return o.ID == mb.ID }) {
			out = append(out, mb.ID)
		}
	}
	return out
}

// leavers returns the members of old that are not in next because they
// left gracefully: they hand their partitions off as they go.
func (m *Machine) leavers(old, next *ring.Ring) []string {
	var out []string
	for _, o := range old.Members() {
		in := slices.ContainsFunc(next.Members(), func(n ring.Member) bool { return n.ID == o.ID })
		if !in && m.state(o.ID) == Left {
			out = append(out, o.ID)
		}
	}
	return out
}

// state returns id's state in the last membership; Alive for one it does
// not list.
func (m *Machine) state(id string) State {
	for _, mb := range m.members {
		if mb.ID == id {
			return mb.State
		}
	}
	return Alive
}

// refreshWithout keeps the ring without this node while partitions wait
// for their state after it joined (it was alone in its ring: it has just
// started, or restarted; justJoined also while it still waits since, as
// the others come into its ring one by one), for View.Owner; it drops it
// otherwise. After a member left, the state of the partitions it had
// comes from it, and a check waits for it here (View.Settling) instead.
func (m *Machine) refreshWithout(next *ring.Ring, justJoined bool) {
	var rest []ring.Member
	for _, mb := range next.Members() {
		if mb.ID != m.cfg.Self {
			rest = append(rest, mb)
		}
	}
	m.without = nil
	if !justJoined || m.waits.count() == 0 || len(rest) == 0 {
		return
	}
	m.without, _ = ring.New(m.cfg.Ring, m.cfg.Partitions, rest) // cannot fail: valid config, members
}

// recount counts the members for the share: live ones (in the ring), and
// those that failed within ShareFor of now.
func (m *Machine) recount() {
	live, failed := 0, 0
	for _, mb := range m.members {
		switch {
		case mb.State.inRing():
			live++
		case mb.State == Failed && m.now.Sub(mb.Since) < m.cfg.ShareFor:
			failed++
		}
	}
	live = max(live, 1)
	m.setInt(&m.live, live)
	m.setInt(&m.known, live+failed)
}

// selfCutOff reports whether this node's own entry in the membership says
// it is likely cut off.
func (m *Machine) selfCutOff() bool {
	for _, mb := range m.members {
		if mb.ID == m.cfg.Self {
			return mb.CutOff
		}
	}
	return false
}

// recontest notes the members out of the ring unconfirmed; changed when
// whether there are any changed.
func (m *Machine) recontest() (Contested, bool) {
	var gone []string
	for _, mb := range m.members {
		if mb.State == Failed && mb.Unconfirmed {
			gone = append(gone, mb.ID)
		}
	}
	slices.Sort(gone)
	was := len(m.gone) > 0
	m.gone = gone
	if was == (len(gone) > 0) {
		return Contested{}, false
	}
	m.view = nil
	return Contested{Gone: gone}, true
}

// settled follows partitions that stopped waiting. Once none waits, the
// join's wait is over: the ring without this node goes, or a later ring
// change (a member leaving, say) would take this node for one still
// joining and send the partitions it gains to the member that held them
// before it, which holds nothing of them (the leaver hands them here),
// rather than have their checks wait for the leaver's handoff.
func (m *Machine) settled() {
	m.view = nil
	if m.waits.count() == 0 {
		m.without = nil
	}
}

// tick gives up waits whose time has come, and recounts the share.
func (m *Machine) tick() []Action {
	var out []Action
	if n := m.waits.giveUp(m.now); n > 0 {
		m.settled()
		out = append(out, GaveUp{Partitions: n})
	}
	m.recount()
	return out
}

// wakeAt appends a WakeAt when the next moment something changes by
// itself (a wait given up, a failure aging out of the share) is not the
// one last asked for.
func (m *Machine) wakeAt(out []Action) []Action {
	next, ok := m.waits.deadline()
	for _, mb := range m.members {
		if mb.State != Failed || m.cfg.ShareFor <= 0 {
			continue
		}
		if end := mb.Since.Add(m.cfg.ShareFor); end.After(m.now) && (!ok || end.Before(next)) {
			next, ok = end, true
		}
	}
	if !ok || next.Equal(m.wake) {
		return out
	}
	m.wake = next
	return append(out, WakeAt{At: next})
}

func (m *Machine) set(f *bool, v bool) {
	if *f != v {
		*f, m.view = v, nil
	}
}

func (m *Machine) setInt(f *int, v int) {
	if *f != v {
		*f, m.view = v, nil
	}
}
