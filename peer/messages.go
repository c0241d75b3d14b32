package peer

import (
	"time"

	"github.com/peerlimit/peerlimit/limiter"
)

// Result is the answer to one check: a decision and who made it, or why
// there is none.
type Result struct {
	Decision limiter.Decision
	Owner    string
	// Degraded marks an answer not given by the key's owner: a fallback
	// policy's, or an heir's from the owner's replica.
	Degraded bool
	Err      error
	// Via says how the node that received the request answered it: for
	// tests, the simulation and logs; not sent between members.
	Via Via
}

// Via is the way a request was answered, as the node that received it
// took it (route's chain).
type Via uint8

// The ways, in the order route's chain tries them.
const (
	ViaNone     Via = iota // not said (a member's answer to a forward)
	ViaHere                // this node owns the key and decided it
	ViaLease               // admitted from a budget lease this node holds
	ViaForward             // its owner decided it
	ViaRelay               // another member took it to the owner, or decided it as its heir
	ViaHeir                // this node decided it from the owner's replica
	ViaFallback            // the fallback policy answered
)

func (v Via) String() string {
	return [...]string{"", "here", "lease", "forward", "relay", "heir", "fallback"}[min(int(v), 6)]
}

// ResetRequest selects the state a reset clears: one limit of a key (its
// window and algorithm), or every limit of it.
type ResetRequest struct {
	Key        string
	Window     time.Duration // ignored with AllWindows
	Algorithm  limiter.Algorithm
	Calendar   limiter.Calendar // a calendar limit's, instead of Window
	AllWindows bool
}

// Handoff is what a member hands another in one call: the states of
// keys whose partitions the receiver owns.
type Handoff struct {
	// Sent is the sender's clock when it made the call, after it took
	// States, whose times are on that clock: the receiver moves them onto
	// its own by its clock at arrival minus Sent (limiter.Rebase) before
	// anything else sees them. Zero: a sender from before the stamp (a
	// rolling upgrade), whose states are taken as they are.
	Sent   time.Time
	States []limiter.KeyState
}

// Replication is what an owner sends its backup in one call.
type Replication struct {
	// Sent is the owner's clock when it made the call, as Handoff.Sent:
	// the backup rebases States onto its own clock on arrival, and keeps
	// (and journals) them so, with Sent zero.
	Sent time.Time
	// Whole lists the partitions whose whole state starts with this call:
	// the backup first drops what it held of them (it is new, or it
	// missed changes).
	Whole []int
	// States are the keys' current states; an empty one (no counts, no
	// log) says the key is gone.
	States []limiter.KeyState
	// Boot is the sender's (cluster.Member.Boot): the process the
	// replica is of. Empty: a sender that does not say.
	Boot string
}

// Replicated is a backup's answer to a Replication.
type Replicated struct {
	// Kept is how many states it kept (the rest: over its replica cap).
	Kept int
	// Unsynced lists the partitions of the call's states of which the
	// backup holds no whole copy from the sender (it restarted, restored
	// them from its disk, or dropped them): the sender sends them whole
	// in its next round.
	Unsynced []int
	// Boot is the backup's (cluster.Member.Boot): when it changes, the
	// backup restarted, and every partition goes whole again.
	Boot string
}

// LeaseWant is the lease a holder asks for: Hits of one limit, for
// Duration from when it asked (a duration, never a time: the members'
// clocks need not agree). The owner may lend fewer hits and a shorter
// lease. A zero Duration is a member's from before durations were asked
// for: the owner's lease.Config.Duration.
type LeaseWant struct {
	Hits     int64
	Duration time.Duration
}

// LeaseGrant is what an owner lends: Hits of one limit, usable for
// Duration from when the holder asked. A zero ID lends nothing.
type LeaseGrant struct {
	ID       uint64
	Hits     int64
	Duration time.Duration
	// The owner's times for the key right after the grant, for the
	// holder's answers (run down as the lease ages).
	ResetAfter, RefillAfter time.Duration
}

// LeaseUse is a holder's settlement of one lease: how many hits it
// admitted and, for the log, when, as offsets from when it asked.
type LeaseUse struct {
	ID      uint64
	Used    int64
	Offsets []time.Duration
}

// LeaseInfo is a lease lent on a key, for inspection.
type LeaseInfo struct {
	Holder    string
	Hits      int64
	ExpiresIn time.Duration
}

// InspectQuery is an inspection a member asks of a key's owner, any
// policy already resolved to numbers. Limit and Hits are optional (0: no
// next-allow time).
type InspectQuery struct {
	Key         string
	Limit, Hits int64
}

// OwnerView is what a key's owner reads of it for an inspection.
type OwnerView struct {
	Limits []limiter.KeyView
	// Leases are the budget leases the owner has lent on the key.
	Leases []LeaseInfo
	// Reservations are the reservations open on the key.
	Reservations []limiter.OpenReservation
}

// ReportRequest asks a member for what the console shows of it.
type ReportRequest struct {
	// Since: only samples newer than it; zero for every one kept.
	Since time.Time
	// Top is the length of the hot-key lists; 0: none.
	Top int
}

// Report is a member's sampled rates and its hot keys.
type Report struct {
	Samples []Sample
	HotKeys limiter.HotKeys
}

// Sample is one second of a member's request path, as rates per second
// (package console samples them from the node's metrics).
type Sample struct {
	Time                              time.Time
	LocalAllowed, LocalDenied         float64
	ForwardedAllowed, ForwardedDenied float64
	FallbackAllowed, FallbackDenied   float64
	Errors                            float64
	PeerChecks                        float64 // decided here for other members
	Degraded                          float64 // answered by a fallback or an heir, not the owner
	HandoffKeys                       float64 // key states handed to other members
	// ForwardP99 and ReplicationLagP99 are negative when nothing was
	// observed in the second.
	ForwardP99, ReplicationLagP99 time.Duration
}

// MaxReservationsShown bounds the open reservations an inspection lists,
// and what a member's answer is read for.
const MaxReservationsShown = 100

// MaxTop bounds the hot-key lists a report carries, and the console's
// merged lists.
const MaxTop = 100
