package ownership

import (
	"time"

	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// State is a member's state as the membership reports it.
type State uint8

const (
	// Alive: in the ring (also while merely suspected by gossip).
	Alive State = iota
	// Unreachable: declared dead by this node's failure detector alone,
	// and kept in the ring while the others are asked whether they reach
	// it (package cluster's agreement).
	Unreachable
	// Failed: out of the ring, declared dead (Member.Unconfirmed: on this
	// node's evidence alone).
	Failed
	// Left: out of the ring, left gracefully; it hands its partitions off
	// as it goes.
	Left
)

func (s State) String() string {
	return [...]string{"alive", "unreachable", "failed", "left"}[min(int(s), 3)]
}

// inRing reports whether a member in state s owns partitions.
func (s State) inRing() bool { return s == Alive || s == Unreachable }

// Member is one member as the membership reports it.
type Member struct {
	ID string
	// Addr is where its gRPC API listens; a member without one owns
	// nothing (it cannot be called).
	Addr  string
	State State
	// Since is when a failed member was declared dead: it counts in the
	// share of FallbackShare for Config.ShareFor from then.
	Since time.Time
	// Unconfirmed marks a failed member taken out of the ring on this
	// node's evidence alone: it may be alive on the other side of a
	// partition, deciding its keys, so this node's answers are contested.
	Unconfirmed bool
	// Boot names the member's process: it changes when it restarts.
	// Empty: a version that does not say.
	Boot string
	// Restored: at that boot the member restored its counts from its
	// disk (--data-dir).
	Restored bool
	// CutOff (this node's own entry only): its failure detector finds it
	// is likely the member cut off. Its probes of others fail and the
	// members it asked to probe for it send no word back (memberlist's
	// Lifeguard health score above zero). The others may be about to
	// take its keys over, so its answers are contested.
	CutOff bool
}

// Event is what the Machine steps on: Membership, Joined, Leaving,
// HandoffDone, Tick.
type Event interface{ isEvent() }

// Membership is the membership as this node sees it now: every member it
// knows of (live, doubted, failed, left), this node among them. Level-
// triggered: each one replaces the last.
type Membership struct {
	Now     time.Time // when it was read, on the clock of Tick
	Members []Member
}

// Joined says the join has found the members and a Membership has
// delivered them: until it, this node's ring is itself alone, and every
// key waits for it (View.Settling) or is contested.
type Joined struct{}

// Leaving says this node leaves the cluster: from now on it owns nothing,
// and hands every partition off.
type Leaving struct{}

// HandoffDone says From holds nothing of Partitions that it has not handed
// this node (handoff.Sender's round ends with one to each owner).
type HandoffDone struct {
	From       string
	Partitions []int
}

// Tick says time has passed: a wait for handoffs may have run out, and a
// failed member may no longer count in the share. The driver sends one at
// every WakeAt.
type Tick struct{ Now time.Time }

func (Membership) isEvent()  {}
func (Joined) isEvent()      {}
func (Leaving) isEvent()     {}
func (HandoffDone) isEvent() {}
func (Tick) isEvent()        {}

// Action is what a Step asks the driver to carry out, in order: Connect,
// RingChanged, HandOff, Contested, Isolated, CutOff, GaveUp, WakeAt.
type Action interface{ isAction() }

// Connect: keep connections to exactly these members (this node among
// them), every one the ring may route to. Carried out before the view that
// routes to them is published.
type Connect struct{ Members []peer.Route }

// RingChanged: the ring moved from Old to New. The driver reconciles the
// replicas this node keeps (a partition whose owner failed may be
// promoted: replica.Failover.Reconcile), and counts and logs the change.
type RingChanged struct {
	Old, New *ring.Ring
	// Members is the membership the change follows.
	Members []Member
}

// Failed returns the members gossip declared dead (not those that left).
func (c RingChanged) Failed() map[string]bool {
	out := map[string]bool{}
	for _, m := range c.Members {
		if m.State == Failed {
			out[m.ID] = true
		}
	}
	return out
}

// HandOff: wake the handoff sender. State this node holds may belong to
// another member now.
type HandOff struct{}

// Contested: whether this node's answers rest on its own evidence alone
// changed. Gone are the members out of the ring unconfirmed (none: no
// longer contested).
type Contested struct{ Gone []string }

// Isolated: this node, back from its disk and expecting company
// (Config.Rejoining), joined alone (On), or has another member in its
// ring at last (not On). While it is, every answer is contested.
type Isolated struct{ On bool }

// CutOff: this node's failure detector finds it is likely cut off from
// the others (On), or no longer (not On); see Member.CutOff. While it is,
// every answer is contested.
type CutOff struct{ On bool }

// GaveUp: partitions stopped waiting for members that never said they
// handed them over (Config.MaxWait): they are decided undegraded from now.
type GaveUp struct{ Partitions int }

// WakeAt: send a Tick at or after At. A later WakeAt replaces it.
type WakeAt struct{ At time.Time }

func (Connect) isAction()     {}
func (RingChanged) isAction() {}
func (HandOff) isAction()     {}
func (Contested) isAction()   {}
func (Isolated) isAction()    {}
func (CutOff) isAction()      {}
func (GaveUp) isAction()      {}
func (WakeAt) isAction()      {}
